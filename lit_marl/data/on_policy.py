"""Training data of on-policy algorithms (DESIGN.md §2): one pass = one collection iteration."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import torch
from tensordict import TensorDictBase


class OnPolicySource(Protocol):
    """What :class:`OnPolicyData` reads of an on-policy algorithm (``OnPolicyAlgorithm`` is one)."""

    device: torch.device
    world_size: int
    n_minibatch_iters: int
    minibatch_size: int
    chunk_length: int | None
    minibatches_per_iteration: int

    def collect_batch(self) -> TensorDictBase: ...
    def process_batch(self, batch: TensorDictBase) -> TensorDictBase: ...
    def training_keys(self) -> list: ...
    def mark_training_start(self) -> None: ...


class OnPolicyData:
    """Sized iterable: collect a batch, process it (e.g. GAE) without grad, then yield
    ``n_minibatch_iters`` epochs of shuffled minibatches of ``minibatch_size`` frames (with recurrent networks:
    of ``minibatch_size // chunk_length`` shuffled trajectory chunks ``[chunks, chunk_length]``).

    The length lets Lightning know where the epoch ends, so it never prefetches (and so never
    collects) ahead of the last update.
    """

    def __init__(self, algorithm: OnPolicySource) -> None:
        self.algorithm = algorithm

    def __len__(self) -> int:
        return self.algorithm.minibatches_per_iteration

    def __iter__(self) -> Iterator[TensorDictBase]:
        batch, size = self.training_batch()
        yield from shuffled_minibatches(batch, self.algorithm.n_minibatch_iters, size)

    def training_batch(self) -> tuple[TensorDictBase, int]:
        """This iteration's frames, collected and processed (without grad), reduced to the training keys and flattened
        (or cut into trajectory chunks), on the training device; and the minibatch size of this process."""
        algo = self.algorithm
        batch = algo.collect_batch()
        with torch.no_grad():
            batch = algo.process_batch(batch)
        batch = batch.select(*algo.training_keys(), strict=False)
        if algo.chunk_length is not None:
            # [num_envs, steps] -> [chunks, chunk_length]: minibatches of whole trajectory chunks, in time order
            batch = batch.reshape(-1, algo.chunk_length).to(algo.device)
            size = algo.minibatch_size // algo.world_size // algo.chunk_length
        else:
            batch = batch.reshape(-1).to(algo.device)
            size = algo.minibatch_size // algo.world_size  # DDP: each process's share of the global minibatch
        algo.mark_training_start()
        return batch, size


def shuffled_minibatches(batch: TensorDictBase, epochs: int, size: int) -> Iterator[TensorDictBase]:
    """``epochs`` passes over ``batch`` (its first dim) in shuffled minibatches of ``size`` (a remainder is left out)."""
    n = batch.shape[0]
    for _ in range(epochs):
        # one gather per epoch; each minibatch is a view of it (the same minibatches as a gather per step)
        shuffled = batch[torch.randperm(n, device=batch.device)]
        for start in range(0, n - size + 1, size):
            yield shuffled[start : start + size]
