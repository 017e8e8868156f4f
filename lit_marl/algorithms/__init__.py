"""Algorithms: each a run (a LightningModule) holding one learner per agent group; one file per family.

The learners (what one group learns) are :class:`GroupLearner` and its families :class:`PPO`, :class:`DDPG`,
:class:`SAC` and :class:`QLearning`; the algorithms (``MAPPO``, ``QMIX``…) pair a family with the run it needs.
"""

from lit_marl.algorithms.base import MarlAlgorithm
from lit_marl.algorithms.learner import GroupLearner, RunFacts
from lit_marl.algorithms.on_policy import OnPolicyAlgorithm
from lit_marl.algorithms.off_policy import OffPolicyAlgorithm, OffPolicyLearner
from lit_marl.algorithms.ddpg import DDPG, IDDPG, MADDPG
from lit_marl.algorithms.ensemble import Ensemble
from lit_marl.algorithms.happo import HAPPO, SequentialPPO
from lit_marl.algorithms.hatrpo import HATRPO, TrustRegionPPO
from lit_marl.algorithms.ppo import IPPO, MAPPO, PPO
from lit_marl.algorithms.q_learning import IQL, QMIX, VDN, QLearning
from lit_marl.algorithms.sac import ISAC, MASAC, SAC

__all__ = ["MarlAlgorithm", "OnPolicyAlgorithm", "OffPolicyAlgorithm", "GroupLearner", "OffPolicyLearner",
           "RunFacts", "PPO", "MAPPO", "IPPO", "DDPG", "MADDPG", "IDDPG", "SAC", "MASAC", "ISAC", "QLearning", "IQL",
           "VDN", "QMIX", "HAPPO", "SequentialPPO", "HATRPO", "TrustRegionPPO", "Ensemble"]
