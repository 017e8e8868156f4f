"""SIGTERM / SIGUSR1 (what SLURM sends before pre-empting a job) and Ctrl-C (SIGINT) finish the current iteration,
save ``last.ckpt`` and stop; resuming from it continues as if nothing happened. A second Ctrl-C stops at once and
leaves every checkpoint whole. ``last.ckpt`` holds the last iteration whenever training ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
import yaml
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from lit_marl.algorithms import MAPPO
from lit_marl.callbacks import MarlCallback
from tests.helpers.tiny import ROOT, tiny_kwargs, tiny_task, tiny_trainer
from tests.reliability.helpers import QUIET, rows, run_dirs, tiny_config


class SignalAt(Callback):
    """Sends ``signum`` to this process during the second minibatch of iteration ``iteration`` (1-based)."""

    def __init__(self, signum: int, iteration: int):
        self.signum, self.iteration = signum, iteration

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if pl_module.iteration + 1 == self.iteration and batch_idx == 1:
            os.kill(os.getpid(), self.signum)


def _fit(root: Path, max_epochs: int, callbacks=(), ckpt_path=None):
    pl.seed_everything(0)
    model = MAPPO(tiny_task(), **tiny_kwargs())
    checkpoint = ModelCheckpoint(dirpath=root / "checkpoints", save_last=True, every_n_epochs=100,
                                 save_on_train_epoch_end=True)
    trainer = tiny_trainer(root, max_epochs=max_epochs, callbacks=[checkpoint, *callbacks], check_val_every_n_epoch=2)
    trainer.fit(model, ckpt_path=ckpt_path)
    return model, trainer


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1, signal.SIGINT])
def test_signal_saves_at_the_end_of_the_iteration_and_resume_continues_exactly(tmp_path, signum):
    previous = signal.getsignal(signum)
    stopped, _ = _fit(tmp_path / "stopped", max_epochs=4, callbacks=[SignalAt(signum, iteration=2)])
    assert stopped.stopped_by_signal == signum and stopped.iteration == 2  # the iteration was finished
    assert signal.getsignal(signum) == previous  # the handlers are put back (Lightning's, and lit-marl's SIGINT)
    last = tmp_path / "stopped" / "checkpoints" / "last.ckpt"
    assert sorted(p.name for p in last.parent.iterdir()) == ["last.ckpt"]  # no stray last-v1.ckpt
    assert stopped.signal_checkpoint == str(last)
    meta = torch.load(last, weights_only=True)["lit_marl"]
    assert (meta["iteration"], meta["frames"]) == (2, 80)

    resumed, resumed_trainer = _fit(tmp_path / "resumed", max_epochs=4, ckpt_path=last)
    straight, straight_trainer = _fit(tmp_path / "straight", max_epochs=4)
    assert resumed.stopped_by_signal is None
    assert (resumed.iteration, resumed.frames) == (straight.iteration, straight.frames) == (4, 160)
    assert resumed_trainer.global_step == straight_trainer.global_step == 16
    for key, value in straight.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[key]), key


class CtrlCDuring(MarlCallback):
    """Presses Ctrl-C (SIGINT to this process) in one phase of iteration 2: collection (right after the batch is
    collected, before its update), update (a minibatch step), evaluation, or while a periodic checkpoint is written."""

    def __init__(self, phase: str):
        self.phase, self.sent = phase, False

    def _press(self, pl_module, phase: str, finished: int = 1) -> None:
        if phase == self.phase and pl_module.iteration == finished and not self.sent:
            self.sent = True
            os.kill(os.getpid(), signal.SIGINT)

    def on_batch_collected(self, trainer, pl_module, batch):
        self._press(pl_module, "collection")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self._press(pl_module, "update")

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self._press(pl_module, "evaluation")

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        self._press(pl_module, "checkpoint", finished=2)  # the iteration's counters are final when it is saved


@pytest.mark.parametrize("phase", ["collection", "update", "evaluation", "checkpoint"])
def test_ctrl_c_anywhere_in_an_iteration_finishes_it_saves_and_resumes_exactly(tmp_path, phase):
    pl.seed_everything(0)
    model = MAPPO(tiny_task(), **tiny_kwargs())
    # a periodic checkpoint every 2 iterations (the "checkpoint" phase presses Ctrl-C during iteration 2's)
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "stopped" / "checkpoints", save_last=True, every_n_epochs=2,
                                 save_on_train_epoch_end=True)
    press = CtrlCDuring(phase)
    trainer = tiny_trainer(tmp_path / "stopped", max_epochs=4, callbacks=[checkpoint, press],
                           check_val_every_n_epoch=1)
    trainer.fit(model)
    assert press.sent and model.stopped_by_signal == signal.SIGINT and model.iteration == 2
    last = tmp_path / "stopped" / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=True)["lit_marl"]["iteration"] == 2
    assert not list(last.parent.glob("last-v*.ckpt"))
    resumed, _ = _fit(tmp_path / "resumed", max_epochs=4, ckpt_path=last)
    straight, _ = _fit(tmp_path / "straight", max_epochs=4)
    assert (resumed.iteration, resumed.frames) == (straight.iteration, straight.frames) == (4, 160)
    for key, value in straight.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[key]), key


def test_last_ckpt_holds_the_last_iteration_when_training_ends_between_periodic_checkpoints(tmp_path):
    """ModelCheckpoint alone writes last.ckpt only with its periodic checkpoints: ending at iteration 3 with one
    every 2 left iteration 2's."""
    pl.seed_everything(0)
    model = MAPPO(tiny_task(), **tiny_kwargs(max_frames=120))
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "checkpoints", save_last=True, every_n_epochs=2,
                                 save_on_train_epoch_end=True)
    tiny_trainer(tmp_path, max_epochs=-1, callbacks=[checkpoint]).fit(model)
    assert model.frames == 120
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert len(names) == 2 and "last.ckpt" in names
    meta = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["lit_marl"]
    assert (meta["iteration"], meta["frames"]) == (3, 120)



def test_a_ctrl_c_swallowed_during_start_up_still_stops_after_the_first_iteration(tmp_path):
    """A Ctrl-C while a run restores its checkpoint or builds its envs raises KeyboardInterrupt there; a library that
    catches and drops it left the run training to its end (found by test_kill_anywhere under load). lit-marl's
    command counted the press (``Interrupts.count``): training finishes one iteration, saves and stops."""
    from lit_marl.callbacks.preemption import Interrupts

    Interrupts.reset()
    Interrupts.count = 1  # what lit_marl.cli.main's handler records for a press, wherever it was caught
    try:
        model, _ = _fit(tmp_path / "first", max_epochs=5)
        again, _ = _fit(tmp_path / "again", max_epochs=3)  # that press was acted on: a later fit is not stopped
    finally:
        Interrupts.reset()
    assert model.iteration == 1 and model.stopped_by_signal == signal.SIGINT
    meta = torch.load(tmp_path / "first" / "checkpoints" / "last.ckpt", weights_only=True)["lit_marl"]
    assert meta["iteration"] == 1
    assert again.iteration == 3 and again.stopped_by_signal is None

def _spawn(args: list[str], cwd: Path, log: Path) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "lit_marl.cli", *args], cwd=cwd, env=env,
                            stdout=open(log, "w"), stderr=subprocess.STDOUT)


def _wait_for_rows(run_root: Path, n: int, process: subprocess.Popen, timeout: float = 120) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        for run in run_dirs(run_root):
            if (run / "metrics.csv").is_file() and len([r for r in rows(run) if r.get("counters/frames")]) >= n:
                return run
        time.sleep(0.05)
    raise AssertionError(f"no {n} metric rows before the process ended ({process.poll()})")


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1, signal.SIGINT, signal.SIGHUP])
def test_cli_saves_exits_128_plus_signal_and_resumes(tmp_path, signum):
    config = yaml.safe_load(tiny_config(tmp_path / "tiny.yaml").read_text())
    config["model"]["init_args"]["max_frames"] = 40_000  # far more than the test lets it run
    config["checkpoint"]["every_n_epochs"] = 1000  # no periodic checkpoint: only the signal's
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(config))
    process = _spawn(["fit", "--config", str(tmp_path / "tiny.yaml"), *QUIET], tmp_path, tmp_path / "fit.log")
    run = _wait_for_rows(tmp_path / "runs", 2, process)
    process.send_signal(signum)
    code = process.wait(timeout=120)
    log = (tmp_path / "fit.log").read_text()
    assert code == 128 + signum, log[-3000:]
    assert f"stopped by {signal.Signals(signum).name}" in log and "Traceback" not in log
    # issue 34: said once (the CLI repeated the callback's line), without Lightning's weights_only line before it
    assert log.count("lit-marl: stopped by") == 1 and "weights_only" not in log, log[-3000:]
    last = run / "checkpoints" / "last.ckpt"
    assert sorted(p.name for p in last.parent.iterdir()) == ["last.ckpt"]  # no stray last-v1.ckpt
    meta = torch.load(last, weights_only=True)["lit_marl"]
    frames = {float(r["counters/frames"]) for r in rows(run) if r.get("counters/frames")}
    assert meta["frames"] == max(frames)  # the checkpoint holds the last logged iteration

    resume = _spawn(["fit", "--config", str(run / "config.yaml"), "--ckpt_path", str(last), *QUIET,
                     "--model.init_args.max_frames", str(meta["frames"] + 80)], tmp_path, tmp_path / "resume.log")
    assert resume.wait(timeout=120) == 0, (tmp_path / "resume.log").read_text()[-3000:]
    (resumed,) = [d for d in run_dirs(tmp_path / "runs") if d != run]
    resumed_frames = sorted({float(r["counters/frames"]) for r in rows(resumed) if r.get("counters/frames")})
    assert resumed_frames == [meta["frames"] + 40, meta["frames"] + 80]


@pytest.mark.slow
@pytest.mark.parametrize(("command", "signum", "words"), [
    ("fit", signal.SIGTERM, "lit-marl: received SIGTERM after training ended; the run is complete: the last "
                            "checkpoint, "),
    ("fit", signal.SIGHUP, "lit-marl: received SIGHUP after training ended; the run is complete: the last "
                           "checkpoint, "),
    ("test", signal.SIGTERM, "lit-marl: stopped by SIGTERM; the test did not finish and its results were not "
                             "written; run it again"),
    ("test", signal.SIGHUP, "lit-marl: stopped by SIGHUP; the test did not finish and its results were not "
                            "written; run it again"),
])
def test_a_signal_outside_training_ends_the_command_with_its_line_and_128_plus_it(tmp_path, command, signum, words):
    """Issue 48: SIGTERM during lit-marl test exited 0 with no results; one landing after training had ended killed
    the process by the signal, without a word. The signal is sent by the process to itself at a chosen point
    (tests/helpers/signals.py), so nothing races."""
    from lit_marl.cli import main

    config = tiny_config(tmp_path / "tiny.yaml")
    callback = ["--trainer.callbacks+=tests.helpers.signals.SignalSelf",
                f"--trainer.callbacks.init_args.signum={int(signum)}",
                f"--trainer.callbacks.init_args.hook={'train_end' if command == 'fit' else 'test_batch'}"]
    if command == "fit":
        args = ["fit", "--config", str(config), *QUIET, *callback]
    else:
        main(["fit", "--config", str(config), *QUIET])
        (run,) = run_dirs(tmp_path / "runs")
        args = ["test", "--config", str(run / "config.yaml"), "--ckpt_path", str(run / "checkpoints" / "last.ckpt"),
                *callback]
    process = _spawn(args, tmp_path, tmp_path / "out.log")
    code = process.wait(timeout=300)
    log = (tmp_path / "out.log").read_text()
    assert code == 128 + signum and words in log and "Traceback" not in log, (code, log[-3000:])
    if command == "fit":  # the run finished its budget: its last.ckpt holds every frame
        (run,) = run_dirs(tmp_path / "runs")
        assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["lit_marl"]["frames"] == 80
    else:
        assert not list(tmp_path.rglob("eval_info.json"))


def test_ckpt_path_last_resumes_the_newest_run(capsys, tmp_path):
    from lit_marl.cli import main
    from tests.reliability.helpers import expect_exit

    config = tiny_config(tmp_path / "tiny.yaml")
    expect_exit(capsys, ["fit", "--config", str(config), *QUIET, "--ckpt_path", "last"], 2,
                "ckpt_path: 'last' found no run with checkpoints/last.ckpt under 'runs/quickstart'")
    main(["fit", "--config", str(config), *QUIET])  # 2 iterations
    main(["fit", "--config", str(config), *QUIET, "--ckpt_path", "last", "--model.init_args.max_frames", "120"])
    first, second = run_dirs()
    assert yaml.safe_load((second / "config.yaml").read_text())["ckpt_path"] == str(
        Path("runs/quickstart/version_0/checkpoints/last.ckpt"))
    assert [float(r["counters/frames"]) for r in rows(second) if r.get("counters/iteration")] == [120.0]


# Each entry point a Ctrl-C can end, run under ``python -m`` as lit-marl's grids and studies start runs; the press
# lands inside code run by ``exec`` of a string, as a generated dataclass ``__init__`` or ``six`` does while torch and
# Lightning are imported (test_kill_anywhere's Ctrl-C case ended by SIGINT, exit -2, about one start-up kill in ten).
_INTERRUPTED_ENTRIES = {
    "start-up": """
import importlib.abc, runpy, sys

class InterruptImportingCli(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "lit_marl.cli":
            exec("raise KeyboardInterrupt")

sys.meta_path.insert(0, InterruptImportingCli())
runpy.run_module("lit_marl", run_name="__main__")
""",
    "start-up, dropped": """
import importlib.abc, os, runpy, signal, sys, time

class DropThePressThenFail(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "lit_marl.cli":
            try:  # a library catching everything around an import the press interrupted
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(10)
            except BaseException:
                pass
            raise RecursionError("maximum recursion depth exceeded")  # numpy's, half-imported

sys.meta_path.insert(0, DropThePressThenFail())
runpy.run_module("lit_marl", run_name="__main__")
""",
    "command": """
import lit_marl.cli as cli
from lit_marl.callbacks.preemption import Interrupts

def interrupted(args):
    Interrupts.count += 1
    exec("raise KeyboardInterrupt")

cli._run = interrupted
cli.main(["fit"])
""",
    "caught in training": """
import lit_marl.cli as cli
from lit_marl.callbacks.preemption import Interrupts

def stopped_after_an_iteration(args):
    Interrupts.count += 1
    try:
        exec("raise KeyboardInterrupt")  # some library drops it; training stops after its iteration
    except KeyboardInterrupt:
        pass
    raise SystemExit(cli.EXIT_INTERRUPTED)

cli._run = stopped_after_an_iteration
cli.main(["fit"])
""",
    "study worker": """
import pathlib, sys
import lit_marl.tune.study as study

class Worker:
    def __init__(self, *args, **kwargs):
        pass

    def run(self):
        exec("raise KeyboardInterrupt")

for name in (study.SETTINGS_FILE, study.BASE_CONFIG):
    pathlib.Path(name).write_text("{}")
study.parse_settings, study.Worker = (lambda settings: settings), Worker
sys.exit(study.main([".", "0"]))
""",
}


@pytest.mark.parametrize("entry", list(_INTERRUPTED_ENTRIES))
def test_a_ctrl_c_caught_anywhere_exits_130_not_by_sigint(tmp_path, entry):
    (tmp_path / "interrupted_entry.py").write_text(_INTERRUPTED_ENTRIES[entry])
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path)]))
    done = subprocess.run([sys.executable, "-m", "interrupted_entry"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 130, (done.returncode, done.stderr[-3000:])
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    if entry in ("start-up", "start-up, dropped", "command"):
        assert "lit-marl: stopped by Ctrl-C" in done.stderr, done.stderr[-3000:]
