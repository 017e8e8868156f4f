"""Whole-episode replay (EPyMARL's episode buffer, ``sample_episodes``): the sampler, and QMIX trained with it (its
resume: ``test_q_learning.py::test_qmix_resume_continues_exactly``)."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

from lit_marl.algorithms import MADDPG, QMIX
from lit_marl.data.replay import TRAJECTORY_KEY, EpisodeSampler
from lit_marl.envs import LbfTask
from lit_marl.errors import ConfigError
from lit_marl.models import Gru, Mlp
from tests.helpers.tiny import ddpg_kwargs, tiny_task, tiny_trainer


def _steps(ids: list[int], done: list[int], start: int) -> TensorDict:
    """Stored steps with these collector episode ids and ends; ``x`` numbers them from ``start``."""
    n = len(ids)
    return TensorDict({TRAJECTORY_KEY: torch.tensor(ids), ("next", "done"): torch.tensor(done, dtype=torch.bool)[:, None],
                       "x": torch.arange(start, start + n)}, batch_size=[n])


def _buffer(capacity: int, window: int) -> TensorDictReplayBuffer:
    storage = LazyTensorStorage(capacity)
    return TensorDictReplayBuffer(storage=storage, sampler=EpisodeSampler(storage, window))


def _episodes(buffer: TensorDictReplayBuffer, size: int) -> list[list[int]]:
    """A sample's steps (their ``x``) grouped by the sampler's episode numbers."""
    sample = buffer.sample(size)
    episode = buffer.sampler._episode[sample["index"]]
    return sorted(sorted(sample["x"][episode == i].tolist()) for i in episode.unique())


def test_episode_sampler_draws_whole_complete_episodes_from_the_most_recent():
    buffer = _buffer(100, window=2)
    # two envs, written env after env as the loop flattens [envs, time]; episode 1 spans both batches
    buffer.extend(_steps([0, 0, 0, 2, 2] + [1, 1, 1, 1, 1], [0, 0, 1, 0, 0] + [0, 0, 0, 0, 0], start=0))
    assert buffer.sampler.complete_episodes().tolist() == [0]
    assert sorted(buffer.sample(32)["x"].tolist()) == [0, 1, 2]  # fewer complete episodes than asked: all of them
    buffer.extend(_steps([2, 3, 3, 3, 4] + [1, 1, 5, 5, 5], [1, 0, 0, 1, 0] + [0, 1, 0, 0, 0], start=10))
    assert buffer.sampler.complete_episodes().tolist() == [0, 1, 2, 3]
    # the two most recent complete episodes (collector ids 2 and 3), every step, nothing of 4 and 5 (still running)
    assert _episodes(buffer, 2) == [[3, 4, 10], [11, 12, 13]]
    torch.manual_seed(0)
    draws = [buffer.sample(1)["x"].tolist() for _ in range(2000)]
    assert {tuple(d) for d in draws} == {(3, 4, 10), (11, 12, 13)}
    assert sum(d == [3, 4, 10] for d in draws) / 2000 == pytest.approx(0.5, abs=0.04)  # uniform over episodes


def test_episode_sampler_resumes_with_its_numbers_and_never_merges_a_reused_collector_id():
    buffer = _buffer(100, window=3)
    buffer.extend(_steps([0, 0, 1, 1, 1], [0, 1, 0, 0, 0], start=0))  # collector id 1 is cut by the stop
    restored = _buffer(100, window=3)
    restored.extend(buffer.storage.get(slice(0, len(buffer))))  # what load_buffer_state does, then the state
    restored.sampler.load_state_dict(buffer.sampler.state_dict())
    # the resumed collector numbers its episodes from 0 again
    restored.extend(_steps([0, 0, 0, 1, 1], [0, 0, 1, 0, 1], start=5))
    assert _episodes(restored, 10) == [[0, 1], [5, 6, 7], [8, 9]]  # the cut episode is never drawn


def test_episode_sampler_never_draws_an_episode_the_storage_partly_overwrote():
    buffer = _buffer(8, window=10)
    buffer.extend(_steps([0, 0, 0, 1, 1, 1], [0, 0, 1, 0, 0, 1], start=0))
    buffer.extend(_steps([2, 2, 2, 3], [0, 0, 1, 0], start=6))  # overwrites the first two steps of episode 0
    assert _episodes(buffer, 10) == [[3, 4, 5], [6, 7, 8]]


def _lbf(**kwargs) -> LbfTask:
    """Small and crowded: episodes end at many lengths (the food is collected) within 20 steps."""
    return LbfTask(field_size=5, players=2, max_num_food=1, max_steps=20, action_mask=False, **kwargs)


def _episode_kwargs(**overrides) -> dict:
    kwargs = dict(actor_model=Mlp([32, 32]), frames_per_batch=80, num_envs=4, n_optimizer_steps=4, train_batch_size=4,
                  memory_size=30, sample_episodes=True, max_frames=400, evaluation_episodes=4, lr=1e-3)
    kwargs.update(overrides)
    return kwargs


def test_qmix_trains_on_whole_episodes_of_the_recent_window(tmp_path):
    pl.seed_everything(0)
    model = QMIX(_lbf(), **_episode_kwargs())
    before = [p.detach().clone() for p in model.parameters()]
    tiny_trainer(tmp_path, max_epochs=3, check_val_every_n_epoch=5).fit(model)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    buffer = model.replay_buffers()["agents"]
    assert buffer.storage.max_size == (30 + 2 * 4) * 20  # the window, plus episodes still running or older
    complete = buffer.sampler.complete_episodes()
    assert len(complete) > 4
    sample = buffer.sample(4)
    ids = sample.get(TRAJECTORY_KEY)
    done = sample.get(("next", "done")).reshape(-1)
    assert ids.unique().numel() == 4 and int(done.sum()) == 4  # four episodes, each with its one end
    lengths = sorted((ids == i).sum().item() for i in ids.unique())
    assert len(sample) == sum(lengths) and all(1 <= n <= 20 for n in lengths)
    # each is every stored step of its episode (in the order played: the storage has not wrapped around)
    for i in ids.unique():
        assert done[ids == i].tolist() == [False] * (int((ids == i).sum()) - 1) + [True]


@pytest.mark.parametrize(("overrides", "fragment"), [
    ({"sample_episodes": "yes"}, "sample_episodes: must be true or false, got 'yes'"),
    ({"actor_model": Gru(hidden_size=8)}, "actor_model: 'Gru' does not combine with sample_episodes: true; allowed: "
                                          "a feed-forward model"),
    ({"use_prioritized_replay_buffer": True}, "use_prioritized_replay_buffer: True does not combine with "
                                              "sample_episodes: true"),
])
def test_whole_episode_replay_refuses_what_it_cannot_do_by_name(overrides, fragment):
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(")):
        QMIX(tiny_task(continuous_actions=False), **_episode_kwargs(**overrides))


def test_every_off_policy_algorithm_takes_whole_episodes(tmp_path):
    pl.seed_everything(0)
    model = MADDPG(tiny_task(), **ddpg_kwargs(sample_episodes=True, train_batch_size=2, memory_size=8))
    tiny_trainer(tmp_path, max_epochs=2, check_val_every_n_epoch=5).fit(model)
    assert model.replay_buffers()["agents"].sampler.complete_episodes().tolist() == list(range(8))
