"""Shared base of on-policy algorithms (the PPO family): train on the frames just collected, then discard them."""

from __future__ import annotations

from typing import ClassVar

from typing_extensions import override

from lit_marl.algorithms.base import MarlAlgorithm
from lit_marl.data import OnPolicyData
from lit_marl.errors import ConfigError


class OnPolicyAlgorithm(MarlAlgorithm):
    """Base of on-policy algorithms: each iteration trains ``n_minibatch_iters`` epochs of shuffled
    minibatches of ``minibatch_size`` frames on the frames just collected, then discards them."""

    on_policy: ClassVar[bool] = True
    #: set by the subclass's ``__init__`` (before ``super().__init__``)
    n_minibatch_iters: int
    minibatch_size: int

    @override
    def _validate_args(self) -> None:
        if self.minibatch_size > self.frames_per_batch:
            raise ConfigError(
                f"minibatch_size: {self.minibatch_size} is larger than frames_per_batch={self.frames_per_batch}; "
                f"allowed: 1..{self.frames_per_batch}"
            )

    @property
    def chunk_length(self) -> int | None:
        """Steps per training chunk where the algorithm trains on trajectory chunks (recurrent networks);
        None: minibatches of shuffled single steps."""
        return None

    @property
    def minibatches_per_iteration(self) -> int:
        if self.chunk_length is None:
            return self.n_minibatch_iters * (self.frames_per_batch // self.minibatch_size)
        chunks = self.frames_per_batch // self.chunk_length
        return self.n_minibatch_iters * (chunks // (self.minibatch_size // self.chunk_length))

    @override
    def train_dataloader(self) -> OnPolicyData:
        return OnPolicyData(self)
