"""Algorithms: one LightningModule per algorithm, one file per family."""

from lit_marl.algorithms.base import MarlAlgorithm, OnPolicyAlgorithm
from lit_marl.algorithms.ppo import IPPO, MAPPO, PPO

__all__ = ["MarlAlgorithm", "OnPolicyAlgorithm", "PPO", "MAPPO", "IPPO"]
