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

Here: the grid (:class:`Benchmark`, its :class:`Run` cells and their configs) and its local run loop. Beside it:
the checks made before the first run (:mod:`~lit_marl.benchmark.checks`), what each run leaves in its folder
(:mod:`~lit_marl.benchmark.run_folder`, shared with the SLURM launcher) and the launcher's lock and signal handling
(:mod:`~lit_marl.benchmark.launcher`).
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lit_marl.benchmark.checks import (check_model_keys, check_run_config, checked_algorithm, checked_seeds,
                                       checked_task, folder_name, mapping_of, read_mapping)
from lit_marl.benchmark.launcher import STOP_SIGNALS, caught_signals, how_it_stopped, launcher_lock, stop_fits
from lit_marl.benchmark.run_folder import (FINISHED, RUN_CONFIG, at_budget, final_metrics, fit_command,
                                           latest_checkpoint, write_finished)
from lit_marl.callbacks.preemption import signal_label
from lit_marl.cli import main as cli_main
from lit_marl.errors import ConfigError, one_of, positive_int
from lit_marl.evaluation.io import write_atomic
from lit_marl.slurm.jobs import INTERRUPTED_CODES
from lit_marl.slurm.settings import LAUNCHERS, parse_settings
from lit_marl.utils import die_with_parent

GRID_KEYS = ("name", "output_dir", "parallel", "seeds", "algorithms", "tasks", "overrides", "launcher", "slurm")


@dataclass
class Run:
    """One cell of the grid: an algorithm on a task with a seed, trained by its own ``lit-marl fit``."""

    #: the algorithm's name in the grid file
    algorithm: str
    #: the task's name in the grid file
    task: str
    seed: int
    #: the run's folder (its ``run_config.yaml``, ``train.log``, ``train/version_<n>/``, ``finished.json``)
    folder: Path
    #: the run's full config (the algorithm's and the task's, with the grid's overrides)
    config: dict[str, Any]
    #: ``pending`` → ``finished`` | ``skipped`` | ``failed`` | ``interrupted`` (its launcher was stopped)
    status: str = "pending"
    #: the checkpoint a resumed run continues from
    resumed_from: Path | None = None
    #: wall time of this launch's fit
    seconds: float = 0.0
    #: ``finished.json``'s record (final metrics, times) once the run finished
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """``<task>/<algorithm>/seed_<n>``: how the launcher's log names the run."""
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
        grid = read_mapping(self.path, "config")
        unknown = set(grid) - set(GRID_KEYS)
        if unknown:
            raise ConfigError(f"config: unknown grid keys {sorted(unknown)}; allowed: {', '.join(GRID_KEYS)}")
        self.launcher = one_of("launcher", launcher or grid.get("launcher", "local"), LAUNCHERS)
        self.slurm = parse_settings(grid.get("slurm"))  # checked whatever the launcher: a typo shows now
        self.name = folder_name("name", grid.get("name") or self.path.stem)
        self.root = Path(output_dir or grid.get("output_dir", "runs/benchmarks")) / self.name
        self.parallel = positive_int("parallel", parallel if parallel is not None else grid.get("parallel", 1))
        seeds = checked_seeds(grid.get("seeds", [0]))
        for key in ("algorithms", "tasks"):
            if not isinstance(grid.get(key), dict) or not grid[key]:
                raise ConfigError(f"{key}: the grid needs a mapping of names to {key}, got {grid.get(key)!r}")
        for key in ("algorithms", "tasks"):
            for name in grid[key]:
                folder_name(f"{key}.{name}", name)
        overrides = mapping_of(grid.get("overrides"), "overrides")
        tasks = {name: checked_task(name, value, set(grid["algorithms"])) for name, value in grid["tasks"].items()}
        self.runs: list[Run] = []
        for alg_name, value in grid["algorithms"].items():
            base, alg_overrides, algorithm = checked_algorithm(alg_name, value, self.path)
            for task_name, (task_config, task, task_overrides, for_algorithm) in tasks.items():
                supported = algorithm.supports_continuous_actions if task.continuous_actions \
                    else algorithm.supports_discrete_actions
                if not supported:
                    kind = "continuous" if task.continuous_actions else "discrete"
                    raise ConfigError(f"algorithms.{alg_name}: {algorithm.__name__} does not take the {kind} actions "
                                      f"of task {task_name!r}; allowed: tasks with the actions it supports")
                run_overrides = {**overrides, **alg_overrides, **task_overrides, **for_algorithm.get(alg_name, {})}
                check_model_keys(run_overrides, algorithm, f"{alg_name} on {task_name}")
                for seed in seeds:
                    folder = self.root / task_name / alg_name / f"seed_{seed}"
                    config = self._run_config(base, task_config, seed, folder, run_overrides)
                    self.runs.append(Run(alg_name, task_name, seed, folder, config))
                check_run_config(self.runs[-1].config, f"algorithms.{alg_name} on tasks.{task_name}", task,
                                 devices_here=self.launcher == "local")


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
        """The ``lit-marl fit`` process of ``run`` (resuming from its last checkpoint where it has one), as every
        launcher starts it."""
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
        with caught_signals(() if in_process else STOP_SIGNALS, received):
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
        as orphans): stop each running fit (:func:`~lit_marl.benchmark.launcher.stop_fits`), say in one line what was
        stopped and set :attr:`stopped_by` (``lit-marl benchmark`` exits 128 + its number, as ``fit`` does)."""
        self.stopped_by = received[0]
        stop_fits([proc for _, proc, _, _ in running], received)
        stopped = []
        for run, proc, start, out in running:
            out.close()
            code = proc.returncode
            if code == 0:  # it ended on its own meanwhile
                self._finish(run, code, time.perf_counter() - start, lambda line: None)
            else:
                run.status = "interrupted" if code in INTERRUPTED_CODES else "failed"
            stopped.append(f"{run.name} {how_it_stopped(code)}")
        left = f"{len(todo)} run{'s' if len(todo) != 1 else ''} not started"
        print(f"lit-marl: benchmark {self.name} stopped by {signal_label(self.stopped_by)}: "
              f"{'; '.join(stopped) or 'no run was running'}; {left}; the same command continues the grid (finished "
              f"runs are skipped, interrupted ones resume from their last.ckpt)", file=sys.stderr, flush=True)


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
