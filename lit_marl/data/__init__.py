"""How frames reach a training step: collection, the training batch and its minibatches, evaluation batches."""

from lit_marl.data.collection import Sampler
from lit_marl.data.evaluation import EvaluationBatches
from lit_marl.data.off_policy import replay_minibatches
from lit_marl.data.on_policy import shuffled_minibatches, training_batch
from lit_marl.data.replay import TensorPrioritizedSampler

__all__ = ["training_batch", "shuffled_minibatches", "replay_minibatches", "Sampler", "EvaluationBatches", "TensorPrioritizedSampler"]
