"""Issue 34: a run whose environments, collected batch or replay memory cannot fit this machine's memory, or whose
first checkpoint cannot fit the disk, is refused before anything is collected, with the number and the limit
(before: PyTorch's allocation traceback 39 s in and an empty run folder; two tracebacks at the first checkpoint)."""

from __future__ import annotations

from collections import namedtuple
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lit_marl import resources
from lit_marl.algorithms import MADDPG, MAPPO
from lit_marl.errors import ConfigError
from tests.helpers.tiny import tiny_kwargs, tiny_task
from tests.reliability.helpers import QUIET, expect_exit, run_dirs, tiny_config

CPU = torch.device("cpu")


def _off_policy(**overrides) -> dict:
    kwargs = tiny_kwargs(n_optimizer_steps=2, train_batch_size=16, **overrides)
    del kwargs["n_minibatch_iters"], kwargs["minibatch_size"]
    return kwargs


def test_a_step_counts_observations_rewards_and_dones_twice_and_actions_once():
    specs = tiny_task().specs  # balance, 3 agents: 14 float32 observations, a float32 reward, 2 float32 actions each
    observed, action, dones = 3 * 14 * 4 + 3 * 4, 3 * 2 * 4, 2  # the root's done and terminated flags, one byte each
    assert (resources.spec_bytes(specs.observation_spec), resources.spec_bytes(specs.action_spec),
            resources.spec_bytes(specs.done_spec)) == (3 * 14 * 4, action, dones)
    assert resources.step_bytes(specs) == 2 * (observed + dones) + action == 388
    assert resources.transition_bytes(specs, "agents") == 2 * observed + action  # the group's keys only


def test_a_replay_memory_beyond_the_available_memory_is_refused_with_what_fits():
    model = MADDPG(tiny_task(), **_off_policy(memory_size=1_000_000))
    transition = resources.transition_bytes(model.task.specs, "agents")
    with pytest.raises(ConfigError) as refused:
        resources.check_memory(model, 1, CPU, CPU, available={CPU: 100 * 1000 * transition})
    message = str(refused.value)
    assert message.startswith(f"model.init_args.memory_size: 1000000 needs at least "
                              f"{resources.size(1_000_000 * transition)} of cpu memory for the replay memory of group "
                              f"'agents'")
    assert "Allowed: memory_size up to about " in message and "buffer_device: disk" in message
    fits = int(message.split("up to about ")[1].split(",")[0])
    assert 80_000 < fits < 90_000  # 90 % of the memory, less the environments' and the batch's share
    resources.check_memory(MADDPG(tiny_task(), **_off_policy(memory_size=fits)), 1, CPU, CPU,
                           available={CPU: 100 * 1000 * transition})
    # on disk the replay memory takes no memory; on the training device it counts there, not on the CPU
    on_disk = MADDPG(tiny_task(), **_off_policy(memory_size=1_000_000, buffer_device="disk"))
    resources.check_memory(on_disk, 1, CPU, CPU, available={CPU: 100 * 1000 * transition})
    meta = torch.device("meta")
    on_train = MADDPG(tiny_task(), **_off_policy(memory_size=1_000_000, buffer_device="train"))
    resources.check_memory(on_train, 1, CPU, meta, available={CPU: 100 * 1000 * transition, meta: None})


def test_environments_beyond_the_available_memory_are_refused_by_the_command_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(resources, "available_memory", lambda device: 10 ** 6)
    monkeypatch.setattr(MAPPO, "train_dataloader", lambda self: pytest.fail("an environment was built"))
    config = tiny_config(tmp_path / "c.yaml")
    err = expect_exit(capsys, ["fit", "--config", str(config), *QUIET, "--model.init_args.num_envs", "400000",
                               "--model.init_args.frames_per_batch", "400000", "--model.init_args.max_frames",
                               "400000"], 2,
                      "lit-marl: error: model.init_args.", "needs at least", "but 1 MB is available; nothing was "
                      "collected", unchanged=None)
    assert "Traceback" not in err
    assert run_dirs(tmp_path / "runs") == []  # the refused run's folder is gone


def test_a_disk_too_full_for_the_first_checkpoint_is_refused_before_training(tmp_path, capsys, monkeypatch):
    config = tiny_config(tmp_path / "c.yaml")
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(resources.shutil, "disk_usage", lambda path: usage(10 ** 9, 10 ** 9 - 1000, 1000))
    monkeypatch.setattr(MAPPO, "train_dataloader", lambda self: pytest.fail("training started"))
    err = expect_exit(capsys, ["fit", "--config", str(config), *QUIET], 2,
                      "has 1 KB free, but the first checkpoint (after 1 iteration(s): 2 file(s)", "nothing was "
                      "trained", unchanged=None)
    assert "Traceback" not in err
    assert run_dirs(tmp_path / "runs") == []


@pytest.mark.parametrize("algorithm", [MAPPO, MADDPG])
def test_the_first_checkpoint_estimate_is_a_lower_bound_of_the_files_written(tmp_path, algorithm):
    """The refusal says "at least": the estimate never exceeds what the first checkpoint really takes (here the
    periodic file, last.ckpt and, off-policy, the replay memory in one sidecar file that both name)."""
    pl.seed_everything(0)
    kwargs = tiny_kwargs(max_frames=40) if algorithm is MAPPO else _off_policy(max_frames=40, memory_size=100)
    model = algorithm(tiny_task(), **kwargs)
    trainer = pl.Trainer(default_root_dir=tmp_path, max_epochs=1, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, check_val_every_n_epoch=100,
                         callbacks=[ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True, every_n_epochs=1,
                                                    save_on_train_epoch_end=True)])
    estimate = resources.first_checkpoint_bytes(model, 1, copies=2)
    trainer.fit(model)
    written = sum({p.stat().st_ino: p.stat().st_size for p in Path(tmp_path / "ckpt").iterdir()}.values())
    assert 0.5 * written < estimate <= written, (estimate, written)


@pytest.mark.parametrize("failure", [
    RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried "
                 "to allocate 768000000 bytes. Error code 12 (Cannot allocate memory)"),
    torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
])
def test_an_allocation_that_fails_after_the_estimates_is_a_named_error_without_a_traceback(tmp_path, capsys,
                                                                                           monkeypatch, failure):
    """Where the simulator needs more than the estimates see (VMAS's own state per environment), the allocation still
    fails: exit 2 with the allocator's words and what to lower, and the run folder (only its config) removed."""
    def allocate(self):
        raise failure

    monkeypatch.setattr(MAPPO, "train_dataloader", allocate)
    err = expect_exit(capsys, ["fit", "--config", str(tiny_config(tmp_path / "c.yaml")), *QUIET], 2,
                      f"lit-marl: error: out of memory: {str(failure).splitlines()[-1]}. The run's sizes need more "
                      f"memory", "Allowed: a smaller model.init_args.num_envs", unchanged=None)
    assert "Traceback" not in err
    assert run_dirs(tmp_path / "runs") == []
