"""How frames reach a training step: collection, on-policy iterables, evaluation batches."""

from lit_marl.data.collection import Sampler
from lit_marl.data.evaluation import EvaluationBatches
from lit_marl.data.off_policy import OffPolicyData
from lit_marl.data.on_policy import OnPolicyData
from lit_marl.data.replay import TensorPrioritizedSampler

__all__ = ["OnPolicyData", "OffPolicyData", "Sampler", "EvaluationBatches", "TensorPrioritizedSampler"]
