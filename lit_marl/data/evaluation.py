"""Evaluation work: seeded batches of episodes that the validation/test loops roll out."""

from __future__ import annotations

from collections.abc import Iterator


class EvaluationBatches:
    """``num_episodes`` split into batches of at most ``batch_size`` parallel episodes.

    Batch ``i`` is ``{"seed": start_seed + i, "num_envs": k, "first_episode": j}``: the same episodes
    are evaluated every time and for every checkpoint. (A class, not a list: Lightning reads a list
    as several dataloaders.)
    """

    def __init__(self, num_episodes: int, batch_size: int, start_seed: int, rank: int = 0, world_size: int = 1) -> None:
        # under DDP each process evaluates its own num_episodes / world_size episodes, with seeds of its own
        per_rank = num_episodes // world_size
        batch_size = min(batch_size, per_rank)
        starts = range(rank * per_rank, (rank + 1) * per_rank, batch_size)
        first_index = rank * len(range(0, per_rank, batch_size))
        self.batches = [
            {"seed": start_seed + first_index + i, "num_envs": min(batch_size, (rank + 1) * per_rank - first),
             "first_episode": first}
            for i, first in enumerate(starts)
        ]

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[dict[str, int]]:
        return iter(self.batches)
