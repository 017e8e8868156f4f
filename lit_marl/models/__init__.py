"""Network builders per group, selected in YAML as ``actor_model`` / ``critic_model``."""

from lit_marl.models.base import ModelConfig, ModelInputs
from lit_marl.models.cnn import Cnn
from lit_marl.models.deepsets import DeepSets
from lit_marl.models.gnn import Gnn
from lit_marl.models.mlp import Mlp
from lit_marl.models.recurrent import Gru, Lstm
from lit_marl.models.sequence import Sequence

__all__ = ["Cnn", "DeepSets", "Gnn", "Gru", "Lstm", "ModelConfig", "ModelInputs", "Mlp", "Sequence"]
