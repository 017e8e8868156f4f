"""The rooms of lit_marl/data and lit_marl/callbacks on their own: per-group replay buffers (data/replay.py), the
first-episode mask and returns (data/evaluator.py) and the callbacks an
algorithm brings to a plain Trainer (callbacks/)."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from tensordict import TensorDict
from torchrl.data import LazyMemmapStorage, LazyTensorStorage, RandomSampler, SliceSampler

from lit_marl.algorithms import MAPPO
from lit_marl.callbacks import FrameBudget, MetricsFileRepair, NumericalFaultPolicy, PreemptionCheckpoint
from lit_marl.data.evaluator import episode_returns, first_episode_mask
from lit_marl.data.replay import ReplayShape, TensorPrioritizedSampler, buffer_state, group_buffers
from lit_marl.models import Mlp
from tests.helpers.tiny import done_rollout, tiny_task


def _transitions(n: int, start: float = 0.0) -> TensorDict:
    values = torch.arange(start, start + n, dtype=torch.float32)
    return TensorDict({("a", "obs"): values.reshape(n, 1, 1).expand(n, 2, 1).clone()}, batch_size=[n])


@pytest.mark.parametrize("shape, storage, sampler", [
    (ReplayShape(8), LazyTensorStorage, RandomSampler),
    (ReplayShape(8, where="disk"), LazyMemmapStorage, RandomSampler),
    (ReplayShape(8, priority=(0.6, 0.4)), LazyTensorStorage, TensorPrioritizedSampler),
    (ReplayShape(8, slice_length=3), LazyTensorStorage, SliceSampler),
])
def test_a_replay_shape_chooses_storage_and_sampler(tmp_path, shape, storage, sampler):
    buffers = group_buffers({"a": shape, "b": shape}, torch.device("cpu"), tmp_path)
    assert list(buffers) == ["a", "b"] and buffers["a"] is not buffers["b"]
    assert type(buffers["a"].storage) is storage and type(buffers["a"].sampler) is sampler
    if shape.where == "disk":
        buffers["a"].extend(_transitions(4))
        assert (tmp_path / "a").is_dir()  # each group's memory-mapped file in its own folder


def test_group_buffers_restore_contents_cursor_and_priorities(tmp_path):
    shape = ReplayShape(8, priority=(0.6, 0.4))
    original = group_buffers({"a": shape}, torch.device("cpu"), tmp_path)
    original["a"].extend(_transitions(6))
    original["a"].extend(_transitions(5, start=100.0))  # wraps around: 11 writes into 8 slots
    original["a"].update_priority(torch.tensor([1, 4]), torch.tensor([3.0, 0.5]))
    state = {"a": buffer_state(original["a"])}
    restored = group_buffers({"a": shape}, torch.device("cpu"), tmp_path, restored=state)["a"]
    assert len(restored) == 8
    assert torch.equal(restored.storage.get(slice(0, 8)).get(("a", "obs")),
                       original["a"].storage.get(slice(0, 8)).get(("a", "obs")))
    assert torch.equal(restored.sampler._priority, original["a"].sampler._priority)
    restored.extend(_transitions(1, start=500.0))  # the next write lands where the original's would
    original["a"].extend(_transitions(1, start=500.0))
    assert torch.equal(restored.storage.get(slice(0, 8)).get(("a", "obs")),
                       original["a"].storage.get(slice(0, 8)).get(("a", "obs")))


def test_the_first_episode_mask_ends_with_the_step_that_ended_it():
    rollout = done_rollout([[False, True, False, True], [False, False, False, False]])
    mask = first_episode_mask(["done"], rollout)
    assert mask.tolist() == [[True, True, False, False], [True, True, True, True]]
    rollout.set(("episode", "mask"), mask)
    assert episode_returns(["g"], rollout)["g"].tolist() == [2.0, 4.0]  # only the first episode's steps count


def test_a_plain_trainer_gets_the_algorithms_own_callbacks(tmp_path):
    model = MAPPO(tiny_task(), actor_model=Mlp([8]), critic_model=Mlp([8]), frames_per_batch=40, num_envs=4,
                  minibatch_size=20, n_minibatch_iters=1, max_frames=80, evaluation_episodes=2)
    trainer = pl.Trainer(max_epochs=50, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=tmp_path, limit_val_batches=0)
    trainer.fit(model)
    kinds = {type(c) for c in trainer.callbacks}
    assert {FrameBudget, NumericalFaultPolicy, MetricsFileRepair, PreemptionCheckpoint} <= kinds
    assert model.frames == 80 and trainer.current_epoch == 2  # FrameBudget stopped it, not max_epochs=50


def test_on_policy_minibatches_are_the_shuffled_frames_of_one_permutation_per_epoch():
    from types import SimpleNamespace

    from lit_marl.algorithms.loops import shuffled_minibatches, training_batch

    frames = TensorDict({"x": torch.arange(12.0)}, batch_size=[12])
    collection = SimpleNamespace(collect=lambda: frames.clone(), mark_training_start=lambda: None)
    source = SimpleNamespace(device=torch.device("cpu"), world_size=1, chunk_length=None, collection=collection,
                             process_batch=lambda b: b, training_keys=lambda: ["x"])
    torch.manual_seed(3)
    batch, size = training_batch(source, minibatch_size=4)
    minibatches = [mb.get("x") for mb in shuffled_minibatches(batch, 2, size)]
    torch.manual_seed(3)
    orders = [torch.randperm(12) for _ in range(2)]
    expected = [order[i:i + 4].float() for order in orders for i in range(0, 12, 4)]
    assert len(minibatches) == 6 and all(torch.equal(a, b) for a, b in zip(minibatches, expected))
