"""Network builders per group, selected in YAML as ``actor_model`` / ``critic_model``."""

from lit_marl.models.base import ModelConfig
from lit_marl.models.mlp import Mlp

__all__ = ["ModelConfig", "Mlp"]
