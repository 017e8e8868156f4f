"""The run's collection (algorithms/collection.py) on its own: the ``collection/…`` metrics of a collected batch."""

from __future__ import annotations

import torch

from lit_marl.algorithms.collection import collection_metrics
from tests.helpers.tiny import done_rollout


def test_collection_metrics_average_the_episodes_that_ended():
    batch = done_rollout([[False, True, False, True], [False, False, False, False]])
    batch.set(("next", "g", "episode_reward"), torch.arange(8.0).reshape(2, 4, 1, 1).expand(2, 4, 3, 1).clone())
    metrics = collection_metrics(["g"], batch)
    assert metrics["collection/g/reward/reward_mean"] == 1.0
    assert metrics["collection/g/reward/episode_reward_mean"] == (1.0 + 3.0) / 2  # env 0's steps 1 and 3
    assert metrics["collection/reward/episode_reward_mean"] == 2.0
    assert "collection/g/reward/episode_reward_mean" not in collection_metrics(["g"], done_rollout([[False] * 4]))
