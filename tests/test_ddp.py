"""Data-parallel training through Lightning's DDP (CPU, gloo, 2 processes): global sizes split over the processes,
identical weights, per-process env seeds and replay buffers, evaluation episodes covered once, resume."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from lightning.fabric.plugins.environments.lightning import find_free_network_port

from lit_marl.algorithms import MAPPO
from lit_marl.callbacks.numerics import NAN_POLICIES
from lit_marl.checkpoint import read_checkpoint
from lit_marl.distributed import check_strategy, shares
from lit_marl.errors import ConfigError
from tests.helpers.tiny import ROOT, tiny_kwargs, tiny_task

def _config(path: Path, algorithm: str, probe: Path, max_frames: int) -> Path:
    init_args = {
        "task": {"class_path": "lit_marl.envs.VmasTask",
                 "init_args": {"scenario": "balance", "max_steps": 10, "scenario_kwargs": {"n_agents": 2}}},
        "actor_model": {"class_path": "lit_marl.models.Mlp", "init_args": {"num_cells": [16]}},
        "critic_model": {"class_path": "lit_marl.models.Mlp", "init_args": {"num_cells": [16]}},
        "frames_per_batch": 80, "num_envs": 8, "max_frames": max_frames, "evaluation_episodes": 6,
    }
    if algorithm == "MAPPO":
        init_args.update(n_minibatch_iters=2, minibatch_size=20)
    else:
        init_args.update(n_optimizer_steps=4, train_batch_size=16, memory_size=1000)
    config = {
        "seed_everything": 0,
        "trainer": {"max_epochs": -1, "gradient_clip_val": 5.0, "check_val_every_n_epoch": 1,
                    "num_sanity_val_steps": 0, "enable_progress_bar": False, "enable_model_summary": False,
                    "strategy": "ddp", "devices": 2, "accelerator": "cpu",
                    "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger",
                               "init_args": {"save_dir": "runs", "name": "ddp"}},
                    "callbacks": [{"class_path": "tests.helpers.ddp_probe.RankProbe", "init_args": {"folder": str(probe)}}]},
        "checkpoint": {"every_n_epochs": 1},
        "model": {"class_path": f"lit_marl.algorithms.{algorithm}", "init_args": init_args},
    }
    path.write_text(yaml.safe_dump(config))
    return path


def _lit_marl(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([shutil.which("lit-marl") or sys.exit("lit-marl not installed"), *args], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def _ranks(probe: Path) -> list[dict]:
    return [json.loads((probe / f"rank{r}.json").read_text()) for r in (0, 1)]


@pytest.mark.slow
def test_two_process_mappo_shares_the_budget_and_keeps_one_set_of_weights(tmp_path):
    probe = tmp_path / "probe"
    _lit_marl("fit", "--config", str(_config(tmp_path / "mappo.yaml", "MAPPO", probe, max_frames=160)))
    first, second = _ranks(probe)
    assert first["weights"] == second["weights"]  # DDP kept the processes' weights identical
    assert first["first_observation"] != second["first_observation"]  # each process seeds its own envs
    assert first["collected"] == second["collected"] == 80  # half of frames_per_batch, 2 iterations
    assert first["frames"] == second["frames"] == first["collected"] + second["collected"] == 160
    assert first["global_step"] == 2 * 2 * 4  # as one process: 2 iterations × 2 epochs × 80/20 minibatches
    assert first["evaluated"] + second["evaluated"] == 6  # the requested episodes, once
    assert not set(first["seeds"]) & set(second["seeds"])
    (run,) = Path("runs/ddp").iterdir()  # one run folder, written by process 0
    frames = [float(r["counters/frames"]) for r in csv.DictReader(open(run / "metrics.csv")) if r["counters/frames"]]
    assert max(frames) == 160


@pytest.mark.slow
def test_two_process_maddpg_resumes_each_process_replay_buffer(tmp_path):
    probe = tmp_path / "probe"
    _lit_marl("fit", "--config", str(_config(tmp_path / "maddpg.yaml", "MADDPG", probe, max_frames=160)))
    before = _ranks(probe)
    assert before[0]["weights"] == before[1]["weights"] and before[0]["buffers"] == {"agents": 80}
    (run,) = Path("runs/ddp").iterdir()
    checkpoints = run / "checkpoints"
    assert sorted(p.name for p in checkpoints.glob("last.ckpt*")) == [
        "last.ckpt", "last.ckpt.buffers-f160s8.rank0", "last.ckpt.buffers-f160s8.rank1"]
    for rank in (0, 1):  # each process wrote its buffers once: last.ckpt's are the periodic checkpoint's, linked
        (periodic,) = checkpoints.glob(f"frames_*160.ckpt.buffers-f160s8.rank{rank}")
        assert periodic.stat().st_ino == (checkpoints / f"last.ckpt.buffers-f160s8.rank{rank}").stat().st_ino
    _lit_marl("fit", "--config", str(tmp_path / "maddpg.yaml"), "--model.init_args.max_frames", "320",
              "--ckpt_path", str(checkpoints / "last.ckpt"))
    after = _ranks(probe)
    assert after[0]["frames"] == after[1]["frames"] == 320
    assert after[0]["global_step"] == 4 * 4  # counters continued: 4 iterations × 4 optimizer steps
    # each process got its own 80 transitions back and added 80 more (fresh buffers would hold 80)
    assert after[0]["buffers"] == after[1]["buffers"] == {"agents": 160}
    assert after[0]["weights"] == after[1]["weights"]

    # another world size: a warning and fresh buffers, never another process's transitions
    (probe / "rank0.json").unlink()
    warned = _lit_marl("fit", "--config", str(tmp_path / "maddpg.yaml"), "--trainer.devices", "1",
                       "--model.init_args.max_frames", "240", "--ckpt_path", str(checkpoints / "last.ckpt"))
    assert "belong to 2 processes and this run has 1; training continues with empty buffers" in warned
    alone = json.loads((probe / "rank0.json").read_text())
    assert alone["frames"] == 240 and alone["buffers"] == {"agents": 80}


@pytest.mark.slow
def test_two_process_resume_refuses_a_damaged_process_sidecar_on_every_process(tmp_path):
    """Issue 48: bytes changed inside process 1's replay buffers loaded as other values. Each process checks its own
    sidecar against its CRC-32s and tells the others, so both stop at once with the file's name (exit 2), rather
    than process 1 alone while process 0 waits for it."""
    from tests.reliability.test_corrupt_checkpoints import _bytes_inside

    config = _config(tmp_path / "maddpg.yaml", "MADDPG", tmp_path / "probe", max_frames=160)
    _lit_marl("fit", "--config", str(config))
    (run,) = Path("runs/ddp").iterdir()
    last = run / "checkpoints" / "last.ckpt"
    (damaged,) = last.parent.glob("last.ckpt.buffers-*.rank1")
    damaged.write_bytes(_bytes_inside(damaged.read_bytes()))
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([shutil.which("lit-marl"), "fit", "--config", str(config), "--model.init_args.max_frames",
                           "320", "--ckpt_path", str(last)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stderr[-3000:]
    refusal = f"ckpt_path: the replay buffers of process 1 of {str(last)!r} ({damaged.name}) are damaged"
    assert done.stderr.count(refusal) == 2, done.stderr[-3000:]  # one line from each process
    assert "fails its CRC-32 check" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("algorithm, rank, write, failing", [
    ("MADDPG", 1, 2, "frames_000000160.ckpt.buffers-f160s8.rank1"),  # process 1's sidecar at iteration 2
    ("MAPPO", 0, 3, "frames_000000160.ckpt"),  # the checkpoint (process 0 writes it) at iteration 2
])
def test_two_process_run_on_a_full_disk_stops_every_process_with_exit_4(tmp_path, algorithm, rank, write, failing):
    """Issue 48: a write that failed on one process left the other waiting for it in a collective (Lightning's
    barrier after a checkpoint, lit-marl's after the sidecars) until the process group's timeout. Each process now
    tells the others, and all stop at once, naming the file (exit 4), with last.ckpt of iteration 1 whole."""
    config = yaml.safe_load(_config(tmp_path / "c.yaml", algorithm, tmp_path / "probe", max_frames=160).read_text())
    config["trainer"]["callbacks"].append({"class_path": "tests.reliability.faulty.FullDiskOnRank",
                                           "init_args": {"rank": rank, "write": write}})
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([shutil.which("lit-marl"), "fit", "--config", str(tmp_path / "c.yaml")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 4, done.stderr[-3000:]
    assert done.stderr.count("lit-marl: error: could not write ") == 2, done.stderr[-3000:]  # one from each process
    assert failing in done.stderr and "No space left on device" in done.stderr and "Traceback" not in done.stderr
    (run,) = Path("runs/ddp").iterdir()
    assert read_checkpoint(run / "checkpoints" / "last.ckpt", verify_buffers=True)["lit_marl"]["frames"] == 80


@pytest.mark.slow
def test_every_algorithm_ends_an_iteration_with_one_set_of_weights_on_both_processes(tmp_path):
    """Issue 34: every algorithm, with every nan_policy, that DDP accepts trains one iteration in 2 gloo processes and
    both end with the same parameters and buffers (target networks, exploration scales), optimizer state (step counts,
    moments) and target-update counters; the rest (HAPPO, HATRPO, nan_policy skip) is refused by name. One pair of
    processes fits them all in turn (tests/helpers/ddp_every_algorithm.py), started as a launcher would, so Lightning
    spawns none and reuses the process group of the first fit. The pair must have trained: every parameter moved,
    each process collected its half of the frames, and exploration annealed by both processes' frames. A NaN loss on
    one process stops both, each with lit-marl's message."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(find_free_network_port()), "WORLD_SIZE": "2", "NODE_RANK": "0"}
    processes = []
    try:
        for r in (0, 1):
            with open(tmp_path / f"rank{r}.log", "w") as log:
                processes.append(subprocess.Popen(
                    [sys.executable, "-m", "tests.helpers.ddp_every_algorithm", str(tmp_path)],
                    env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}, stdout=log, stderr=subprocess.STDOUT))
        for r, process in enumerate(processes):
            assert process.wait(timeout=300) == 0, (tmp_path / f"rank{r}.log").read_text()[-3000:]
    finally:
        for process in processes:
            process.kill()
    first, second = _ranks(tmp_path)
    # a NaN loss on one process stops both at that step, each with lit-marl's message, no weight changed (before:
    # process 0 failed in gloo's all-reduce with "Connection closed by peer"; under NCCL it would hang)
    faults = first.pop("nan_on_process_1"), second.pop("nan_on_process_1")
    assert faults[1]["raised"].startswith("NumericalError: loss term agents/loss_critic is nan at iteration 1"), faults
    assert faults[0]["raised"].startswith("NumericalError: a loss term of another DDP process is NaN/Inf at "
                                          "iteration 1"), faults
    assert faults[0]["unchanged"] and faults[1]["unchanged"]
    refused = {f"{name}/{policy}" for name in ("ensemble", "happo", "hasac", "hatrpo", "iddpg", "ippo", "iql", "isac",
                                               "maddpg", "mappo", "masac", "qmix", "vdn")
               for policy in NAN_POLICIES if policy == "skip" or name in ("happo", "hasac", "hatrpo")}
    trained = [run for run in first if run not in refused]
    for rank, record in enumerate((first, second)):
        assert {run for run in record if "refused" in record[run]} == refused
        # the first fit set the process group up, every later one reused it; no process was spawned
        assert [record[run]["group_initialised_before"] for run in trained] == [False] + [True] * (len(trained) - 1)
        assert len({record[run]["process_group"] for run in trained}) == 1
        assert all((record[run]["rank"], record[run]["world_size"], record[run]["external_processes"]) ==
                   (rank, 2, True) for run in trained)
    differences = []
    for run in trained:
        ours, theirs = first[run], second[run]
        assert ours["collected"] == theirs["collected"] == 20 and ours["frames"] == theirs["frames"] == 40, run
        assert ours["global_step"] == theirs["global_step"] == 2, run
        assert set(ours["parameters"]) <= set(ours["moved"]), run  # every parameter trained
        for group, scale in ours["exploration"].items():  # annealed by the frames of both processes (40), not 20
            expected = scale["start"] - (scale["start"] - scale["end"]) * ours["frames"] / scale["frames"]
            assert scale["scale"] == pytest.approx(expected, rel=1e-5), (run, group)
        for part in ("tensors", "optimizer", "learners", "exploration"):
            differences += [f"{run} {part} {name}" for name in ours[part].keys() | theirs[part].keys()
                            if ours[part].get(name) != theirs[part].get(name)]
    assert not differences, differences
    # QMIX's running reward moments (standardise_rewards) are among the buffers compared above
    assert any("reward_statistics" in name for name in first["qmix/standardise_rewards+hypernet_layers_2"]["tensors"])


def test_sizes_that_do_not_split_over_the_processes_are_named():
    model = MAPPO(tiny_task(), **tiny_kwargs(num_envs=4, frames_per_batch=40, minibatch_size=20,
                                             evaluation_episodes=4))
    assert shares(model, 2) == []
    problems = shares(model, 3)
    assert any(p.startswith("num_envs: 4 is not a multiple of the 3 processes") for p in problems)
    assert any(p.startswith("evaluation_episodes: 4") for p in problems)
    assert shares(model, 3, "test") == ["test_episodes: 100 is not a multiple of the 3 processes; allowed: a "
                                        "multiple such as 99"]


def test_happo_hatrpo_and_nan_policy_skip_are_refused_across_processes_by_name():
    """Issue 34: HAPPO and HATRPO draw their agent order per process and step no optimizer on some minibatches (DDP
    crashed on unused parameters, or on a training_step returning None); nan_policy skip returns None too."""
    from lit_marl.algorithms import HAPPO, HASAC, HATRPO
    from tests.helpers.tiny import ddpg_kwargs

    task = tiny_task("balance", scenario_kwargs={"n_agents": 3})
    for cls, name, kwargs in ((HAPPO, "HAPPO", tiny_kwargs), (HATRPO, "HATRPO", tiny_kwargs), (HASAC, "HASAC", ddpg_kwargs)):
        problems = shares(cls(task, **kwargs(num_envs=4, frames_per_batch=40)), 2)
        assert any(p.startswith(f"model: {name} trains one agent after another") for p in problems), problems
        assert shares(cls(task, **kwargs()), 1) == []
    skipping = MAPPO(tiny_task(), **tiny_kwargs(nan_policy="skip"))
    assert any(p.startswith("nan_policy: 'skip'") for p in shares(skipping, 2))
    assert not any(p.startswith("nan_policy") for p in shares(skipping, 2, "test"))


@pytest.mark.slow
def test_two_process_run_killed_mid_training_resumes_counters_and_buffers(tmp_path):
    """SIGKILL the whole process group of a 2-process MADDPG fit once a checkpoint exists, resume from last.ckpt."""
    probe = tmp_path / "probe"
    config = _config(tmp_path / "maddpg.yaml", "MADDPG", probe, max_frames=80 * 200)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([shutil.which("lit-marl"), "fit", "--config", str(config)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    last = None
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            found = list(Path("runs/ddp").glob("version_*/checkpoints/last.ckpt"))
            if found and read_checkpoint(found[0])["lit_marl"]["frames"] >= 240:
                last = found[0]
                break
            assert process.poll() is None, "the run ended before it was killed"
            time.sleep(0.2)
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # both processes, wherever they are
        process.wait()
    assert last is not None, "no checkpoint within 5 minutes"
    saved = read_checkpoint(last)["lit_marl"]  # the checkpoint as the kill left it
    token = saved["rank_buffers"]["token"]
    assert {p.name for p in last.parent.glob("last.ckpt.buffers-*")} >= {f"last.ckpt.buffers-{token}.rank0",
                                                                          f"last.ckpt.buffers-{token}.rank1"}
    frames = saved["frames"]
    _lit_marl("fit", "--config", str(config), "--model.init_args.max_frames", str(frames + 160), "--ckpt_path",
              str(last))
    after = _ranks(probe)
    assert after[0]["frames"] == after[1]["frames"] == frames + 160  # continued from the checkpoint's counter
    # each process's buffer: what it held at the checkpoint (frames / 2) plus the 80 frames it collected since
    assert after[0]["buffers"] == after[1]["buffers"] == {"agents": frames // 2 + 80}
    assert after[0]["weights"] == after[1]["weights"]


def test_strategies_without_a_collector_per_process_are_refused():
    from lightning.pytorch.strategies import DDPStrategy, FSDPStrategy, SingleDeviceStrategy

    for strategy in (SingleDeviceStrategy(device=torch.device("cpu")), DDPStrategy()):
        check_strategy(SimpleNamespace(strategy=strategy))
    with pytest.raises(ConfigError, match="trainer.strategy: FSDPStrategy cannot drive lit-marl's environments"):
        check_strategy(SimpleNamespace(strategy=FSDPStrategy()))
