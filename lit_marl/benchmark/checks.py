"""The checks of a benchmark grid made before its first run starts, so that what a run would refuse hours into the
grid is refused by name at once: names that would be paths, the seeds, each task built and probed, each algorithm
found and fitting its tasks' actions, each override naming an argument, and each run's config as ``lit-marl fit``
parses and builds it."""

from __future__ import annotations

import contextlib
import copy
import importlib
import inspect
import io
import tempfile
from pathlib import Path
from typing import Any

import yaml

from lit_marl.algorithms.base import MarlAlgorithm
from lit_marl.algorithms.registry import algorithms_by_name
from lit_marl.benchmark.run_folder import RUN_CONFIG
from lit_marl.cli import main as cli_main
from lit_marl.cli_args import check_numbers
from lit_marl.envs.base import Task
from lit_marl.errors import MAX_SEED, ConfigError, devices_elsewhere, did_you_mean
from lit_marl.reading import json_kind, read_yaml
from lit_marl.utils import instantiate

def mapping_of(value: Any, field_name: str) -> dict[str, Any]:
    """A mapping of dotted keys to values (a grid's, an algorithm's or a task's overrides); None is empty."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{field_name}: must be a mapping of dotted keys to values, got {value!r}")
    return value


def check_model_keys(overrides: dict[str, Any], algorithm: type, where: str) -> None:
    """``model.init_args.<name>`` overrides must name an argument of ``algorithm`` (else every run would fail at
    its start, or a misspelt key would train with the default)."""
    allowed = set(inspect.signature(algorithm.__init__).parameters) - {"self"}
    for key in overrides:
        parts = key.split(".")
        if parts[:2] == ["model", "init_args"] and len(parts) > 2 and parts[2] not in allowed:
            raise ConfigError(f"overrides: {key!r} ({where}) is not an argument of {algorithm.__name__}; "
                              f"{did_you_mean(parts[2], allowed)}allowed: {', '.join(sorted(allowed))}")


def folder_name(field_name: str, value: Any) -> str:
    """A grid, task or algorithm name, which names one folder under the output folder: refused where it is a path
    (``name: ../x``, ``/tmp/x``, ``a/b``), which would write runs outside that folder or into another name's."""
    text = str(value)
    if text in ("", ".", "..") or any(sep in text for sep in ("/", "\\", "\0")):
        raise ConfigError(f"{field_name}: {text!r} is not a folder name (each run goes to <output_dir>/<name>/<task>/"
                          f"<algorithm>/seed_<s>, and a path would put it elsewhere); allowed: a name without '/' or "
                          f"'\\', other than '.' and '..'")
    return text


def checked_seeds(seeds: Any) -> list[int]:
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


def read_mapping(path: Path, field_name: str) -> dict[str, Any]:
    """A grid or base config: a YAML mapping, refused by name when missing, a folder, binary (a checkpoint), not YAML
    or not a mapping."""
    return read_yaml(path, f"{field_name}:", "a YAML file holding a mapping (a grid, or a lit-marl fit config)",
                     lambda data: None if isinstance(data, dict) else f"{json_kind(data)}, not a mapping")


def _resolve(path: str, grid_file: Path) -> Path:
    candidate = Path(path)
    if candidate.is_absolute() or candidate.exists():
        return candidate
    return grid_file.parent / candidate


def checked_task(name: str, value: Any, algorithms: set[str]
                 ) -> tuple[dict[str, Any], Task, dict[str, Any], dict[str, dict[str, Any]]]:
    """The grid's task ``name`` (``value``, its entry under ``tasks``), built and probed once: its config, the task,
    its overrides and its overrides for each of the grid's ``algorithms``."""
    if not isinstance(value, dict) or "class_path" not in value:
        raise ConfigError(f"tasks.{name}: must be a mapping with class_path and init_args, got {value!r}")
    value = dict(value)
    overrides = mapping_of(value.pop("overrides", None), f"tasks.{name}.overrides")
    for_algorithm = mapping_of(value.pop("algorithm_overrides", None), f"tasks.{name}.algorithm_overrides")
    for alg_name, alg_overrides in for_algorithm.items():
        if alg_name not in algorithms:
            raise ConfigError(f"tasks.{name}.algorithm_overrides: {alg_name!r} is not an algorithm of this grid; "
                              f"allowed: {', '.join(sorted(algorithms))}")
        mapping_of(alg_overrides, f"tasks.{name}.algorithm_overrides.{alg_name}")
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


def checked_algorithm(name: str, value: Any, grid_file: Path) -> tuple[dict[str, Any], dict[str, Any], type]:
    """The grid's algorithm ``name`` (``value``, its entry under ``algorithms``; a config path is relative to the
    ``grid_file`` where it is not found as given): its base config, its overrides and its class."""
    if isinstance(value, str):
        value = {"config": value}
    if not isinstance(value, dict) or "config" not in value:
        raise ConfigError(f"algorithms.{name}: must be a config path or {{config, overrides}}, got {value!r}")
    base = read_mapping(_resolve(str(value["config"]), grid_file), f"algorithms.{name}.config")
    overrides = mapping_of(value.get("overrides"), f"algorithms.{name}.overrides")
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


def check_run_config(config: dict[str, Any], where: str, task: Task, devices_here: bool = True) -> None:
    """What each run does first, done now for the grid, so that a value it would refuse is refused before the first
    run starts (or, on SLURM, before anything is submitted), not once per run: ``lit-marl fit``'s own parsing of the
    run config (``--print_config``: every value's type, the grid's overrides included), its check of Lightning's
    numbers (ranges of the Trainer's and checkpoint's settings, the seed) and the algorithm built from it on the run's
    ``task`` (already probed; the algorithm's own checks: ranges, settings that do not go together; its networks built
    from the task's specs, fractions of a second). The grid's runs of one algorithm on one task differ only in their
    seed and folder, so one check covers them all. ``devices_here`` false (a SLURM grid, whose runs are built on
    compute nodes this machine's devices may differ from): a device name is checked for its form only."""
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
    parsed = yaml.safe_load(printed.getvalue())
    model = parsed["model"]
    model["init_args"]["task"] = task  # the same task, built and probed once
    try:
        check_numbers(parsed)  # lit-marl fit checks them once parsed; --print_config exits before
        with contextlib.nullcontext() if devices_here else devices_elsewhere():
            instantiate(model, MarlAlgorithm, "model")
    except ConfigError as err:
        raise ConfigError(f"{where}: lit-marl fit refuses its run config: {err}") from None
