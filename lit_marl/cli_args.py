"""Command-line arguments lit-marl reads before jsonargparse does: a task's simulator arguments given on the command
line are merged into the config file's dict instead of replacing it. And the numbers of Lightning's own settings
(Trainer, ModelCheckpoint), checked by name once parsed (:func:`check_numbers`), as lit-marl checks its own."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import yaml

from lit_marl.errors import MAX_SEED, ConfigError


#: a task's dict of simulator arguments: given on the command line, merged into the config file's dict
SIMULATOR_KWARGS = ("scenario_kwargs", "task_kwargs", "env_kwargs", "substrate_kwargs")

#: the field naming what a task simulates, and the dict of arguments written for that one (VMAS, PettingZoo,
#: Gymnasium): a config file's dict does not carry over to another scenario chosen on the command line
SCENARIO_FIELDS = {"scenario": "scenario_kwargs", "task": "task_kwargs", "env_id": "env_kwargs"}


def merge_simulator_kwargs(argv: list[str], notices: list[str] | None = None) -> list[str]:
    """``--model.init_args.task.init_args.scenario_kwargs '{n_agents: 3}'`` changes that key of the config file's
    dict and keeps the others (jsonargparse would replace the whole dict, silently dropping e.g. balance's
    ``package_mass``): the argument is rewritten to the merged dict before parsing (so ``--print_config`` and the
    run's ``config.yaml`` show it) and stderr says so (``notices`` collects those lines instead, for the caller to
    print once the config has built). To drop a key, give the whole dict in a config file."""
    argv, files = list(argv), []
    say = notices.append if notices is not None else (lambda line: print(line, file=sys.stderr))
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            files.append(argv[i + 1])
        elif arg.startswith("--config="):
            files.append(arg.split("=", 1)[1])
    given_fields = {field for _, _, field, _ in _task_arguments(argv)}
    switched = _switched_scenario(argv, files)
    for i, name, field, given in _task_arguments(argv):
        from_files = task_argument_in_files(files, field) if field in SIMULATOR_KWARGS else None
        if not isinstance(given, dict) or not isinstance(from_files, dict) or field in switched:
            continue
        merged = {**from_files, **given}
        if merged == given:
            continue
        value = json.dumps(merged)
        if "=" in argv[i]:
            argv[i] = f"{name}={value}"
        else:
            argv[i + 1] = value
        say(f"lit-marl: task.{field}: the command line's {given} merged into the config file's {from_files}: "
            f"{merged} (to drop a key, give the whole dict in a config file)")
    for field, (prefix, chosen, before, from_files) in switched.items():
        if field in given_fields:
            continue  # the command line's dict, as given, for the chosen scenario
        argv += [f"{prefix}.{field}", "{}"]
        say(f"lit-marl: task.{field}: the config file's {from_files} were written for {before!r}; the command line "
            f"chose {chosen!r}, which starts from its own defaults (give its settings with {prefix}.{field} "
            f"'{{...}}')")
    return argv


def _task_field(name: str) -> str | None:
    """``scenario`` for ``--model.init_args.task.init_args.scenario`` and its short forms (``--model.task.scenario``):
    a field of the model's task, as jsonargparse accepts it; ``None`` for any other argument."""
    path = [part for part in name.split(".") if part != "init_args"]
    return path[2] if len(path) == 3 and path[:2] == ["--model", "task"] else None


def _task_arguments(argv: list[str]):
    """``(index, name, field, value)`` of each task field the command line sets (``--name value`` or ``--name=value``),
    the value read as YAML; one without a value, or not YAML, is left to the parser, which names it."""
    for i, arg in enumerate(argv):
        name, inline, text = arg.partition("=")
        field = _task_field(name)
        if field is None or (not inline and i + 1 >= len(argv)):
            continue
        try:
            yield i, name, field, yaml.safe_load(text if inline else argv[i + 1])
        except yaml.YAMLError:
            continue


def _switched_scenario(argv: list[str], files: list[str]) -> dict[str, tuple[str, Any, Any, dict]]:
    """The simulator-argument dicts whose scenario the command line changed from the config file's: ``{kwargs
    field: (the argument's prefix, the chosen scenario, the file's scenario, the file's dict)}``. Balance's
    ``package_mass`` would otherwise be passed to navigation, which fails on it (or, where another scenario accepts a
    key of the same name, trains with a setting meant for another task)."""
    switched = {}
    for _, name, field, chosen in _task_arguments(argv):
        if field not in SCENARIO_FIELDS:
            continue
        before, from_files = task_argument_in_files(files, field), task_argument_in_files(files, SCENARIO_FIELDS[field])
        if before is not None and chosen != before and isinstance(from_files, dict) and from_files:
            switched[SCENARIO_FIELDS[field]] = (name.rpartition(".")[0], chosen, before, from_files)
    return switched


def task_argument_in_files(files: list[str], field: str) -> Any:
    """The value of ``model.init_args.task.init_args.<field>`` in the last of these YAML files that sets it."""
    value = None
    for path in files:
        try:
            data = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError):
            continue  # the parser has already reported an unreadable config
        node: Any = data
        for key in ("model", "init_args", "task", "init_args", field):
            node = node.get(key) if isinstance(node, dict) else None
        if node is not None:
            value = node
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _integer_at_least(low: int) -> Any:
    return lambda value: isinstance(value, int) and value >= low


def _minus_one_or_count(value: Any) -> bool:
    return isinstance(value, int) and value >= -1


def _batches(value: Any) -> bool:
    """Lightning's ``_determine_batch_limits``: a fraction in [0, 1], or a whole number of batches."""
    return math.isfinite(value) and (0 <= value <= 1 or value > 1 and value % 1 == 0)


def _devices(value: Any) -> bool:
    return isinstance(value, int) and (value == -1 or value >= 1)


_BATCHES = (_batches, "a fraction in [0.0, 1.0] or a number of batches (an integer >= 0)")

#: Lightning's Trainer and ModelCheckpoint settings that take numbers (and the logger's and lit-marl's evaluation
#: report's), each with its check and what is allowed, the special values Lightning documents named with their
#: meaning. Checked once the command line and config files are parsed, before the seed is set or anything is built:
#: Lightning would refuse most of these with a traceback (some only once training has run), and take others silently
#: (a negative ``limit_train_batches``, ``num_nodes`` or ``check_val_every_n_epoch``).
NUMBER_FIELDS: dict[str, tuple[Any, str]] = {
    "trainer.num_nodes": (_integer_at_least(1), "an integer >= 1"),
    "trainer.devices": (_devices, "-1 (every device), a number of devices >= 1, a list of device indices, or 'auto'"),
    "trainer.fast_dev_run": (_integer_at_least(0), "true, false, or a number of batches >= 0"),
    "trainer.max_epochs": (_minus_one_or_count, "-1 (no limit: the frame budget, model.init_args.max_frames, ends "
                                                "training; lit-marl's default) or a number of iterations >= 1"),
    "trainer.min_epochs": (_integer_at_least(0), "a number of iterations >= 0, or null"),
    "trainer.max_steps": (_minus_one_or_count, "-1 (no limit; Lightning's default) or a number of optimizer steps "
                                               ">= 0"),
    "trainer.min_steps": (_integer_at_least(0), "a number of optimizer steps >= 0, or null"),
    "trainer.limit_train_batches": _BATCHES,
    "trainer.limit_val_batches": _BATCHES,
    "trainer.limit_test_batches": _BATCHES,
    "trainer.limit_predict_batches": _BATCHES,
    "trainer.overfit_batches": _BATCHES,
    "trainer.val_check_interval": (_batches, "a fraction of an iteration in [0.0, 1.0], a number of batches (an "
                                             "integer >= 1), a duration ('00:00:10:00'), or null"),
    "trainer.check_val_every_n_epoch": (_integer_at_least(1), "a number of iterations >= 1, or null"),
    "trainer.num_sanity_val_steps": (_minus_one_or_count, "-1 (every validation batch) or a number of batches >= 0"),
    "trainer.log_every_n_steps": (_integer_at_least(0), "a number of steps >= 0 (0: no logging within an iteration)"),
    "trainer.accumulate_grad_batches": (_integer_at_least(1), "an integer >= 1"),
    "trainer.reload_dataloaders_every_n_epochs": (_integer_at_least(0), "a number of iterations >= 0 (0: never)"),
    "trainer.logger.init_args.flush_logs_every_n_steps": (_integer_at_least(1), "a number of steps >= 1"),
    "checkpoint.every_n_epochs": (_integer_at_least(0), "a number of iterations >= 0 (0: no periodic checkpoint; "
                                                        "last.ckpt is still written), or null"),
    "checkpoint.every_n_train_steps": (_integer_at_least(0), "a number of optimizer steps >= 0 (0: never), or null"),
    "checkpoint.save_top_k": (_minus_one_or_count, "-1 (keep every checkpoint) or a number of checkpoints >= 0"),
    "evaluation.videos": (_integer_at_least(0), "a number of episodes >= 0"),
    "evaluation.val_video_every": (_integer_at_least(0), "a number of evaluations >= 0 (0: never)"),
    "evaluation.fps": (_integer_at_least(1), "an integer >= 1"),
    "evaluation.n_resamples": (_integer_at_least(1), "a number of bootstrap resamples >= 1 (default 2000)"),
    "evaluation.confidence": (lambda value: 0 < value < 1, "a number in (0, 1), e.g. 0.95"),
}


def check_numbers(config: Any) -> None:
    """Refuse, naming the field, the value and what is allowed, a number in :data:`NUMBER_FIELDS` or
    ``seed_everything`` that the run cannot use: a negative, NaN or infinite value among them. ``config`` is one
    command's parsed config (a jsonargparse Namespace, or a dict). Values that are not numbers (``devices: auto``, a
    duration) are left to the parser and to Lightning."""
    seed = _get(config, "seed_everything")
    if _is_number(seed) and not (isinstance(seed, int) and 0 <= seed <= MAX_SEED):
        raise ConfigError(f"seed_everything: must be an integer in 0..{MAX_SEED} (numpy's seed range), got {seed!r}; "
                          f"allowed also: true (a random seed, printed) or false (no seeding)")
    for field, (fits, allowed) in NUMBER_FIELDS.items():
        value = _get(config, field)
        if field == "trainer.devices":
            value = _device_indices(value, allowed)
        if _is_number(value) and not (math.isfinite(value) and fits(value)):
            raise ConfigError(f"{field}: must be {allowed}, got {value!r}")


def _device_indices(value: Any, allowed: str) -> Any:
    """``trainer.devices`` as Lightning reads it: a string of digits as that number (``'-1'``, ``'2'``); a list of
    device indices (``[0, 1]``, ``'0,1'``) is checked here, each index an integer >= 0."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    indices = [i.strip() for i in value.split(",") if i.strip()] if isinstance(value, str) and "," in value else value
    if isinstance(indices, (list, tuple)):
        for index in indices:
            number = int(index) if isinstance(index, str) and index.lstrip("-").isdigit() else index
            if _is_number(number) and not (isinstance(number, int) and number >= 0):
                raise ConfigError(f"trainer.devices: the device index {index!r} in {value!r} is not an integer >= 0; "
                                  f"allowed: {allowed}")
        return None
    return value


def _get(config: Any, field: str) -> Any:
    node = config
    for key in field.split("."):
        if node is None:
            return None
        node = node.get(key) if hasattr(node, "get") else getattr(node, key, None)
    return node
