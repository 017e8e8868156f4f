"""``lit-marl benchmark``: a grid of algorithms × tasks × seeds, one ``lit-marl fit`` process per run.

It drives the command line, so it sits beside ``cli.py``, above ``evaluation/`` (which never imports the CLI).

A grid file (``configs/benchmarks/*.yaml``)::

    name: vmas_on_policy              # results go to <output_dir>/<name>/<task>/<algorithm>/seed_<s>/
    output_dir: runs/benchmarks
    parallel: 1                       # runs at a time, each in its own process
    seeds: [0, 1, 2]
    algorithms:                       # name: a lit-marl config (its task is replaced by each task below)
      mappo: configs/mappo_vmas_balance.yaml
      ippo: {config: configs/ippo_vmas_balance.yaml, overrides: {model.init_args.lr: 1.0e-4}}
      iql: {config: configs/qmix_vmas_balance.yaml, overrides: {model.class_path: lit_marl.algorithms.IQL}}
    tasks:                            # name: a task, as under model.init_args.task
      balance: {class_path: lit_marl.envs.VmasTask, init_args: {scenario: balance, max_steps: 100}}
      lbf:                            # a task may carry settings of its own (episode lengths differ) ...
        class_path: lit_marl.envs.LbfTask
        init_args: {env_id: Foraging-8x8-2p-2f-coop-v3}
        overrides: {model.init_args.frames_per_batch: 500}       # ... for every algorithm on it
        algorithm_overrides: {iql: {model.init_args.train_batch_size: 1600}}  # ... or for one of them
    overrides:                        # dotted keys set in every run's config
      model.init_args.max_frames: 120000

Overrides apply from the general to the particular: the grid's, the algorithm's, the task's, the task's for that
algorithm. A ``model.init_args`` key the algorithm does not take is refused by name before any run starts.

Every run writes ``run_config.yaml`` (the config it runs), ``train/version_<n>/`` (Lightning's run folders),
``marl_eval.json`` (:class:`~lit_marl.callbacks.MarlEvalJson`, continued across resumes), a log,
and ``finished.json`` once it has finished. Running the same command again skips finished runs and resumes
interrupted ones from their newest ``last.ckpt`` (one that holds the run's ``max_frames`` means finished: the
launcher stopped before it wrote ``finished.json``, which the next launch writes); the grid is checked (every
algorithm and task exists and fits) before any run starts. ``launcher: slurm`` (or ``--launcher slurm``) with a
``slurm:`` mapping of settings submits the runs as one SLURM job array instead (:mod:`lit_marl.benchmark.slurm`);
``--status`` shows each run's state. SIGTERM, SIGHUP or Ctrl-C to a local launcher stops its running fits, each
at its next checkpoint, and says what was stopped (exit 128 + the signal's number, as ``fit``). One launcher at a
time per benchmark folder: a second (local or SLURM) is refused by name while the first lives (``launcher.lock``);
``--status`` and ``--dry_run`` only read.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import fcntl
import importlib
import inspect
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lit_marl.algorithms.base import MarlAlgorithm
from lit_marl.algorithms.registry import algorithms_by_name
from lit_marl.callbacks.preemption import signal_label
from lit_marl.checkpoint import read_checkpoint
from lit_marl.cli import main as cli_main
from lit_marl.envs.base import Task
from lit_marl.errors import ConfigError, did_you_mean, one_of, positive_int
from lit_marl.evaluation.io import write_atomic, write_json
from lit_marl.reading import json_kind, read_yaml
from lit_marl.slurm.jobs import INTERRUPTED_CODES
from lit_marl.slurm.settings import LAUNCHERS, parse_settings
from lit_marl.utils import die_with_parent, instantiate

FINISHED = "finished.json"
RUN_CONFIG = "run_config.yaml"
#: held (``flock``) by the one launcher of a benchmark folder; it holds that launcher's pid
LAUNCHER_LOCK = "launcher.lock"
GRID_KEYS = ("name", "output_dir", "parallel", "seeds", "algorithms", "tasks", "overrides", "launcher", "slurm")


@dataclass
class Run:
    """One cell of the grid."""

    algorithm: str
    task: str
    seed: int
    folder: Path
    config: dict[str, Any]
    status: str = "pending"  # pending → finished | skipped | failed | interrupted (its launcher was stopped)
    resumed_from: Path | None = None
    seconds: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.task}/{self.algorithm}/seed_{self.seed}"


def _set_dotted(config: dict[str, Any], key: str, value: Any, source: str) -> None:
    node = config
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{source}: {key!r} goes through {part!r}, which is not a mapping in the config")
        node = child
    node[parts[-1]] = copy.deepcopy(value)


def _mapping(value: Any, field_name: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{field_name}: must be a mapping of dotted keys to values, got {value!r}")
    return value


def _check_model_keys(overrides: dict[str, Any], algorithm: type, where: str) -> None:
    """``model.init_args.<name>`` overrides must name an argument of ``algorithm`` (else every run would fail at
    its start, or a misspelt key would train with the default)."""
    allowed = set(inspect.signature(algorithm.__init__).parameters) - {"self"}
    for key in overrides:
        parts = key.split(".")
        if parts[:2] == ["model", "init_args"] and len(parts) > 2 and parts[2] not in allowed:
            raise ConfigError(f"overrides: {key!r} ({where}) is not an argument of {algorithm.__name__}; "
                              f"{did_you_mean(parts[2], allowed)}allowed: {', '.join(sorted(allowed))}")


def _folder_name(field_name: str, value: Any) -> str:
    """A grid, task or algorithm name, which names one folder under the output folder: refused where it is a path
    (``name: ../x``, ``/tmp/x``, ``a/b``), which would write runs outside that folder or into another name's."""
    text = str(value)
    if text in ("", ".", "..") or any(sep in text for sep in ("/", "\\", "\0")):
        raise ConfigError(f"{field_name}: {text!r} is not a folder name (each run goes to <output_dir>/<name>/<task>/"
                          f"<algorithm>/seed_<s>, and a path would put it elsewhere); allowed: a name without '/' or "
                          f"'\\', other than '.' and '..'")
    return text


#: the seeds Lightning's ``seed_everything`` takes (numpy's)
MAX_SEED = 2**32 - 1


def _seeds(seeds: Any) -> list[int]:
    """The grid's seeds: distinct integers in [0, MAX_SEED]. A duplicate would run twice into one folder, and a seed
    ``seed_everything`` refuses would fail each run at its start, hours into the grid."""
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool)
                                                           for s in seeds):
        raise ConfigError(f"seeds: must be a non-empty list of integers, got {seeds!r}")
    for i, seed in enumerate(seeds):
        if not 0 <= seed <= MAX_SEED:
            raise ConfigError(f"seeds[{i}]: {seed} is out of range; allowed: integers in [0, {MAX_SEED}]")
        if seed in seeds[:i]:
            raise ConfigError(f"seeds[{i}]: {seed} is given twice (its runs would share the folder seed_{seed}); "
                              f"allowed: distinct integers")
    return seeds


def _check_run_config(config: dict[str, Any], where: str, task: Task | None) -> None:
    """What each run does first, done now for the grid, so that a value it would refuse is refused before the first
    run starts, not once per run: ``lit-marl fit``'s own parsing of the run config (``--print_config``: every value's
    type, the grid's overrides included) and, given the run's ``task`` (already probed), the algorithm built from it
    (its own checks: ranges, settings that do not go together; its networks built from the task's specs, fractions of
    a second). The grid's runs of one
    algorithm on one task differ only in their seed and folder, so one check covers them all. A grid submitted to
    SLURM is only parsed here: its runs are built on compute nodes, whose devices this machine may lack."""
    with tempfile.TemporaryDirectory(prefix="lit-marl-grid-") as folder:
        path = Path(folder) / RUN_CONFIG
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        printed, errors = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(errors):
                cli_main(["fit", "--config", str(path), "--print_config"])
        except SystemExit as exit_:
            if exit_.code not in (0, None):
                said = errors.getvalue().strip().splitlines()
                reason = said[0].removeprefix("lit-marl: error: ") if said else f"exit {exit_.code}"
                raise ConfigError(f"{where}: lit-marl fit refuses its run config: {reason}") from None
    if task is not None:
        model = yaml.safe_load(printed.getvalue())["model"]
        model["init_args"]["task"] = task  # the same task, built and probed once
        try:
            instantiate(model, MarlAlgorithm, "model")
        except ConfigError as err:
            raise ConfigError(f"{where}: lit-marl fit refuses its run config: {err}") from None


def _read_yaml(path: Path, field_name: str) -> dict[str, Any]:
    """A grid or base config: a YAML mapping, refused by name when missing, a folder, binary (a checkpoint), not YAML
    or not a mapping."""
    return read_yaml(path, f"{field_name}:", "a YAML file holding a mapping (a grid, or a lit-marl fit config)",
                     lambda data: None if isinstance(data, dict) else f"{json_kind(data)}, not a mapping")


def _resolve(path: str, grid_file: Path) -> Path:
    candidate = Path(path)
    if candidate.is_absolute() or candidate.exists():
        return candidate
    return grid_file.parent / candidate


class Benchmark:
    """A parsed, checked grid. ``Benchmark(path).run()`` runs what is left of it.

    Args:
        path: the grid YAML.
        parallel: runs at a time (overrides the file's ``parallel``).
        output_dir: where ``<name>/`` goes (overrides the file's ``output_dir``).
        launcher: ``local`` or ``slurm`` (overrides the file's ``launcher``).
    """

    def __init__(self, path: str | os.PathLike, parallel: int | None = None, output_dir: str | None = None,
                 launcher: str | None = None) -> None:
        self.path = Path(path)
        #: the signal that stopped the last local launch (:meth:`run`), or None
        self.stopped_by: int | None = None
        grid = _read_yaml(self.path, "config")
        unknown = set(grid) - set(GRID_KEYS)
        if unknown:
            raise ConfigError(f"config: unknown grid keys {sorted(unknown)}; allowed: {', '.join(GRID_KEYS)}")
        self.launcher = one_of("launcher", launcher or grid.get("launcher", "local"), LAUNCHERS)
        self.slurm = parse_settings(grid.get("slurm"))  # checked whatever the launcher: a typo shows now
        self.name = _folder_name("name", grid.get("name") or self.path.stem)
        self.root = Path(output_dir or grid.get("output_dir", "runs/benchmarks")) / self.name
        self.parallel = positive_int("parallel", parallel if parallel is not None else grid.get("parallel", 1))
        seeds = _seeds(grid.get("seeds", [0]))
        for key in ("algorithms", "tasks"):
            if not isinstance(grid.get(key), dict) or not grid[key]:
                raise ConfigError(f"{key}: the grid needs a mapping of names to {key}, got {grid.get(key)!r}")
        for key in ("algorithms", "tasks"):
            for name in grid[key]:
                _folder_name(f"{key}.{name}", name)
        overrides = _mapping(grid.get("overrides"), "overrides")
        tasks = {name: self._task(name, value, set(grid["algorithms"])) for name, value in grid["tasks"].items()}
        self.runs: list[Run] = []
        for alg_name, value in grid["algorithms"].items():
            base, alg_overrides, algorithm = self._algorithm(alg_name, value)
            for task_name, (task_config, task, task_overrides, for_algorithm) in tasks.items():
                supported = algorithm.supports_continuous_actions if task.continuous_actions \
                    else algorithm.supports_discrete_actions
                if not supported:
                    kind = "continuous" if task.continuous_actions else "discrete"
                    raise ConfigError(f"algorithms.{alg_name}: {algorithm.__name__} does not take the {kind} actions "
                                      f"of task {task_name!r}; allowed: tasks with the actions it supports")
                run_overrides = {**overrides, **alg_overrides, **task_overrides, **for_algorithm.get(alg_name, {})}
                _check_model_keys(run_overrides, algorithm, f"{alg_name} on {task_name}")
                for seed in seeds:
                    folder = self.root / task_name / alg_name / f"seed_{seed}"
                    config = self._run_config(base, task_config, seed, folder, run_overrides)
                    self.runs.append(Run(alg_name, task_name, seed, folder, config))
                _check_run_config(self.runs[-1].config, f"algorithms.{alg_name} on tasks.{task_name}",
                                  task if self.launcher == "local" else None)

    # ---------------------------------------------------------------------- checks
    def _task(self, name: str, value: Any, algorithms: set[str]
              ) -> tuple[dict[str, Any], Task, dict[str, Any], dict[str, dict[str, Any]]]:
        if not isinstance(value, dict) or "class_path" not in value:
            raise ConfigError(f"tasks.{name}: must be a mapping with class_path and init_args, got {value!r}")
        value = dict(value)
        overrides = _mapping(value.pop("overrides", None), f"tasks.{name}.overrides")
        for_algorithm = _mapping(value.pop("algorithm_overrides", None), f"tasks.{name}.algorithm_overrides")
        for alg_name, alg_overrides in for_algorithm.items():
            if alg_name not in algorithms:
                raise ConfigError(f"tasks.{name}.algorithm_overrides: {alg_name!r} is not an algorithm of this grid; "
                                  f"allowed: {', '.join(sorted(algorithms))}")
            _mapping(alg_overrides, f"tasks.{name}.algorithm_overrides.{alg_name}")
        try:
            task = instantiate(value, Task, f"tasks.{name}")
        except ConfigError as err:
            raise ConfigError(f"tasks.{name}: unknown or invalid task: {err}") from None
        except TypeError as err:
            raise ConfigError(f"tasks.{name}: invalid init_args: {err}") from None
        try:
            task.specs  # a one-env probe: a bad scenario argument shows now, not hours into the grid
        except ConfigError:
            raise
        except Exception as err:  # noqa: BLE001 (the simulator's own error, whatever its type)
            raise ConfigError(f"tasks.{name}: {task.name} cannot be built with {value.get('init_args')}: {err}") from None
        return copy.deepcopy(value), task, overrides, for_algorithm

    def _algorithm(self, name: str, value: Any) -> tuple[dict[str, Any], dict[str, Any], type]:
        if isinstance(value, str):
            value = {"config": value}
        if not isinstance(value, dict) or "config" not in value:
            raise ConfigError(f"algorithms.{name}: must be a config path or {{config, overrides}}, got {value!r}")
        base = _read_yaml(_resolve(str(value["config"]), self.path), f"algorithms.{name}.config")
        overrides = _mapping(value.get("overrides"), f"algorithms.{name}.overrides")
        class_path = str(overrides.get("model.class_path", (base.get("model") or {}).get("class_path", "")))
        module_name, _, cls_name = class_path.rpartition(".")
        try:
            algorithm = getattr(importlib.import_module(module_name), cls_name)
        except (ImportError, AttributeError, ValueError):
            algorithm = None
        if not (isinstance(algorithm, type) and issubclass(algorithm, MarlAlgorithm) and algorithm.algorithm_name):
            known = ", ".join(f"{c.__module__}.{c.__name__}" for c in algorithms_by_name().values())
            raise ConfigError(f"algorithms.{name}: unknown algorithm class_path {class_path!r} in {value['config']}; "
                              f"allowed: a MarlAlgorithm subclass such as {known}")
        return base, overrides, algorithm

    def _run_config(self, base: dict[str, Any], task: dict[str, Any], seed: int, folder: Path,
                    overrides: dict[str, Any]) -> dict[str, Any]:
        config = copy.deepcopy(base)
        config["seed_everything"] = seed
        _set_dotted(config, "model.init_args.task", task, "tasks")
        for key, value in overrides.items():
            _set_dotted(config, key, value, "overrides")
        trainer = config.setdefault("trainer", {})
        trainer["logger"] = {"class_path": "lightning.pytorch.loggers.CSVLogger",
                             "init_args": {"save_dir": str(folder), "name": "train"}}
        trainer.setdefault("enable_progress_bar", False)
        callbacks = list(trainer.get("callbacks") or [])
        callbacks.append({"class_path": "lit_marl.callbacks.MarlEvalJson",
                          "init_args": {"path": str(folder / "marl_eval.json")}})
        trainer["callbacks"] = callbacks
        return config

    # ---------------------------------------------------------------------- running
    def prepare(self, run: Run) -> None:
        """Decide what ``run`` needs: nothing (finished), a resume (a ``last.ckpt``) or a fresh start."""
        if (run.folder / FINISHED).is_file():
            run.status = "skipped"
            return
        text = yaml.safe_dump(run.config, sort_keys=False)
        config_file = run.folder / RUN_CONFIG
        if config_file.is_file():
            if config_file.read_text() != text:
                raise ConfigError(f"config: the grid changed since run {run.name} started ({config_file} differs); "
                                  f"allowed: the same grid, or another name/output_dir for a new benchmark")
        else:
            write_atomic(config_file, text)
        run.resumed_from = latest_checkpoint(run.folder)
        if run.resumed_from is not None and at_budget(run.resumed_from, run.config):
            # the fit ended at its budget, but its launcher was stopped before it wrote finished.json: a resume would
            # be refused (nothing left to train) and the run counted as failed
            run.info = write_finished(run.folder, None, None, run.resumed_from, recorded_late=True)
            run.status = "skipped"

    def command(self, run: Run) -> list[str]:
        return fit_command(run.folder, run.resumed_from)

    def _finish(self, run: Run, returncode: int, seconds: float, log) -> None:
        run.seconds = seconds
        if returncode == 0:
            run.info = write_finished(run.folder, run.info.get("started"), seconds, run.resumed_from)
            run.status = "finished"
        else:
            run.status = "failed"
            log(f"  FAILED {run.name} (exit {returncode}); see {run.folder / 'train.log'}")

    def run(self, log=print, in_process: bool = False) -> list[Run]:
        """Run what is left of the grid, ``parallel`` processes at a time (or one after the other in this
        process with ``in_process``: no process start-up, for notebooks); returns every run with its status."""
        with launcher_lock(self.root):
            return self._run(log, in_process)

    def _run(self, log, in_process: bool) -> list[Run]:
        self.stopped_by = None
        for run in self.runs:
            self.prepare(run)
        todo = [r for r in self.runs if r.status == "pending"]
        log(f"lit-marl benchmark {self.name}: {len(self.runs)} runs, {len(self.runs) - len(todo)} finished, "
            f"{sum(r.resumed_from is not None for r in todo)} to resume, "
            f"{sum(r.resumed_from is None for r in todo)} to start ({self.parallel} at a time)")
        for run in self.runs:
            if run.info.get("recorded_late"):
                log(f"  {run.name}: its last.ckpt has its max_frames, finished.json was missing; written now")
        # each run imports this lit_marl, whatever the working directory
        package_root = str(Path(__file__).resolve().parents[2])
        python_path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "PYTHONPATH": python_path}
        running: list[tuple[Run, subprocess.Popen, float, Any]] = []
        received: list[int] = []  # a fit in this process (in_process) handles the signals itself
        with _caught(() if in_process else STOP_SIGNALS, received):
            while (todo or running) and not received:
                self._step(todo, running, env, log, in_process, received)
            if received:
                self._stop(running, todo, received)
                return self.runs
        for run in self.runs:
            if run.status == "skipped":
                run.info = final_metrics(run.folder)
        table = summary_table(self.runs)
        write_atomic(self.root / "summary.md", table, overwrite=True)  # derived from the run folders
        log(table)
        return self.runs

    def _step(self, todo: list[Run], running: list[tuple[Run, subprocess.Popen, float, Any]], env: dict[str, str],
              log, in_process: bool, received: list[int]) -> None:
        """Start what may start, then record the runs that ended."""
        while todo and not received and (in_process or len(running) < self.parallel):
            run = todo.pop(0)
            log(f"  {'resume' if run.resumed_from else 'start '} {run.name}")
            if in_process:
                start = time.perf_counter()
                run.info["started"] = time.time()
                self._finish(run, _fit_in_process(self.command(run)[3:]), time.perf_counter() - start, log)
                continue
            out = open(run.folder / "train.log", "a")
            # die_with_parent: a launcher killed outright (SIGKILL) still stops its runs, each at its checkpoint
            proc = subprocess.Popen(self.command(run), stdout=out, stderr=subprocess.STDOUT, env=env,
                                    preexec_fn=die_with_parent)
            running.append((run, proc, time.perf_counter(), out))
            run.info["started"] = time.time()
        if running:
            time.sleep(0.2)
        for item in list(running):
            run, proc, start, out = item
            if proc.poll() is None:
                continue
            running.remove(item)
            out.close()
            self._finish(run, proc.returncode, time.perf_counter() - start, log)

    def _stop(self, running: list[tuple[Run, subprocess.Popen, float, Any]], todo: list[Run],
              received: list[int]) -> None:
        """The launcher got SIGTERM, SIGHUP or SIGINT (``received``; before, it died at once and its fits trained on
        as orphans): ask each running fit to stop, wait for them (a second signal kills them at once: their
        checkpoints on disk are whole), say in one line what was stopped and set :attr:`stopped_by` (``lit-marl
        benchmark`` exits 128 + its number, as ``fit`` does). The fits get SIGTERM whatever the launcher got: each
        finishes its iteration, saves ``last.ckpt`` and exits 143; a Ctrl-C at a terminal has reached them already
        (one process group), and a second SIGINT would stop them without saving (they then exit 130)."""
        self.stopped_by = received[0]
        for _, proc, _, _ in running:
            proc.send_signal(signal.SIGTERM)
        killed = False
        while any(proc.poll() is None for _, proc, _, _ in running):
            if len(received) > 1 and not killed:
                for _, proc, _, _ in running:
                    if proc.poll() is None:
                        proc.kill()
                killed = True
            time.sleep(0.2)
        stopped = []
        for run, proc, start, out in running:
            out.close()
            code = proc.returncode
            if code == 0:  # it ended on its own meanwhile
                self._finish(run, code, time.perf_counter() - start, lambda line: None)
            else:
                run.status = "interrupted" if code in INTERRUPTED_CODES else "failed"
            stopped.append(f"{run.name} {_stopped(code)}")
        left = f"{len(todo)} run{'s' if len(todo) != 1 else ''} not started"
        print(f"lit-marl: benchmark {self.name} stopped by {signal_label(self.stopped_by)}: "
              f"{'; '.join(stopped) or 'no run was running'}; {left}; the same command continues the grid (finished "
              f"runs are skipped, interrupted ones resume from their last.ckpt)", file=sys.stderr, flush=True)


#: what stops a local launch (:meth:`Benchmark._stop`); SIGUSR1 stays SLURM's, for ``fit`` itself
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


@contextlib.contextmanager
def _caught(signals: tuple[int, ...], received: list[int]) -> Iterator[None]:
    """While in the block, each of ``signals`` (in the main thread; elsewhere none can be caught) is appended to
    ``received`` instead of acting: the launcher's loop reads it between two polls of its runs."""
    if threading.current_thread() is not threading.main_thread():
        signals = ()
    previous = {signum: signal.getsignal(signum) for signum in signals}
    for signum in signals:
        signal.signal(signum, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)


def _stopped(code: int) -> str:
    """What a run's fit did when its launcher stopped it, from its exit code (``lit-marl fit``'s codes)."""
    if code == 0:
        return "had finished"
    if code in (128 + signal.SIGTERM, 128 + signal.SIGUSR1):
        return f"saved its last.ckpt and stopped (exit {code})"
    if code == 128 + signal.SIGINT:
        return f"stopped by Ctrl-C (exit {code}; its checkpoints on disk are whole)"
    if code == -signal.SIGKILL:
        return "was killed by a second signal (its checkpoints on disk are whole)"
    if code < 0:
        return f"ended by {signal.Signals(-code).name} outside its training loop, with nothing to save (exit {code})"
    return f"FAILED (exit {code}; see its train.log)"


@contextlib.contextmanager
def launcher_lock(root: Path) -> Iterator[None]:
    """Hold the benchmark folder ``root`` for one launcher while it lives: an exclusive ``flock`` on
    ``root/launcher.lock``, which the OS releases when the process ends, however it ends (a killed launcher leaves no
    stale lock). Two launchers on one folder would train the same run folders at once; the second is refused by name,
    with the holder's pid and host (the file's content). Reading the folder (``--status``) takes no lock. A file
    system without locks (some cluster file systems) is said once, and the launch goes on unguarded."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / LAUNCHER_LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by the runs (Python's fds close on exec)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode(errors="replace").strip() or "not written yet"
            raise ConfigError(f"output_dir: {str(root)!r} is in use by another lit-marl benchmark launcher (pid "
                              f"{holder}, holding {path}); allowed: one launcher per benchmark folder: wait for it "
                              f"to end (--status shows each run), stop it, or give another name or --output_dir"
                              ) from None
        except OSError as err:  # ENOLCK, ENOSYS, EOPNOTSUPP: the file system has no flock
            print(f"lit-marl: warning: {path} cannot be locked ({err.strerror or err}); a second launcher on this "
                  f"folder would not be refused", file=sys.stderr)
        else:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()} on {socket.gethostname()}\n".encode())
        yield
    finally:
        os.close(fd)  # releases the lock


def latest_checkpoint(folder: Path) -> Path | None:
    """The ``last.ckpt`` of the newest ``train/version_<n>`` of a run folder that has one (a resume starts there)."""
    checkpoints = sorted(folder.glob("train/version_*/checkpoints/last.ckpt"),
                         key=lambda p: int(p.parent.parent.name.split("_")[1]))
    return checkpoints[-1] if checkpoints else None


def max_frames_of(config: dict[str, Any]) -> int | None:
    """A run config's frame budget: ``model.init_args.max_frames``, else its algorithm's default."""
    model = config.get("model") or {}
    init_args = model.get("init_args") or {}
    if init_args.get("max_frames") is not None:
        return int(init_args["max_frames"])
    module_name, _, cls_name = str(model.get("class_path", "")).rpartition(".")
    try:
        algorithm = getattr(importlib.import_module(module_name), cls_name)
        default = inspect.signature(algorithm.__init__).parameters["max_frames"].default
    except (ImportError, AttributeError, ValueError, KeyError):
        return None
    return None if default is inspect.Parameter.empty or default is None else int(default)


def at_budget(checkpoint: Path, config: dict[str, Any]) -> bool:
    """Whether ``checkpoint`` (a run's newest ``last.ckpt``) has collected the run config's ``max_frames``: the run
    finished. An unreadable checkpoint is not (the resume refuses it by name)."""
    budget = max_frames_of(config)
    if budget is None:
        return False
    try:
        frames = int(read_checkpoint(checkpoint)["lit_marl"].get("frames", 0))
    except (ConfigError, OSError, KeyError, TypeError, ValueError):
        return False
    return frames >= budget


def fit_command(folder: Path, resumed_from: Path | None) -> list[str]:
    """The ``lit-marl fit`` process of one run (every launcher starts this one)."""
    cmd = [sys.executable, "-m", "lit_marl.cli", "fit", "--config", str(folder / RUN_CONFIG)]
    if resumed_from is not None:
        cmd += ["--ckpt_path", str(resumed_from)]
    return cmd


def write_finished(folder: Path, started: float | None, seconds: float | None, resumed_from: Path | None,
                   recorded_late: bool = False) -> dict[str, Any]:
    """``finished.json`` of a run whose ``fit`` ended with exit 0 (a later launch skips the run); returns it. With
    ``recorded_late``, written by a later launch that found the run's ``last.ckpt`` at its budget (its launcher was
    stopped between the fit's end and this file): ``resumed_from`` is then that checkpoint, the times unknown."""
    info = {**final_metrics(folder), "started": started, "ended": None if recorded_late else time.time(),
            "seconds": seconds, "resumed_from": None if resumed_from is None or recorded_late else str(resumed_from)}
    if recorded_late:
        info["recorded_late"] = True
        info["checkpoint"] = str(resumed_from)
    write_json(folder / FINISHED, info)
    return info


def _fit_in_process(args: list[str]) -> int:
    """``lit-marl fit`` in this process; its exit code."""
    try:
        cli_main(args)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    except Exception:  # noqa: BLE001 (a failed run must not stop the grid)
        traceback.print_exc()
        return 1
    return 0


def final_metrics(folder: Path) -> dict[str, Any]:
    """Frames and last ``val/return`` from the newest metrics.csv, and the absolute metric, of one run."""
    info: dict[str, Any] = {}
    for metrics in sorted(folder.glob("train/version_*/metrics.csv"), key=lambda p: int(p.parent.name.split("_")[1])):
        for row in csv.DictReader(open(metrics)):
            if row.get("counters/frames"):
                info["frames"] = int(float(row["counters/frames"]))
            if row.get("val/return"):
                info["val_return"] = float(row["val/return"])
    marl_eval = folder / "marl_eval.json"
    if marl_eval.is_file():
        data = json.loads(marl_eval.read_text())
        for env in data.values():
            for task in env.values():
                for alg in task.values():
                    for seed in alg.values():
                        if "absolute_metrics" in seed:
                            returns = seed["absolute_metrics"]["return"]
                            info["absolute_return"] = sum(returns) / len(returns)
    return info


def summary_table(runs: list[Run]) -> str:
    """A Markdown table of every run: status, frames, last evaluation return, absolute metric, wall time."""
    lines = ["| task | algorithm | seed | status | frames | val/return | absolute return | seconds |",
             "|---|---|---|---|---:|---:|---:|---:|"]

    def fmt(value: Any, spec: str) -> str:
        return "" if value is None else format(value, spec)

    for run in runs:
        info = run.info
        lines.append(f"| {run.task} | {run.algorithm} | {run.seed} | {run.status}"
                     f"{' (resumed)' if run.resumed_from is not None and run.status == 'finished' else ''} | "
                     f"{fmt(info.get('frames'), 'd')} | {fmt(info.get('val_return'), '.3f')} | "
                     f"{fmt(info.get('absolute_return'), '.3f')} | {fmt(info.get('seconds') if run.status == 'finished' else None, '.1f')} |")
    return "\n".join(lines) + "\n"
