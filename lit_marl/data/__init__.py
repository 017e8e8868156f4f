"""How frames reach a training step: collection (the Sampler), replay buffers and evaluation batches (the training
loops that cut them into minibatches are in :mod:`lit_marl.algorithms.loops`)."""

from lit_marl.data.collection import Sampler
from lit_marl.data.evaluation import EvaluationBatches
from lit_marl.data.replay import TensorPrioritizedSampler

__all__ = ["Sampler", "EvaluationBatches", "TensorPrioritizedSampler"]
