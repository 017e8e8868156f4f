"""Training data of on-policy algorithms (DESIGN.md §2): one iteration's processed frames and their shuffled
minibatches (:class:`~lit_marl.algorithms.loops.OnPolicyLoop` iterates them)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import torch
from tensordict import TensorDictBase


class OnPolicySource(Protocol):
    """What :func:`training_batch` reads of the run it collects for (a ``MarlAlgorithm``)."""

    device: torch.device
    world_size: int
    chunk_length: int | None

    def collect_batch(self) -> TensorDictBase: ...
    def process_batch(self, batch: TensorDictBase) -> TensorDictBase: ...
    def training_keys(self) -> list: ...
    def mark_training_start(self) -> None: ...


def training_batch(run: OnPolicySource, minibatch_size: int) -> tuple[TensorDictBase, int]:
    """This iteration's frames, collected and processed (without grad), reduced to the training keys and flattened
    (with recurrent networks: cut into trajectory chunks ``[chunks, chunk_length]``, in time order), on the training
    device; and this process's minibatch size (in frames, or in chunks)."""
    batch = run.collect_batch()
    with torch.no_grad():
        batch = run.process_batch(batch)
    batch = batch.select(*run.training_keys(), strict=False)
    if run.chunk_length is not None:
        batch = batch.reshape(-1, run.chunk_length).to(run.device)
        size = minibatch_size // run.world_size // run.chunk_length
    else:
        batch = batch.reshape(-1).to(run.device)
        size = minibatch_size // run.world_size  # DDP: each process's share of the global minibatch
    run.mark_training_start()
    return batch, size


def shuffled_minibatches(batch: TensorDictBase, epochs: int, size: int) -> Iterator[TensorDictBase]:
    """``epochs`` passes over ``batch`` (its first dim) in shuffled minibatches of ``size`` (a remainder is left out)."""
    n = batch.shape[0]
    for _ in range(epochs):
        # one gather per epoch; each minibatch is a view of it (the same minibatches as a gather per step)
        shuffled = batch[torch.randperm(n, device=batch.device)]
        for start in range(0, n - size + 1, size):
            yield shuffled[start : start + size]
