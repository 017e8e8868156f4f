"""Training data of off-policy algorithms (DESIGN.md §2): collect, store, then sample many minibatches."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import TensorDictReplayBuffer


class OffPolicySource(Protocol):
    """What :class:`OffPolicyData` reads of an off-policy algorithm (``OffPolicyAlgorithm`` is one)."""

    device: torch.device
    world_size: int
    n_optimizer_steps: int
    train_batch_size: int
    chunk_length: int | None
    burn_in: int

    def collect_batch(self) -> TensorDictBase: ...
    def process_batch(self, batch: TensorDictBase) -> TensorDictBase: ...
    def replay_buffers(self) -> dict[str, TensorDictReplayBuffer]: ...
    def group_keys(self, group: str) -> list: ...
    def mark_training_start(self) -> None: ...


class OffPolicyData:
    """Sized iterable: one pass collects ``frames_per_batch`` frames, adds each group's part to that
    group's replay buffer, then yields ``n_optimizer_steps`` minibatches ``{group: sample}`` of
    ``train_batch_size`` transitions each.

    The length stops Lightning from prefetching (and so collecting) ahead of the last update.
    """

    def __init__(self, algorithm: OffPolicySource) -> None:
        self.algorithm = algorithm

    def __len__(self) -> int:
        return self.algorithm.n_optimizer_steps

    def __iter__(self) -> Iterator[TensorDictBase]:
        algo = self.algorithm
        batch = algo.collect_batch()
        with torch.no_grad():
            batch = algo.process_batch(batch)
        buffers = algo.replay_buffers()
        for group, buffer in buffers.items():
            buffer.extend(batch.select(*algo.group_keys(group), strict=False).reshape(-1))
        algo.mark_training_start()
        size = algo.train_batch_size // algo.world_size  # DDP: each process's share of the global minibatch
        if algo.chunk_length is None:
            for _ in range(algo.n_optimizer_steps):
                samples = {group: buffer.sample(size).to(algo.device) for group, buffer in buffers.items()}
                yield TensorDict(samples, batch_size=[size], device=algo.device)
            return
        # recurrent policy: [slices, burn_in + chunk_length] of consecutive steps
        span = algo.burn_in + algo.chunk_length
        slices = max(1, size // algo.chunk_length)
        for _ in range(algo.n_optimizer_steps):
            samples = {group: buffer.sample(slices * span).reshape(slices, span).to(algo.device)
                       for group, buffer in buffers.items()}
            yield TensorDict(samples, batch_size=[slices, span], device=algo.device)
