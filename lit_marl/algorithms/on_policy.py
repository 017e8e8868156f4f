"""The run of on-policy learners (the PPO family): train on the frames just collected, then discard them."""

from __future__ import annotations

from typing import Any, ClassVar

from typing_extensions import override

from lit_marl.algorithms.base import MarlAlgorithm
from lit_marl.data import OnPolicyData
from lit_marl.errors import ConfigError, positive_int


class OnPolicyAlgorithm(MarlAlgorithm):
    """The run of on-policy learners: each iteration trains ``n_minibatch_iters`` epochs of shuffled minibatches of
    ``minibatch_size`` frames on the frames just collected, then discards them.

    Args:
        n_minibatch_iters: passes (PPO epochs) over each collected batch.
        minibatch_size: frames per minibatch (one optimizer step each).
    """

    on_policy: ClassVar[bool] = True

    def __init__(self, task, n_minibatch_iters: int = 45, minibatch_size: int = 400, **kwargs: Any) -> None:
        self.n_minibatch_iters = positive_int("n_minibatch_iters", n_minibatch_iters)
        self.minibatch_size = positive_int("minibatch_size", minibatch_size)
        super().__init__(task, **kwargs)

    @override
    def _validate_args(self) -> None:
        if self.minibatch_size > self.frames_per_batch:
            raise ConfigError(
                f"minibatch_size: {self.minibatch_size} is larger than frames_per_batch={self.frames_per_batch}; "
                f"allowed: 1..{self.frames_per_batch}"
            )

    @property
    @override
    def loop_batch_size(self) -> int:
        return self.minibatch_size

    @property
    def minibatches_per_iteration(self) -> int:
        if self.chunk_length is None:
            return self.n_minibatch_iters * (self.frames_per_batch // self.minibatch_size)
        chunks = self.frames_per_batch // self.chunk_length
        return self.n_minibatch_iters * (chunks // (self.minibatch_size // self.chunk_length))

    @override
    def train_dataloader(self) -> OnPolicyData:
        return OnPolicyData(self)
