"""Algorithms: one LightningModule per algorithm, one file per family."""

from lit_marl.algorithms.base import MarlAlgorithm
from lit_marl.algorithms.on_policy import OnPolicyAlgorithm
from lit_marl.algorithms.ddpg import DDPG, IDDPG, MADDPG
from lit_marl.algorithms.ensemble import Ensemble
from lit_marl.algorithms.off_policy import OffPolicyAlgorithm
from lit_marl.algorithms.ppo import IPPO, MAPPO, PPO
from lit_marl.algorithms.q_learning import IQL, QMIX, VDN, QLearning
from lit_marl.algorithms.sac import ISAC, MASAC, SAC

__all__ = ["MarlAlgorithm", "OnPolicyAlgorithm", "OffPolicyAlgorithm", "PPO", "MAPPO", "IPPO", "DDPG",
           "MADDPG", "IDDPG", "SAC", "MASAC", "ISAC",
           "QLearning", "IQL", "VDN", "QMIX", "Ensemble"]
