"""Command-line arguments lit-marl reads before jsonargparse does: a task's simulator arguments given on the command
line are merged into the config file's dict instead of replacing it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml


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
