"""How frames reach a training step and an evaluation: replay buffers, differentiable rollouts, evaluation rollouts
and their batches (the training envs' Sampler and the run's collection are in :mod:`lit_marl.algorithms.collection`;
the training loops that cut batches into minibatches in :mod:`lit_marl.algorithms.loops`)."""

from lit_marl.data.evaluation import EvaluationBatches
from lit_marl.data.replay import TensorPrioritizedSampler

__all__ = ["EvaluationBatches", "TensorPrioritizedSampler"]
