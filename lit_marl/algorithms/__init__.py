"""Algorithms: each a run (a LightningModule) holding one learner per agent group; one file per family.

The learners (what one group learns) are :class:`GroupLearner` and its families :class:`PPO`, :class:`DDPG`,
:class:`SAC` and :class:`QLearning` (and the agents-in-turn learners of HAPPO, HATRPO and HASAC); each names the training loop it needs (:mod:`lit_marl.algorithms.loops`), which
the run holds; the algorithms (``MAPPO``, ``QMIX``…) are runs of one family.
"""

from lit_marl.algorithms.base import MarlAlgorithm
from lit_marl.algorithms.learner import GroupLearner, RunFacts
from lit_marl.algorithms.loops import OffPolicyLoop, OnPolicyLoop, SequentialAgents, TrainingLoop
from lit_marl.algorithms.off_policy import OffPolicyLearner
from lit_marl.algorithms.ddpg import DDPG, IDDPG, MADDPG
from lit_marl.algorithms.ensemble import Ensemble
from lit_marl.algorithms.happo import HAPPO, SequentialPPO
from lit_marl.algorithms.hatrpo import HATRPO, TrustRegionPPO
from lit_marl.algorithms.hasac import HASAC, SequentialSAC
from lit_marl.algorithms.ppo import IPPO, MAPPO, PPO
from lit_marl.algorithms.q_learning import IQL, QMIX, VDN, QLearning
from lit_marl.algorithms.sac import ISAC, MASAC, SAC

#: An alias of :class:`MarlAlgorithm` under the name of a former base (of the on-policy algorithms, of the
#: replay-buffer ones): a subclass written against it still builds, and its learner names the loop it trains with
OnPolicyAlgorithm = OffPolicyAlgorithm = MarlAlgorithm

__all__ = ["MarlAlgorithm", "OnPolicyAlgorithm", "OffPolicyAlgorithm", "GroupLearner", "OffPolicyLearner",
           "TrainingLoop", "OnPolicyLoop", "OffPolicyLoop", "SequentialAgents",
           "RunFacts", "PPO", "MAPPO", "IPPO", "DDPG", "MADDPG", "IDDPG", "SAC", "MASAC", "ISAC", "QLearning", "IQL",
           "VDN", "QMIX", "HAPPO", "SequentialPPO", "HATRPO", "TrustRegionPPO", "HASAC", "SequentialSAC", "Ensemble"]
