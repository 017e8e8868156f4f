"""Evaluation work: seeded batches of episodes that the validation/test loops roll out."""

from __future__ import annotations

from collections.abc import Iterator


class EvaluationBatches:
    """``num_episodes`` split into batches of at most ``batch_size`` parallel episodes.

    Batch ``i`` is ``{"seed": start_seed + i, "num_envs": k, "first_episode": j}``: the same episodes
    are evaluated every time and for every checkpoint. (A class, not a list: Lightning reads a list
    as several dataloaders.)
    """

    def __init__(self, num_episodes: int, batch_size: int, start_seed: int) -> None:
        self.batches = [
            {"seed": start_seed + i, "num_envs": min(batch_size, num_episodes - first), "first_episode": first}
            for i, first in enumerate(range(0, num_episodes, batch_size))
        ]

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[dict[str, int]]:
        return iter(self.batches)
