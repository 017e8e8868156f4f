"""Command-line arguments lit-marl reads before jsonargparse does: a task's simulator arguments given on the command
line are merged into the config file's dict instead of replacing it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


#: a task's dict of simulator arguments: given on the command line, merged into the config file's dict
SIMULATOR_KWARGS = ("scenario_kwargs", "task_kwargs", "env_kwargs", "substrate_kwargs")


def merge_simulator_kwargs(argv: list[str]) -> list[str]:
    """``--model.init_args.task.init_args.scenario_kwargs '{n_agents: 3}'`` changes that key of the config file's
    dict and keeps the others (jsonargparse would replace the whole dict, silently dropping e.g. balance's
    ``package_mass``): the argument is rewritten to the merged dict before parsing (so ``--print_config`` and the
    run's ``config.yaml`` show it) and stderr says so. To drop a key, give the whole dict in a config file."""
    import json

    import yaml

    argv, files = list(argv), []
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            files.append(argv[i + 1])
        elif arg.startswith("--config="):
            files.append(arg.split("=", 1)[1])
        name, inline, text = arg.partition("=")
        field = name.rpartition(".")[2]
        if not (name.startswith("--model.") and name.endswith(".task.init_args." + field)
                and field in SIMULATOR_KWARGS):
            continue
        if not inline and i + 1 >= len(argv):
            continue  # the parser names the missing value
        try:
            given = yaml.safe_load(text if inline else argv[i + 1])
        except yaml.YAMLError:
            continue  # the parser names the bad value
        from_files = task_argument_in_files(files, field)
        if not isinstance(given, dict) or not isinstance(from_files, dict):
            continue
        merged = {**from_files, **given}
        if merged == given:
            continue
        value = json.dumps(merged)
        if inline:
            argv[i] = f"{name}={value}"
        else:
            argv[i + 1] = value
        print(f"lit-marl: task.{field}: the command line's {given} merged into the config file's {from_files}: "
              f"{merged} (to drop a key, give the whole dict in a config file)", file=sys.stderr)
    return argv


def task_argument_in_files(files: list[str], field: str) -> Any:
    """The value of ``model.init_args.task.init_args.<field>`` in the last of these YAML files that sets it."""
    import yaml

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
