"""How frames reach a training step: collection, on-policy iterables, evaluation batches."""

from lit_marl.data.collection import Sampler
from lit_marl.data.evaluation import EvaluationBatches
from lit_marl.data.on_policy import OnPolicyData

__all__ = ["OnPolicyData", "Sampler", "EvaluationBatches"]
