"""The run's collection (algorithms/collection.py) on its own: the ``collection/…`` metrics of a collected batch."""

from __future__ import annotations

import pytest
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
    assert metrics["collection/episodes"] == 2
    quiet = collection_metrics(["g"], done_rollout([[False] * 4]))
    assert "collection/g/reward/episode_reward_mean" not in quiet and quiet["collection/episodes"] == 0


def test_collection_metrics_count_episodes_by_the_groups_where_the_env_has_no_root_done():
    batch = done_rollout([[False, True, False, True], [True, False, False, False]])
    nxt = batch.get("next")
    root = nxt.pop("done")
    nxt.set(("g", "done"), root.unsqueeze(-2).expand(2, 4, 3, 1).clone())  # every agent of the group ends together
    nxt.set(("g", "episode_reward"), torch.ones(2, 4, 3, 1))
    assert collection_metrics(["g"], batch)["collection/episodes"] == 3


@pytest.mark.parametrize("algorithm", ["mappo", "maddpg"])
def test_training_time_counts_processing_the_batch_and_collection_time_does_not(algorithm, tmp_path, monkeypatch):
    """``timers/training_time`` runs from the end of the collection (what BenchMARL's and a bare torchrl loop's
    training time counts: GAE, the replay buffer's extend, the updates), ``timers/collection_time`` is the collection.

    On a fake clock that only processing the batch advances (by exactly 1 s), so no machine's speed decides it."""
    import csv
    import types

    from lit_marl.algorithms import MADDPG, MAPPO, base, collection
    from tests.helpers.tiny import ddpg_kwargs, tiny_kwargs, tiny_task, tiny_trainer

    clock = [100.0]
    fake_time = types.SimpleNamespace(perf_counter=lambda: clock[0])
    for module in (base, collection):
        monkeypatch.setattr(module, "time", fake_time)
    model = MAPPO(tiny_task(), **tiny_kwargs()) if algorithm == "mappo" else MADDPG(tiny_task(), **ddpg_kwargs())
    process_batch = model.process_batch

    def slow_process_batch(batch):
        clock[0] += 1.0
        return process_batch(batch)

    monkeypatch.setattr(model, "process_batch", slow_process_batch)
    trainer = tiny_trainer(tmp_path, max_epochs=1, limit_val_batches=0)
    trainer.fit(model)
    rows = [r for r in csv.DictReader(open(tmp_path / "run" / "version_0" / "metrics.csv"))
            if r.get("timers/iteration_time")]
    collection_time, training, iteration = (float(rows[0][f"timers/{t}_time"]) for t in ("collection", "training",
                                                                                           "iteration"))
    assert (collection_time, training, iteration) == (0.0, 1.0, 1.0)
