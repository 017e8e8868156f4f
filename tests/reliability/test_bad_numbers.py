"""Issue 48 §6, bad inputs, third round: numbers refused by name before anything is built.

Lightning's own Trainer and ModelCheckpoint settings given a negative, NaN or infinite value gave tracebacks (some only
after an iteration's work) or were taken silently; they are now refused as lit-marl refuses its own (field, value, what
is allowed; exit 2, nothing written), and the values Lightning documents with a meaning (-1: no limit, every batch,
every checkpoint, every device) keep it. Evaluation settings, HASAC's ``n_step`` and a replay memory on a disk too
small are refused at start instead of after the first iteration's work."""

from __future__ import annotations

import json
import os
from collections import namedtuple
from pathlib import Path

import pytest
import yaml

from lit_marl import envs, resources
from lit_marl.algorithms import MADDPG, MAPPO
from lit_marl.algorithms.evaluation import Evaluation
from lit_marl.callbacks import EvaluationReport
from lit_marl.cli import LitMarlCLI, main
from lit_marl.errors import ConfigError
from tests.helpers.runs import tiny_grid
from tests.helpers.tiny import CONFIGS
from tests.reliability.helpers import QUIET, expect_exit, run_dirs, tiny_config

QUICKSTART = str(CONFIGS / "quickstart.yaml")


class Built(Exception):
    """The command got past its checks to building the run's objects."""


@pytest.fixture
def nothing_built(monkeypatch):
    """Building the model, Trainer and callbacks raises :class:`Built`: a case refused before it is refused before
    anything is built (and before the seed is set)."""
    def built(self, *args, **kwargs):
        raise Built()

    monkeypatch.setattr(LitMarlCLI, "instantiate_classes", built)


def _task_classes(base: type = envs.Task) -> list[type]:
    """Task and every subclass of it (those of optional simulators too, once imported)."""
    return [base] + [sub for cls in base.__subclasses__() for sub in _task_classes(cls)]


@pytest.fixture
def no_env(monkeypatch):
    """No environment (not even the probe that finds the agent groups) may be built."""
    def refuse(*args, **kwargs):
        pytest.fail("an environment was built before the refusal")

    monkeypatch.setattr("lit_marl.envs.vmas.BatchedResetVmasEnv", refuse)
    for cls in _task_classes():
        for method in ("make_env", "_make_env"):  # the probe that finds the groups calls _make_env
            if method in vars(cls):
                monkeypatch.setattr(cls, method, refuse)


# (command-line arguments after `fit --config quickstart.yaml`, fragments of the error line): each of Lightning's
# numbers, and the evaluation report's, refused once parsed (before: a traceback, or accepted)
LIGHTNING_CASES = [
    (["--trainer.limit_train_batches", "-1"], "trainer.limit_train_batches: must be a fraction in [0.0, 1.0] or a "
                                              "number of batches (an integer >= 0), got -1"),
    (["--trainer.limit_val_batches", ".nan"], "trainer.limit_val_batches: must be a fraction", "got nan"),
    (["--trainer.limit_test_batches", ".inf"], "trainer.limit_test_batches: must be a fraction", "got inf"),
    (["--trainer.limit_predict_batches", "-0.5"], "trainer.limit_predict_batches: must be", "got -0.5"),
    (["--trainer.overfit_batches", "-1"], "trainer.overfit_batches: must be a fraction", "got -1"),
    (["--trainer.val_check_interval", "-1"], "trainer.val_check_interval: must be a fraction of an iteration",
     "a duration", "got -1"),
    (["--trainer.val_check_interval", ".inf"], "trainer.val_check_interval: must be", "got inf"),
    (["--trainer.num_nodes", "-1"], "trainer.num_nodes: must be an integer >= 1, got -1"),
    (["--trainer.num_nodes", "0"], "trainer.num_nodes: must be an integer >= 1, got 0"),
    (["--trainer.devices", "-2"], "trainer.devices: must be -1 (every device), a number of devices >= 1",
     "got -2"),
    (["--trainer.devices", "[0, -1]"], "trainer.devices: the device index -1 in [0, -1] is not an integer >= 0"),
    (["--trainer.check_val_every_n_epoch", "-1"], "trainer.check_val_every_n_epoch: must be a number of "
                                                  "iterations >= 1, or null, got -1"),
    (["--trainer.check_val_every_n_epoch", "0"], "trainer.check_val_every_n_epoch: must be", "got 0"),
    (["--trainer.log_every_n_steps", "-1"], "trainer.log_every_n_steps: must be a number of steps >= 0", "got -1"),
    (["--trainer.max_epochs", "-2"], "trainer.max_epochs: must be -1 (no limit: the frame budget", "got -2"),
    (["--trainer.min_epochs", "-1"], "trainer.min_epochs: must be a number of iterations >= 0", "got -1"),
    (["--trainer.max_steps", "-2"], "trainer.max_steps: must be -1 (no limit", "got -2"),
    (["--trainer.min_steps", "-1"], "trainer.min_steps: must be a number of optimizer steps >= 0", "got -1"),
    (["--trainer.accumulate_grad_batches", "-1"], "trainer.accumulate_grad_batches: must be an integer >= 1",
     "got -1"),
    (["--trainer.num_sanity_val_steps", "-2"], "trainer.num_sanity_val_steps: must be -1 (every validation batch)",
     "got -2"),
    (["--trainer.gradient_clip_val", ".inf"], "trainer.gradient_clip_val: must be a finite number >= 0, got inf"),
    (["--trainer.gradient_clip_val", ".nan"], "trainer.gradient_clip_val: must be a finite number >= 0, got nan"),
    (["--trainer.reload_dataloaders_every_n_epochs", "-1"], "trainer.reload_dataloaders_every_n_epochs: must be",
     "got -1"),
    (["--trainer.fast_dev_run", "-1"], "trainer.fast_dev_run: must be true, false, or a number of batches >= 0"),
    (["--trainer.logger.init_args.flush_logs_every_n_steps", "0"],
     "trainer.logger.init_args.flush_logs_every_n_steps: must be a number of steps >= 1, got 0"),
    (["--checkpoint.every_n_epochs", "-1"], "checkpoint.every_n_epochs: must be a number of iterations >= 0 (0: no "
                                            "periodic checkpoint", "got -1"),
    (["--checkpoint.every_n_train_steps", "-1"], "checkpoint.every_n_train_steps: must be", "got -1"),
    (["--checkpoint.save_top_k", "-2"], "checkpoint.save_top_k: must be -1 (keep every checkpoint)", "got -2"),
    (["--seed_everything", "-1"], "seed_everything: must be an integer in 0..4294967295 (numpy's seed range), got -1",
     "true (a random seed"),
    (["--seed_everything", "4294967296"], "seed_everything: must be an integer in 0..4294967295"),
    (["--evaluation.n_resamples", "0"], "evaluation.n_resamples: must be a number of bootstrap resamples >= 1",
     "got 0"),
    (["--evaluation.n_resamples", "-1"], "evaluation.n_resamples: must be", "got -1"),
    (["--evaluation.fps", "-1"], "evaluation.fps: must be an integer >= 1, got -1"),
    (["--evaluation.confidence", ".nan"], "evaluation.confidence: must be a number in (0, 1)", "got nan"),
]


@pytest.mark.parametrize(("args", "fragments"), [pytest.param(case[0], case[1:], id=" ".join(case[0]))
                                                 for case in LIGHTNING_CASES])
def test_lightning_number_is_refused_by_name_before_anything_is_built(capsys, nothing_built, args, fragments):
    err = expect_exit(capsys, ["fit", "--config", QUICKSTART, *args], 2, "lit-marl: error: ", *fragments)
    assert "Traceback" not in err


#: the values Lightning documents with a meaning, kept (lit-marl's README says what they mean)
DOCUMENTED = [
    (["--trainer.max_epochs", "-1"], "no limit: the frame budget (model.init_args.max_frames) ends training"),
    (["--trainer.max_steps", "-1"], "no limit on optimizer steps (Lightning's default)"),
    (["--trainer.num_sanity_val_steps", "-1"], "every validation batch in the sanity check"),
    (["--checkpoint.save_top_k", "-1"], "keep every periodic checkpoint"),
    (["--trainer.devices", "-1"], "every device"),
    (["--checkpoint.every_n_epochs", "0"], "no periodic checkpoint (last.ckpt still written)"),
    (["--seed_everything", "true"], "a random seed (printed)"),
]


@pytest.mark.parametrize(("args", "meaning"), [pytest.param(a, m, id=" ".join(a)) for a, m in DOCUMENTED])
def test_documented_special_values_keep_their_meaning(capsys, nothing_built, args, meaning):
    with pytest.raises(Built):
        main(["fit", "--config", QUICKSTART, *args])
    assert "lit-marl: error" not in capsys.readouterr().err


def _first_line(err: str) -> str:
    return next(line for line in err.splitlines() if line.startswith("lit-marl: error: "))


# the evaluation settings: refused when the run is built, before any environment (before: at the first evaluation,
# after an iteration's work, with numpy's traceback; or blamed on another field)
@pytest.mark.parametrize(("args", "fragment"), [
    (["--model.init_args.evaluation_seed", "-1"],
     "evaluation_seed: must be an integer in 0..4294967295 (numpy's seed range), got -1"),
    (["--model.init_args.evaluation_seed", "4294967295"], "evaluation_seed: 4294967295 and its batches' seeds up to"),
    (["--model.init_args.test_episodes", "-1"], "test_episodes: must be a positive integer, got -1"),
    (["--model.init_args.test_episodes", "0"], "test_episodes: must be a positive integer, got 0"),
], ids=lambda value: " ".join(value) if isinstance(value, list) else "")
def test_evaluation_settings_are_refused_before_any_environment(capsys, no_env, args, fragment):
    err = expect_exit(capsys, ["fit", "--config", QUICKSTART, *args], 2, fragment)
    assert "Traceback" not in err and "test_videos" not in _first_line(err)


def test_evaluation_n_resamples_is_checked_by_the_report_itself():
    with pytest.raises(ConfigError, match=r"evaluation.n_resamples: must be a positive integer, got 0"):
        EvaluationReport(n_resamples=0)


def test_hasac_n_step_reaching_an_iterations_steps_per_env_is_refused_before_any_environment(capsys, no_env):
    """Before: accepted; the first update failed with an AttributeError after a whole iteration's collection (no
    transition of the first iteration leaves the n-step window)."""
    config = str(CONFIGS / "hasac_vmas_balance.yaml")  # 6000 frames per iteration over 10 envs: 600 steps each
    err = expect_exit(capsys, ["fit", "--config", config, "--model.init_args.n_step", "600"], 2,
                      "lit-marl: error: n_step: 600 reaches the 600 steps each environment collects per iteration "
                      "(frames_per_batch 6000 / num_envs 10); allowed: 1..599")
    assert "Traceback" not in err


@pytest.mark.parametrize(("args", "field"), [
    (["--model.init_args.evaluation_episodes", "10000000"], "evaluation_episodes: 10000000"),
    # every validation rollout is kept until the validation ends (on_evaluation_end gets them all), so batches of 10
    # bound the environments stepped at once, not the memory: before, this was accepted (one batch's rollout fit) and
    # the validation's kept rollouts grew past the memory
    (["--model.init_args.evaluation_episodes", "1000000", "--model.init_args.evaluation_batch_size", "10"],
     "evaluation_episodes: 1000000"),
])
def test_a_validation_rollout_beyond_the_memory_names_the_evaluation_field(tmp_path, capsys, monkeypatch, args,
                                                                           field):
    """Before: accepted, then the first validation allocated millions of environments (the out-of-memory advice named
    num_envs, frames_per_batch and memory_size)."""
    monkeypatch.setattr(resources, "available_memory", lambda device: 10 ** 8)
    monkeypatch.setattr(MAPPO, "train_dataloader", lambda self: pytest.fail("training started"))
    monkeypatch.setattr(Evaluation, "rollout", lambda *a, **k: pytest.fail("a validation rollout started"))
    err = expect_exit(capsys, ["fit", "--config", str(tiny_config(tmp_path / "c.yaml")), *QUIET, *args], 2,
                      f"lit-marl: error: model.init_args.{field} needs at least", "for the validation rollout",
                      "nothing was collected", unchanged=None)
    assert "Traceback" not in err and "num_envs" not in _first_line(err).split("Allowed:")[1]
    assert run_dirs(tmp_path / "runs") == []


@pytest.fixture
def no_rollout(monkeypatch):
    """Neither an evaluation's batches (a list of every batch's seed) nor a rollout may be built."""
    monkeypatch.setattr("lit_marl.algorithms.evaluation.EvaluationBatches",
                        lambda *a, **k: pytest.fail("the evaluation's batches were built"))
    monkeypatch.setattr(Evaluation, "rollout", lambda *a, **k: pytest.fail("a rollout started"))


@pytest.mark.parametrize(("command", "args", "field"), [
    ("test", ["--model.init_args.test_episodes", "1000000000"], "test_episodes: 1000000000"),
    ("test", ["--model.init_args.test_episodes", "1000000000", "--model.init_args.evaluation_batch_size",
              "1000000000"], "test_episodes: 1000000000"),
    ("test", ["--model.init_args.test_episodes", "1000000", "--model.init_args.evaluation_batch_size", "10"],
     "test_episodes: 1000000"),
    ("validate", ["--model.init_args.evaluation_episodes", "1000000000"], "evaluation_episodes: 1000000000"),
], ids=lambda value: " ".join(value) if isinstance(value, list) else value)
def test_a_test_or_validate_beyond_the_memory_is_refused_before_any_rollout(tmp_path, capsys, monkeypatch, no_rollout,
                                                                           command, args, field):
    """Before: ``lit-marl test --model.init_args.test_episodes 1000000000`` built a list of 10**8 batches' seeds (about
    25 GB; under ``ulimit -v 6000000`` a MemoryError traceback after 43 s, without one the machine's memory), and a
    count whose rollouts, each kept until the test ends, pass the memory grew until they did. Now the setup refuses it
    with the memory fit's validation uses, what fits, and nothing written."""
    monkeypatch.setattr(resources, "available_memory", lambda device: 10 ** 9)
    err = expect_exit(capsys, [command, "--config", str(tiny_config(tmp_path / "c.yaml")), *QUIET, *args], 2,
                      f"lit-marl: error: model.init_args.{field} needs at least", "nothing was rolled out",
                      "a smaller evaluation_batch_size does not help", unchanged=None)
    assert "Traceback" not in err
    fits = int(err.split("up to about ")[1].split(",")[0])
    assert 0 < fits < int(field.split(": ")[1])
    assert run_dirs(tmp_path / "runs") == []


def test_a_huge_evaluation_batch_size_alone_just_works(tmp_path, capsys):
    """A batch larger than the test's episodes rolls them out in one batch: nothing to refuse."""
    main(["test", "--config", str(tiny_config(tmp_path / "c.yaml")), *QUIET, "--model.init_args.test_episodes", "3",
          "--model.init_args.evaluation_batch_size", "1000000000"])
    err = capsys.readouterr().err
    assert "lit-marl: error" not in err and "Traceback" not in err
    info = json.loads(next((tmp_path / "runs").rglob("eval_info.json")).read_text())
    assert info["aggregated"]["episodes"] == 3


def _tiny_off_policy(path: Path, **init_args) -> Path:
    config = yaml.safe_load((CONFIGS / "maddpg_vmas_balance.yaml").read_text())
    config["model"]["init_args"].update(frames_per_batch=40, num_envs=4, max_frames=80, evaluation_episodes=2,
                                        n_optimizer_steps=2, train_batch_size=16, **init_args)
    config["model"]["init_args"]["task"]["init_args"]["max_steps"] = 10
    config["checkpoint"] = {"every_n_epochs": 1}
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_replay_memory_on_a_disk_too_small_is_refused_by_name(tmp_path, capsys, monkeypatch):
    """The memory refusal recommends ``buffer_device: disk``; where the disk cannot hold it either, that is refused by
    name too (before: accepted; the memory-mapped file filled the disk during training)."""
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(resources.shutil, "disk_usage", lambda path: usage(10 ** 9, 10 ** 9 - 10 ** 7, 10 ** 7))
    monkeypatch.setattr(MADDPG, "train_dataloader", lambda self: pytest.fail("training started"))
    config = _tiny_off_policy(tmp_path / "c.yaml", memory_size=1_000_000, buffer_device="disk")
    err = expect_exit(capsys, ["fit", "--config", str(config), *QUIET], 2,
                      "lit-marl: error: model.init_args.memory_size: 1000000 needs at least",
                      "of disk for the replay memory of group 'agents' (buffer_device: disk", "but that disk has 10 MB "
                      "free; nothing was collected. Allowed: memory_size up to about ", unchanged=None)
    assert "Traceback" not in err
    assert run_dirs(tmp_path / "runs") == []
    fits = int(err.split("up to about ")[1].split(",")[0])
    assert 0 < fits < 1_000_000


def _fake_slurm(folder: Path, calls: Path) -> None:
    """sinfo, squeue, scontrol and sbatch stand-ins on PATH; sbatch appends each call to ``calls`` (a submission
    answers as SLURM does, so submitit takes it)."""
    folder.mkdir()
    sbatch = (f'echo "sbatch $*" >> {calls}\n'
              'case "$*" in *--test-only*) echo "sbatch: Job 1 to start" >&2;; *) echo "Submitted batch job 42";; esac')
    for name, body in {"sinfo": "echo debug", "squeue": "true", "scontrol": "true", "sbatch": sbatch}.items():
        (folder / name).write_text(f"#!/bin/sh\n{body}\n")
        (folder / name).chmod(0o700)


# a SLURM grid's runs were only parsed before submitting (value types); ranges showed on the compute nodes, after
# queueing, once per run. Now they are checked as for a local launch (which missed Lightning's numbers too: --print_config
# exits before fit checks them), before sbatch is called at all
@pytest.mark.parametrize("launcher", ["slurm", "local"])
@pytest.mark.parametrize(("overrides", "fragment"), [
    ({"model.init_args.lr": -1}, "lr: must be a positive finite number, got -1"),
    ({"model.init_args.max_frames": -5}, "max_frames: must be a positive integer, got -5"),
    ({"trainer.max_epochs": -5}, "trainer.max_epochs: must be -1 (no limit"),
    ({"checkpoint.every_n_epochs": -3}, "checkpoint.every_n_epochs: must be a number of iterations >= 0"),
    ({"model.init_args.sampling_device": "cuda:x"}, "sampling_device: 'cuda:x' is not a device"),
], ids=lambda value: ",".join(f"{k}={v}" for k, v in value.items()) if isinstance(value, dict) else "")
def test_a_grids_override_out_of_range_is_refused_before_anything_is_submitted(tmp_path, capsys, monkeypatch, launcher,
                                                                               overrides, fragment):
    calls = tmp_path / "sbatch_calls.txt"
    _fake_slurm(tmp_path / "bin", calls)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr("lit_marl.benchmark.grid.Benchmark.run", lambda *a, **k: pytest.fail("a local run started"))
    grid = tiny_grid(tmp_path, launcher=launcher, overrides={"model.init_args.max_frames": 400, **overrides})
    err = expect_exit(capsys, ["benchmark", "--config", str(grid)], 2,
                      f"lit-marl: error: algorithms.mappo on tasks.balance: lit-marl fit refuses its run config: "
                      f"{fragment}", unchanged=None)
    assert "Traceback" not in err
    assert not calls.exists(), calls.read_text()  # sbatch never called, not even its --test-only
    assert not (tmp_path / "bench").exists()


def test_a_slurm_grids_devices_are_the_compute_nodes(tmp_path, capsys, monkeypatch):
    """A device this machine lacks (a login node without GPUs) is the nodes' to have: submitted, not refused."""
    calls = tmp_path / "sbatch_calls.txt"
    _fake_slurm(tmp_path / "bin", calls)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr("torch.cuda.device_count", lambda: 0)
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    grid = tiny_grid(tmp_path, launcher="slurm", overrides={"model.init_args.max_frames": 400,
                                                            "model.init_args.sampling_device": "cuda:1"})
    main(["benchmark", "--config", str(grid)])
    assert "lit-marl: error" not in capsys.readouterr().err
    submitted = [line for line in calls.read_text().splitlines() if "--test-only" not in line]
    assert len(submitted) == 1 and "submission_file" in submitted[0]
