"""Training data of off-policy algorithms (DESIGN.md §2): collect, store, then sample many minibatches
(:class:`~lit_marl.algorithms.loops.OffPolicyLoop` iterates them)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import TensorDictReplayBuffer


class OffPolicySource(Protocol):
    """What :func:`replay_minibatches` reads of the run it collects for (a ``MarlAlgorithm``)."""

    device: torch.device
    world_size: int
    chunk_length: int | None
    burn_in: int

    def collect_batch(self) -> TensorDictBase: ...
    def process_batch(self, batch: TensorDictBase) -> TensorDictBase: ...
    def replay_buffers(self) -> dict[str, TensorDictReplayBuffer]: ...
    def group_keys(self, group: str) -> list: ...
    def mark_training_start(self) -> None: ...


def replay_minibatches(run: OffPolicySource, steps: int, batch_size: int) -> Iterator[TensorDictBase]:
    """Collect ``frames_per_batch`` frames, add each group's part to that group's replay buffer, then yield ``steps``
    minibatches ``{group: sample}`` of ``batch_size`` transitions each (with a recurrent policy: slices of
    ``burn_in + chunk_length`` consecutive steps)."""
    batch = run.collect_batch()
    with torch.no_grad():
        batch = run.process_batch(batch)
    buffers = run.replay_buffers()
    for group, buffer in buffers.items():
        buffer.extend(batch.select(*run.group_keys(group), strict=False).reshape(-1))
    run.mark_training_start()
    size = batch_size // run.world_size  # DDP: each process's share of the global minibatch
    if run.chunk_length is None:
        for _ in range(steps):
            samples = {group: buffer.sample(size).to(run.device) for group, buffer in buffers.items()}
            yield TensorDict(samples, batch_size=[size], device=run.device)
        return
    # recurrent policy: [slices, burn_in + chunk_length] of consecutive steps
    span = run.burn_in + run.chunk_length
    slices = max(1, size // run.chunk_length)
    for _ in range(steps):
        samples = {group: buffer.sample(slices * span).reshape(slices, span).to(run.device)
                   for group, buffer in buffers.items()}
        yield TensorDict(samples, batch_size=[slices, span], device=run.device)
