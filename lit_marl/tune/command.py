"""``lit-marl tune``: hyperparameter search of a config with Optuna, run by ``--workers`` processes here, or by
``--workers`` SLURM array tasks (``--launcher slurm``, settings under ``slurm:`` in the space file).

::

    lit-marl tune --config configs/quickstart.yaml --space space.yaml --trials 20 --workers 2 --out runs/tune/qs
    lit-marl tune --config configs/quickstart.yaml --space space.yaml --trials 20 --workers 8 --launcher slurm

The search space and the study's settings are checked (every key against the config) before any trial starts.
Running the same command again continues the study up to ``--trials``; the results are rewritten each time.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from lit_marl.atomic import write_atomic
from lit_marl.cli import main as cli_main
from lit_marl.errors import ConfigError, one_of, positive_int
from lit_marl.reading import read_yaml
from lit_marl.slurm.settings import LAUNCHERS, add_launcher_arguments, check_cluster
from lit_marl.slurm.settings import parse_settings as parse_slurm
from lit_marl.tune.journal import check_journal, journal_storage
from lit_marl.tune.results import write_study_results
from lit_marl.tune.slurm import submit_workers
from lit_marl.tune.space import DIRECTIONS, OBJECTIVES, TuneSettings, dotted_keys, parse_settings
from lit_marl.tune.study import BASE_CONFIG, JOURNAL, SETTINGS_FILE, STUDY_NAME, Worker, with_params
from lit_marl.utils import die_with_parent


def _read_yaml(path: str | os.PathLike, field_name: str) -> Any:
    """A config or search space: a YAML file, refused by name when missing, a folder, binary or not YAML."""
    return read_yaml(path, f"{field_name}:", "a YAML file (a lit-marl fit config, or a search space)")


def config_keys(config_path: str | os.PathLike) -> set[str]:
    """Every dotted key of the config as ``lit-marl fit --config <config> --print_config`` shows it (defaults
    included); a config that does not parse stops here, with fit's own message."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        try:
            cli_main(["fit", "--config", str(config_path), "--print_config"])
        except SystemExit as exit_:
            if exit_.code not in (0, None):
                raise
    return dotted_keys(yaml.safe_load(printed.getvalue()))


def check(config_path: str, space_path: str, overrides: dict[str, Any]) -> tuple[TuneSettings, dict[str, Any]]:
    """The settings and the config, every refusal raised before anything is written."""
    config = _read_yaml(config_path, "config")
    if not isinstance(config, dict):
        raise ConfigError(f"config: {config_path!r} is not a YAML mapping")
    data = _read_yaml(space_path, "space")
    # the file's own checks first (cheap), then its keys against the parsed config
    settings = parse_settings(data, overrides)
    settings = parse_settings(data, overrides, config_keys=config_keys(config_path))
    with_params(config, dict.fromkeys(settings.space))  # each key can be written into this config
    return settings, config


def earlier_trials(root: Path) -> list[str]:
    """The files of the study folder ``root`` that show it ran trials (only its journal says which)."""
    trials = root / "trials"
    shown = [f"{len(list(trials.iterdir()))} in {trials}"] if trials.is_dir() and any(trials.iterdir()) else []
    return shown + [str(root / name) for name in ("trials.csv", "best.yaml") if (root / name).exists()]


def prepare(root: Path, settings: TuneSettings, config: dict[str, Any], new_study: str = "lit-marl tune --config "
            "<config> --space <space> --out <a new folder>"):
    """The study folder and its study (created, or continued when the same config and settings made it). A study
    file that cannot be read is refused by name (a torn last journal record is set aside: :mod:`.journal`)."""
    import optuna

    kept = root / SETTINGS_FILE
    if not kept.exists() and root.is_dir() and any(root.iterdir()):
        raise ConfigError(f"out: {str(root)!r} holds files but no study ({SETTINGS_FILE} is missing); allowed: a new "
                          f"or empty folder, or the folder of a study to continue")
    if kept.exists():
        allowed = f"the study's own file as lit-marl tune wrote it; or a new study: {new_study}"
        mapping = (lambda data: None if isinstance(data, dict) else "not a mapping")  # noqa: E731
        before = read_yaml(kept, "out: the study's settings", allowed, mapping)
        now = settings.as_dict()
        changed = sorted(k for k in now if k != "trials" and before.get(k) != now[k])
        if read_yaml(root / BASE_CONFIG, "out: the study's config", allowed, mapping) != config:
            changed.insert(0, "config")
        if changed:
            raise ConfigError(f"{changed[0]}: differs from the study in {str(root)!r} (changed: {', '.join(changed)}); "
                              f"allowed: the same config and settings to continue it (only trials may change), or "
                              f"another --out for a new study")
        check_journal(root / JOURNAL, new_study, study_name=STUDY_NAME, earlier=earlier_trials(root))
    root.mkdir(parents=True, exist_ok=True)
    write_atomic(root / BASE_CONFIG, yaml.safe_dump(config, sort_keys=False), overwrite=True)
    write_atomic(kept, yaml.safe_dump(settings.as_dict(), sort_keys=False), overwrite=True)
    study = optuna.create_study(study_name=STUDY_NAME, storage=journal_storage(root / JOURNAL),
                                direction=settings.direction, load_if_exists=True)
    study.set_user_attr("pruner", settings.pruner)  # what each run's TrialPruning builds
    study.set_user_attr("objective", settings.objective)
    return study


def run_workers(root: Path, workers: int, log=print) -> None:
    """``workers`` worker processes on the study in ``root``; returns when all have ended."""
    package_root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)}
    procs = [subprocess.Popen([sys.executable, "-m", "lit_marl.tune.study", str(root), str(i)], env=env,
                              preexec_fn=die_with_parent) for i in range(workers)]
    try:
        while any(p.poll() is None for p in procs):
            time.sleep(0.2)
    finally:
        for proc in procs:  # on Ctrl-C the workers (same process group) queue their trials again and end
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.terminate()
                proc.wait()
    for i, proc in enumerate(procs):
        if proc.returncode:
            log(f"lit-marl tune: worker {i} ended with exit {proc.returncode}")


def launch_settings(space_path: str, launcher: str | None):
    """The launcher (``--launcher``, else the space file's ``launcher``, else local) and the ``slurm:`` settings of
    the space file, checked."""
    data = _read_yaml(space_path, "space")
    data = data if isinstance(data, dict) else {}
    return one_of("launcher", launcher or data.get("launcher", "local"), LAUNCHERS), \
        parse_slurm(data.get("slurm"))


def main(argv: list[str]) -> int:
    """``lit-marl tune --config C --space S [--trials N] [--workers K] [--out DIR] ...``."""
    parser = argparse.ArgumentParser(prog="lit-marl tune", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="the lit-marl config to tune (as for lit-marl fit)")
    parser.add_argument("--space", required=True, help="the search-space YAML (docs/guide/tune.md): dotted config "
                                                       "keys -> distributions, and settings")
    parser.add_argument("--trials", type=int, default=None, help="trials of the study (default: the space file's, "
                                                                 "or 20); a re-run continues up to it")
    parser.add_argument("--workers", type=int, default=1, help="worker processes sharing the study (default 1)")
    parser.add_argument("--out", default=None, help="the study folder (default runs/tune/<config name>)")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="seeds each trial runs (default [0])")
    parser.add_argument("--objective", default=None, help=f"one of {', '.join(OBJECTIVES)} (default val/return)")
    parser.add_argument("--direction", default=None, help=f"one of {', '.join(DIRECTIONS)} (default maximize)")
    parser.add_argument("--sampler", default=None, help="tpe (default, seeded) or random")
    parser.add_argument("--pruner", default=None, help="none, median (default) or hyperband")
    add_launcher_arguments(parser, "worker processes", "space file",
                           "write the results (the last worker writes them anyway)")
    parser.add_argument("--dry_run", action="store_true", help="check the config and space, run nothing")
    args = parser.parse_args(argv)
    try:
        import optuna  # noqa: F401
    except ImportError:
        raise ConfigError("tune: optuna is not installed; allowed: pip install optuna (or pip install "
                          "'lit-marl[tune]')") from None
    workers = positive_int("workers", args.workers)
    overrides = {"trials": args.trials, "seeds": args.seeds, "objective": args.objective,
                 "direction": args.direction, "sampler": args.sampler, "pruner": args.pruner}
    settings, config = check(args.config, args.space, overrides)
    launcher, slurm = launch_settings(args.space, args.launcher)
    root = Path(args.out or Path("runs") / "tune" / Path(args.config).stem)
    if args.dry_run:
        print(f"lit-marl tune: {args.config} with {len(settings.space)} parameters "
              f"({', '.join(settings.space)}): {settings.trials} trials x {len(settings.seeds)} seeds -> {root}")
        return 0
    if launcher == "slurm":
        check_cluster(slurm)  # before the study folder is written
    study = prepare(root, settings, config, new_study=f"lit-marl tune --config {args.config} --space {args.space} "
                                                      f"--out <a new folder>")
    print(f"lit-marl tune {root}: {len(study.trials)} trials so far, up to {settings.trials}, {workers} worker(s); "
          f"{settings.objective} ({settings.direction}) over seeds {settings.seeds}", flush=True)
    if launcher == "slurm":
        if not submit_workers(root, workers, slurm, wait=args.wait):
            return 0
    elif workers == 1:
        Worker(root, settings, config).run()
    else:
        run_workers(root, workers)
    write_study_results(root)
    return 0
