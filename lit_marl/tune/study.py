"""The study of ``lit-marl tune`` and its workers: trials are ``lit-marl fit`` processes in their own folders.

The study folder::

    <out>/journal.log                 Optuna's journal (every worker's storage: one file, no database server)
    <out>/tune.yaml, config.yaml      the settings and config the study runs (a re-run must give the same)
    <out>/trials/trial_<n>/seed_<s>/  run_config.yaml, train.log, train/version_<v>/ (metrics.csv, checkpoints)
    <out>/heartbeats/<n>              touched by the worker running trial n

A worker takes trials (``study.ask``, under a lock, while the study has fewer than ``trials``), runs each seed
one after the other (the first with :class:`~lit_marl.tune.pruning.TrialPruning`: a pruned trial runs no more
seeds) and tells the study the seeds' interquartile mean. Before it takes a trial, a running trial whose worker is
gone (same machine: its process ended; anywhere: no heartbeat for ``heartbeat_timeout`` seconds) is marked FAIL and
its parameters queued again; an interrupted worker does the same with its own trial.
"""

from __future__ import annotations

import copy
import csv
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from lit_marl.atomic import write_atomic
from lit_marl.errors import ConfigError
from lit_marl.evaluation.statistics import iqm
from lit_marl.sigint import forget_caught_interrupt
from lit_marl.tune.journal import journal_storage
from lit_marl.tune.pruning import PRUNED_AT
from lit_marl.tune.space import TuneSettings, make_pruner, make_sampler, parse_settings
from lit_marl.utils import die_with_parent

STUDY_NAME = "lit-marl"
JOURNAL, SETTINGS_FILE, BASE_CONFIG, RUN_CONFIG = "journal.log", "tune.yaml", "config.yaml", "run_config.yaml"
WORKER, RETRY_OF, FAILED_BECAUSE, FIT_FAILED = "worker", "retry_of", "failed_because", "fit_failed"


def set_dotted(config: dict[str, Any], key: str, value: Any) -> None:
    """``config[a][b][c] = value`` for ``key`` ``a.b.c`` (missing mappings are made)."""
    node = config
    for part in key.split(".")[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"space.{key}: goes through {part!r}, which the config gives as {child!r}, not a "
                              f"mapping; allowed: write it out as a mapping (class_path, init_args) in the config")
        node = child
    node[key.split(".")[-1]] = copy.deepcopy(value)


def with_params(config: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    config = copy.deepcopy(config)
    for key, value in params.items():
        set_dotted(config, key, value)
    return config


def trial_folder(root: Path, number: int) -> Path:
    return root / "trials" / f"trial_{number:04d}"


def evaluation_curve(run_folder: Path) -> list[tuple[int, float]]:
    """``(frames, val/return)`` of every evaluation of one run (its newest ``train/version_*/metrics.csv``)."""
    files = sorted(run_folder.glob("train/version_*/metrics.csv"), key=lambda p: int(p.parent.name.split("_")[1]))
    if not files:
        return []
    with open(files[-1], newline="") as f:
        return [(int(float(r["counters/frames"])), float(r["val/return"])) for r in csv.DictReader(f)
                if r.get("val/return") and r.get("counters/frames")]


def objective_value(curve: list[tuple[int, float]], objective: str) -> float:
    """The last evaluation's return, or (``auc``) the area under the curve over frames divided by its span: the mean
    return over training, comparable between runs of different lengths."""
    frames, returns = np.array([c[0] for c in curve], float), np.array([c[1] for c in curve], float)
    if objective == "val/return" or len(curve) == 1 or frames[-1] == frames[0]:
        return float(returns[-1]) if objective == "val/return" else float(returns.mean())
    area = np.sum((returns[1:] + returns[:-1]) / 2 * np.diff(frames))  # the trapezoid rule
    return float(area / (frames[-1] - frames[0]))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (killed, not yet reaped by its parent) is gone too
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


class Worker:
    """One process taking trials of the study in ``root`` until it has ``settings.trials``."""

    def __init__(self, root: Path, settings: TuneSettings, config: dict[str, Any], index: int = 0, log=print) -> None:
        import optuna

        self.root, self.settings, self.config, self.index, self.log = root, settings, config, index, log
        self.storage = journal_storage(root / JOURNAL)
        existing = len(optuna.load_study(study_name=STUDY_NAME, storage=self.storage).trials)
        # seeded, but not alike: each worker (and each re-run) draws its own random start-up trials
        self.study = optuna.load_study(study_name=STUDY_NAME, storage=self.storage, pruner=make_pruner(settings.pruner),
                                       sampler=make_sampler(settings.sampler, 1000 * index + existing))
        self.identity = {"host": socket.gethostname(), "pid": os.getpid()}

    # ------------------------------------------------------------------ consistency
    def _gone(self, trial) -> bool:
        worker = trial.user_attrs.get(WORKER) or {}
        if worker.get("host") == socket.gethostname() and worker.get("pid") and not _alive(int(worker["pid"])):
            return True
        beat = self.root / "heartbeats" / str(trial.number)
        last = beat.stat().st_mtime if beat.exists() else trial.datetime_start.timestamp()
        return time.time() - last > self.settings.heartbeat_timeout

    def fail_and_requeue(self, trial, reason: str) -> None:
        """Mark a RUNNING trial FAIL (``reason`` in its user attributes) and queue its parameters again; nothing when
        another worker did it first."""
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.trial import TrialState

        try:
            self.storage.set_trial_user_attr(trial._trial_id, FAILED_BECAUSE, reason)
            if not self.storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL):
                return
        except UpdateFinishedTrialError:
            return
        self.study.enqueue_trial(trial.params, user_attrs={RETRY_OF: trial.number})
        self.log(f"  trial {trial.number} FAILED ({reason}); its parameters are queued again")

    def fail_gone_trials(self) -> None:
        from optuna.trial import TrialState

        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if self._gone(trial):
                self.fail_and_requeue(trial, "its worker stopped")

    def ask(self):
        """The next trial (a queued one first), or None when the study has its ``trials``; under a lock, so that
        workers asking at once never exceed it."""
        from optuna.storages.journal import JournalFileOpenLock
        from optuna.trial import TrialState

        lock = JournalFileOpenLock(str(self.root / "ask"))
        lock.acquire()
        try:
            self.fail_gone_trials()
            trials = self.study.get_trials(deepcopy=False)
            waiting = any(t.state == TrialState.WAITING for t in trials)
            # a failed trial counts unless its parameters were queued again (the retry counts instead)
            counted = sum(t.state != TrialState.FAIL or FAILED_BECAUSE not in t.user_attrs for t in trials)
            if not waiting and counted >= self.settings.trials:
                return None
            trial = self.study.ask(self.settings.space)
            trial.set_user_attr(WORKER, self.identity)
            self._beat(trial.number)
            return trial
        finally:
            lock.release()

    def _beat(self, number: int) -> None:
        beat = self.root / "heartbeats" / str(number)
        beat.parent.mkdir(exist_ok=True)
        beat.touch()

    # ------------------------------------------------------------------ running
    def run(self) -> int:
        """Take trials until the study has enough; returns how many this worker ran."""
        done = 0
        while (trial := self.ask()) is not None:
            try:
                self.run_trial(trial)
            except KeyboardInterrupt:
                self.fail_and_requeue(self.storage.get_trial(trial._trial_id), "interrupted")
                raise
            done += 1
        return done

    def run_config(self, trial, seed: int, folder: Path, prune: bool) -> dict[str, Any]:
        config = with_params(self.config, trial.params)
        config["seed_everything"] = seed
        trainer = config.setdefault("trainer", {})
        trainer["logger"] = {"class_path": "lightning.pytorch.loggers.CSVLogger",
                             "init_args": {"save_dir": str(folder.resolve()), "name": "train"}}
        trainer.setdefault("enable_progress_bar", False)
        if prune:
            trainer["callbacks"] = [*(trainer.get("callbacks") or []), {
                "class_path": "lit_marl.tune.pruning.TrialPruning",
                "init_args": {"storage": str((self.root / JOURNAL).resolve()), "study_name": STUDY_NAME,
                              "trial_number": trial.number}}]
        return config

    def _fit(self, trial, folder: Path) -> int:
        """``lit-marl fit --config <folder>/run_config.yaml`` in a process of its own; its exit code."""
        package_root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
               "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)}
        with open(folder / "train.log", "a") as out:
            proc = subprocess.Popen([sys.executable, "-m", "lit_marl.cli", "fit", "--config", str(folder / RUN_CONFIG)],
                                    stdout=out, stderr=subprocess.STDOUT, env=env, preexec_fn=die_with_parent)
            try:
                while proc.poll() is None:
                    self._beat(trial.number)
                    time.sleep(min(1.0, self.settings.heartbeat_timeout / 4))
            finally:
                if proc.poll() is None:  # interrupted: the run checkpoints on SIGTERM and ends
                    proc.terminate()
                    proc.wait()
        return proc.returncode

    def run_trial(self, trial) -> None:
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.trial import TrialState


        shown = ", ".join(f"{k.rsplit('.', 1)[-1]}={v:.4g}" if isinstance(v, float) else f"{k.rsplit('.', 1)[-1]}={v}"
                          for k, v in trial.params.items())
        self.log(f"  trial {trial.number} (worker {self.index}): {shown}")
        values, state, note = [], TrialState.COMPLETE, ""
        for i, seed in enumerate(self.settings.seeds):
            folder = trial_folder(self.root, trial.number) / f"seed_{seed}"
            folder.mkdir(parents=True, exist_ok=True)
            config = self.run_config(trial, seed, folder, prune=i == 0)
            write_atomic(folder / RUN_CONFIG, yaml.safe_dump(config, sort_keys=False), overwrite=True)
            code = self._fit(trial, folder)
            attrs = self.storage.get_trial(trial._trial_id).user_attrs
            if code != 0:
                state, note = TrialState.FAIL, f"seed {seed}: lit-marl fit exit {code}; see {folder / 'train.log'}"
                break
            if PRUNED_AT in attrs:
                state, note = TrialState.PRUNED, f"at {attrs[PRUNED_AT]} frames"
                break
            curve = evaluation_curve(folder)
            if not curve:
                state, note = TrialState.FAIL, f"seed {seed}: no val/return in {folder}/train (evaluate at least once)"
                break
            values.append(objective_value(curve, self.settings.objective))
        value = float(iqm(np.array(values))) if state == TrialState.COMPLETE else None
        try:
            if state == TrialState.FAIL:  # counted in the trials (unlike a gone worker's): a setting that fails
                trial.set_user_attr(FIT_FAILED, note)  # must not be retried for ever
            self.study.tell(trial.number, value, state=state)
        except (UpdateFinishedTrialError, ValueError, RuntimeError) as err:
            self.log(f"  trial {trial.number}: its result was not recorded ({err})")
            return
        shown = f"{self.settings.objective} {value:.4g} (seeds: {', '.join(f'{v:.4g}' for v in values)})" \
            if value is not None else note
        self.log(f"  trial {trial.number} {state.name}: {shown}")


def main(argv: list[str]) -> int:
    """``python -m lit_marl.tune.study <study folder> <worker index>``: one worker of ``lit-marl tune --workers``."""

    root, index = Path(argv[0]), int(argv[1])
    settings = parse_settings(yaml.safe_load((root / SETTINGS_FILE).read_text()))
    config = yaml.safe_load((root / BASE_CONFIG).read_text())
    try:
        Worker(root, settings, config, index, log=lambda line: print(line, flush=True)).run()
    except KeyboardInterrupt:
        forget_caught_interrupt()
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
