"""``lit-marl fit`` SIGKILLed at random moments and resumed from ``<run>/checkpoints/last.ckpt`` each time loses
nothing: frames never go back past the last checkpoint, no checkpoint file is half-written, every run's
metrics.csv and marl_eval.json keep the rows written before the kill and have no duplicate steps, and the chain of
runs covers every iteration exactly once.

``LIT_MARL_KILLS`` sets how many kills (default 6; the closing note of issue 9 reports 20),
``LIT_MARL_KILL_SEED`` the random moments. Each kill is recorded in ``kills.json`` in the test's folder."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from lit_marl.checkpoint import read_checkpoint
from tests.helpers.tiny import ROOT
from tests.reliability.helpers import QUIET, rows, tiny_config

KILLS = int(os.environ.get("LIT_MARL_KILLS", "6"))
SEED = int(os.environ.get("LIT_MARL_KILL_SEED", "0"))
FRAMES_PER_ITERATION, ITERATIONS = 40, 12
#: the budget of the runs that are killed: never reached (a run between two kills does a few iterations), so every
#: kill lands in a live run however fast the machine; the final resume lowers it to where the chain ends
UNREACHED = 10**9


def _config(tmp_path: Path, max_frames: int = FRAMES_PER_ITERATION * ITERATIONS) -> Path:
    path = tiny_config(tmp_path / "tiny.yaml")
    config = yaml.safe_load(path.read_text())
    config["model"]["init_args"]["max_frames"] = max_frames
    config["trainer"]["callbacks"] = [{"class_path": "lit_marl.callbacks.MarlEvalJson",
                                       "init_args": {"absolute_factor": 0}}]
    path.write_text(yaml.safe_dump(config))
    return path


def _spawn(args: list[str], cwd: Path, log: Path, module: str = "lit_marl.cli") -> subprocess.Popen:
    """``python -m lit_marl.cli`` (or ``-m lit_marl``, the console script's entry, which also quiets a Ctrl-C during
    its imports)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", module, *args], cwd=cwd, env=env,
                            stdout=open(log, "w"), stderr=subprocess.STDOUT)


def _version_dirs(root: Path) -> list[Path]:
    return sorted(root.glob("runs/*/version_*"), key=lambda p: int(p.name.split("_")[1]))


def _train_frames(run: Path) -> list[float]:
    if not (run / "metrics.csv").is_file():
        return []
    return [float(r["counters/frames"]) for r in rows(run) if r.get("counters/iteration")]


def _check_csv(run: Path) -> None:
    """Complete rows only, and each metric at most once per step (the validation and training rows of one
    iteration share the step and both carry counters/frames and epoch)."""
    if not (run / "metrics.csv").is_file():
        return
    seen: dict[tuple[str, str], str] = {}
    header = (run / "metrics.csv").read_text().splitlines()[0].split(",")
    for row in rows(run):
        assert None not in row and None not in row.values(), f"{run}: a short or long row {row}"
        assert len(row) == len(header)
        for name, value in row.items():
            if value == "" or name == "step":
                continue
            key = (row["step"], name)
            assert key not in seen or (name in ("counters/frames", "epoch") and seen[key] == value), \
                f"{run}: {name} logged twice at step {row['step']}"
            seen[key] = value
    frames = _train_frames(run)
    assert frames == sorted(set(frames)), f"{run}: training rows go back or repeat: {frames}"


def _check_marl_eval(run: Path) -> list[int]:
    path = run / "marl_eval.json"
    if not path.is_file():
        return []
    seeds = json.loads(path.read_text())["vmas"]["balance"]["mappo"]["seed_0"]
    steps = [v["step_count"] for k, v in sorted(seeds.items(), key=lambda kv: int(kv[0].split("_")[1]))
             if k.startswith("step_")]
    assert steps == sorted(set(steps)), f"{run}: marl-eval steps repeat or go back: {steps}"
    return steps


def _checkpoints_are_whole(root: Path) -> None:
    for ckpt in root.glob("runs/*/version_*/checkpoints/*.ckpt"):  # pathlib's glob also matches hidden names
        if ckpt.name.startswith("."):  # the temporary of a write a SIGKILL cut: hidden, never read, not a checkpoint
            assert ".tmp-" in ckpt.name, f"{ckpt}: a hidden checkpoint that is not a temporary"
            continue
        read_checkpoint(ckpt)  # raises CheckpointError on a truncated file


def _latest_checkpoint(root: Path) -> tuple[Path | None, int]:
    for run in reversed(_version_dirs(root)):
        last = run / "checkpoints" / "last.ckpt"
        if last.is_file():
            return last, int(torch.load(last, weights_only=True)["lit_marl"]["frames"])
    return None, 0


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "Ctrl-C"])
def test_kill_anywhere_and_resume_loses_nothing(tmp_path, signum):
    """SIGKILL: the run dies at once. Ctrl-C (SIGINT): the run finishes its iteration, saves ``last.ckpt`` and exits
    130 without a traceback (at start-up, before any iteration: at once, with nothing to save)."""
    rng = random.Random(SEED)
    config = _config(tmp_path, max_frames=UNREACHED)
    records, resumed_from = [], 0
    for k in range(KILLS):
        ckpt, frames = _latest_checkpoint(tmp_path)
        assert frames >= resumed_from, "the newest checkpoint is older than the one resumed from before"
        resumed_from = frames
        before = {run: (run / "metrics.csv").read_bytes() for run in _version_dirs(tmp_path)
                  if (run / "metrics.csv").is_file()}
        args = ["fit", "--config", str(config), *QUIET, *(["--ckpt_path", str(ckpt)] if ckpt else [])]
        process = _spawn(args, tmp_path, tmp_path / f"fit_{k}.log", module="lit_marl")
        start = time.monotonic()
        if k % 2:  # at any moment of the run, start-up included
            delay = rng.uniform(0.5, 6.0)
            while time.monotonic() - start < delay and process.poll() is None:
                time.sleep(0.01)
        else:  # during training: once the run has logged an iteration, within the next few
            while process.poll() is None and not any(
                    _train_frames(r) for r in _version_dirs(tmp_path) if str(r) not in map(str, before)):
                time.sleep(0.01)
            delay = rng.uniform(0.0, 0.5)
            time.sleep(delay)
        if process.poll() is not None:
            pytest.fail(f"run {k} ended before its kill (exit {process.returncode}): "
                        f"{(tmp_path / f'fit_{k}.log').read_text()[-2000:]}")
        process.send_signal(signum)
        code = process.wait(timeout=120)
        if signum == signal.SIGINT:
            log = (tmp_path / f"fit_{k}.log").read_text()
            assert code == 130 and "Traceback" not in log and "stopped by" in log, (code, log[-3000:])
            runs_now = [r for r in _version_dirs(tmp_path) if str(r) not in map(str, before)]
            done = [f for r in runs_now for f in _train_frames(r)]
            if done:  # nothing finished is lost: last.ckpt holds the last logged iteration
                last, frames_saved = _latest_checkpoint(tmp_path)
                assert frames_saved == max(done), (frames_saved, done)
        temp_files = [p.name for p in tmp_path.glob("runs/*/version_*/checkpoints/.*.tmp-*")]
        records.append({"kill": k, "resumed_from_frames": frames, "seconds_after_start": round(time.monotonic() - start, 2),
                        "checkpoint_temp_files_left": temp_files})
        # every file the earlier runs wrote is as it was; every checkpoint is whole
        for run, data in before.items():
            assert (run / "metrics.csv").read_bytes() == data, f"{run}/metrics.csv changed after its run ended"
        _checkpoints_are_whole(tmp_path)

    assert len(records) == KILLS
    ckpt, frames = _latest_checkpoint(tmp_path)
    budget = frames + 3 * FRAMES_PER_ITERATION  # the chain ends three iterations after the last kill's checkpoint
    final = _spawn(["fit", "--config", str(config), *QUIET, *(["--ckpt_path", str(ckpt)] if ckpt else []),
                    "--model.init_args.max_frames", str(budget)], tmp_path, tmp_path / "final.log")
    assert final.wait(timeout=300) == 0, (tmp_path / "final.log").read_text()[-3000:]
    _checkpoints_are_whole(tmp_path)

    # the chain: each run continues right after the checkpoint it resumed from
    runs = [r for r in _version_dirs(tmp_path) if (r / "config.yaml").is_file()]
    merged: dict[float, Path] = {}
    for run in runs:
        _check_csv(run)
        for f in _train_frames(run):
            merged[f] = run  # a later run redoes what an earlier one did after its last checkpoint
    expected = [float(FRAMES_PER_ITERATION * i) for i in range(1, budget // FRAMES_PER_ITERATION + 1)]
    assert sorted(merged) == expected, f"iterations lost or invented: {sorted(merged)}"
    last_run = runs[-1]
    assert _train_frames(last_run)[-1] == expected[-1], "the final resume did not reach the frame budget"
    # marl-eval JSON: the final run's file continues the chain, one evaluation per iteration, none twice
    for run in runs:
        _check_marl_eval(run)
    assert _check_marl_eval(last_run) == [int(f) for f in expected]
    records.append({"kills": len([r for r in records if "kill" in r]), "runs": len(runs)})
    (tmp_path / "kills.json").write_text(json.dumps(records, indent=1))
    print(json.dumps(records))


@pytest.mark.slow
def test_kill_during_a_checkpoint_write_leaves_the_previous_checkpoint_whole(tmp_path):
    config = _config(tmp_path)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    # writes: iteration 1 → frames_…40.ckpt (1), last.ckpt (2); iteration 2 → frames_…80.ckpt (3), last.ckpt (4)
    process = subprocess.run([sys.executable, "-m", "tests.reliability.die_while_saving", "4", "fit", "--config",
                              str(config), *QUIET], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert process.returncode == -signal.SIGKILL, process.stderr[-3000:]
    (run,) = _version_dirs(tmp_path)
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names[:2] == [".last.ckpt.tmp-" + names[0].rsplit("-", 1)[1], "frames_000000040.ckpt"]
    assert names[2:] == ["frames_000000080.ckpt", "last.ckpt"]
    # the half-written file is the hidden temp file; last.ckpt is iteration 1's, whole
    assert read_checkpoint(run / "checkpoints" / "last.ckpt")["lit_marl"]["frames"] == 40
    assert _train_frames(run) == [40.0]
    resumed = subprocess.run([sys.executable, "-m", "lit_marl.cli", "fit", "--config", str(config), *QUIET,
                              "--ckpt_path", str(run / "checkpoints" / "last.ckpt"),
                              "--model.init_args.max_frames", "120"], cwd=tmp_path, env=env, capture_output=True,
                             text=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _train_frames(_version_dirs(tmp_path)[-1]) == [80.0, 120.0]


@pytest.mark.slow
def test_kill_between_checkpoint_and_training_row_loses_no_row(tmp_path):
    """Lightning writes an iteration's training row after its checkpoint: killed in between, the resumed run
    writes the row from the checkpoint, so the chain still has every iteration once."""
    config = _config(tmp_path)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    process = subprocess.run([sys.executable, "-m", "tests.reliability.die_while_saving", "after:4", "fit",
                              "--config", str(config), *QUIET], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert process.returncode == -signal.SIGKILL, process.stderr[-3000:]
    (run,) = _version_dirs(tmp_path)
    assert read_checkpoint(run / "checkpoints" / "last.ckpt")["lit_marl"]["frames"] == 80
    assert _train_frames(run) == [40.0]  # iteration 2's row was never written
    resumed = subprocess.run([sys.executable, "-m", "lit_marl.cli", "fit", "--config", str(config), *QUIET,
                              "--ckpt_path", str(run / "checkpoints" / "last.ckpt"),
                              "--model.init_args.max_frames", "160"], cwd=tmp_path, env=env, capture_output=True,
                             text=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    new = _version_dirs(tmp_path)[-1]
    _check_csv(new)
    assert _train_frames(new) == [80.0, 120.0, 160.0]
    recovered = [r for r in rows(new) if r.get("counters/iteration") == "2.0"][0]
    original = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["lit_marl"]["iteration_row"]
    assert float(recovered["train/agents/loss_objective"]) == pytest.approx(
        original["metrics"]["train/agents/loss_objective"])
    assert int(recovered["step"]) == original["step"] == 3


@pytest.mark.slow
def test_a_second_ctrl_c_stops_at_once_and_leaves_the_checkpoints_whole(tmp_path):
    config = _config(tmp_path)
    process = _spawn(["fit", "--config", str(config), *QUIET], tmp_path, tmp_path / "fit.log", module="lit_marl")
    while process.poll() is None and not any(_train_frames(r) for r in _version_dirs(tmp_path)):
        time.sleep(0.01)
    process.send_signal(signal.SIGINT)
    time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    code = process.wait(timeout=60)
    log = (tmp_path / "fit.log").read_text()
    assert code == 130 and "Traceback" not in log, (code, log[-3000:])
    assert "lit-marl: stopped by" in log
    _checkpoints_are_whole(tmp_path)
    ckpt, frames = _latest_checkpoint(tmp_path)
    assert ckpt is not None and frames >= FRAMES_PER_ITERATION  # a checkpoint every iteration in this config
    resumed = _spawn(["fit", "--config", str(config), *QUIET, "--ckpt_path", str(ckpt), "--model.init_args.max_frames",
                      str(frames + FRAMES_PER_ITERATION)], tmp_path, tmp_path / "resume.log")
    assert resumed.wait(timeout=120) == 0, (tmp_path / "resume.log").read_text()[-3000:]
    assert _train_frames(_version_dirs(tmp_path)[-1]) == [float(frames + FRAMES_PER_ITERATION)]
