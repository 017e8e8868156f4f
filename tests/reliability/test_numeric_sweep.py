"""Issue 48 §6: every number of every shipped config, given -1, NaN and infinity, is refused by name before anything
is built, or is one of the few values documented with a meaning (:data:`DOCUMENTED`).

The numbers are read from ``lit-marl fit --config X --print_config`` (one config per algorithm: the configs of one
algorithm share its arguments) and swept in two ways:

* Lightning's and lit-marl's command-line settings (``seed_everything``, ``trainer.*``, ``checkpoint.*``,
  ``evaluation.*``), the same parser for every config: their union, each value through ``lit_marl.cli.main`` on
  ``configs/quickstart.yaml``. A refusal is exit 2 with the field in stderr, no traceback, before the model, Trainer or
  callbacks are built (building them raises here).
* The algorithm's own arguments (``model.init_args.*``) and its task's (``model.init_args.task.init_args.*``): the
  printed config's ``init_args`` with one value changed, given to the algorithm class as jsonargparse gives them
  (NaN and infinity are the YAML ``.nan`` and ``.inf``; ``-1`` an integer). A refusal is a ConfigError naming the
  field, raised before any environment is built (building one, even the probe that finds the agent groups, raises
  here). The command line maps a ConfigError to exit 2 (tests/reliability/test_bad_configs.py); through it, a case
  takes ~0.3 s, and the ~900 here would take minutes. The parser refuses NaN and infinity for integer fields before
  the class sees them; the class refuses them too (checked here).

Skipped, and why: the nested network configs (``actor_model``, ``critic_model``: every model class's every argument
is in test_bad_configs.py), an Ensemble's per-group algorithms (the algorithms themselves are swept here), and a
task's simulator arguments (``scenario_kwargs``, ``task_kwargs``…: the simulator's own, refused by the probe env
naming them, tests/reliability/test_simulator_refusals.py).
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import io
import math
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from lit_marl import envs
from lit_marl.cli import LitMarlCLI, main
from lit_marl.errors import ConfigError
from tests.helpers.tiny import CONFIGS

QUICKSTART = CONFIGS / "quickstart.yaml"

#: the values each number is given: as YAML reads them from a config file or the command line
VALUES = {"-1": -1, ".nan": math.nan, ".inf": math.inf}

#: values documented with a meaning (README, "Reliability"; lit_marl/cli_args.py NUMBER_FIELDS), kept
DOCUMENTED = {
    ("trainer.max_epochs", "-1"): "no limit: the frame budget (model.init_args.max_frames) ends training",
    ("trainer.max_steps", "-1"): "no limit on optimizer steps (Lightning's default)",
    ("trainer.num_sanity_val_steps", "-1"): "every validation batch in the sanity check",
    ("checkpoint.save_top_k", "-1"): "keep every periodic checkpoint",
}

#: nested configs not swept here (see the module docstring)
SKIPPED = ("model.init_args.actor_model.", "model.init_args.critic_model.", "model.init_args.algorithms.",
           "model.init_args.task.init_args.scenario_kwargs.", "model.init_args.task.init_args.task_kwargs.",
           "model.init_args.task.init_args.env_kwargs.", "model.init_args.task.init_args.substrate_kwargs.")


class Built(BaseException):
    """The case got past every check to building something (a BaseException: no ``except Exception`` turns it
    into a refusal)."""


def _one_config_per_algorithm() -> dict[str, Path]:
    """``{algorithm class_path: config}``: the first config of each algorithm, VMAS ones first (no optional
    simulator needed to build the task object)."""
    chosen: dict[str, Path] = {}
    for path in sorted(CONFIGS.glob("*.yaml"), key=lambda p: ("vmas" not in p.name, p.name)):
        class_path = yaml.safe_load(path.read_text())["model"]["class_path"]
        chosen.setdefault(class_path, path)
    return chosen


CHOSEN = _one_config_per_algorithm()


def _printed(config: Path) -> dict[str, Any]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(config), "--print_config"])
    assert exit_info.value.code in (0, None), err.getvalue()[-2000:]
    return yaml.safe_load(out.getvalue())


def _leaves(node: Any, prefix: str = ""):
    """``(dotted path, value)`` of every number (not a bool) under ``node``."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        yield prefix, node


@pytest.fixture(scope="module")
def printed() -> dict[str, dict[str, Any]]:
    return {class_path: _printed(config) for class_path, config in CHOSEN.items()}


def _task_classes(base: type = envs.Task) -> list[type]:
    """Task and every subclass of it (those of optional simulators too, once imported)."""
    return [base] + [sub for cls in base.__subclasses__() for sub in _task_classes(cls)]


@pytest.fixture
def nothing_built(monkeypatch):
    """Building the model, the Trainer or the callbacks, or any environment, raises :class:`Built`."""
    def built(*args, **kwargs):
        raise Built()

    monkeypatch.setattr(LitMarlCLI, "instantiate_classes", built)
    monkeypatch.setattr("lit_marl.envs.vmas.BatchedResetVmasEnv", built)
    for cls in _task_classes():
        for method in ("make_env", "_make_env"):  # the probe that finds the groups calls _make_env
            if method in vars(cls):
                monkeypatch.setattr(cls, method, built)


def _cli_field(path: str) -> bool:
    return path.split(".")[0] in ("seed_everything", "trainer", "checkpoint", "evaluation")


def _outcome(refused: bool, field: str, shown: str, message: str, traceback: bool = False) -> str | None:
    """None where the case is as required; else what went wrong."""
    if refused:
        if traceback:
            return f"a traceback: {message[-300:]!r}"
        if field not in message or shown.lstrip(".") not in message.lower():
            return f"refused without naming {field!r} and {shown!r}: {message[-300:]!r}"
        return None
    return "accepted, and not documented with a meaning"


def test_every_number_of_every_config_is_refused_by_name_or_documented(printed, nothing_built, capsys):
    start = time.perf_counter()
    cli_leaves = sorted({path for config in printed.values() for path, _ in _leaves(config) if _cli_field(path)})
    problems, messages, counts = [], [], {"cli": 0, "model": 0, "documented": 0}
    # Lightning's and lit-marl's command-line settings, through the command line
    for path in cli_leaves:
        for text in VALUES:
            with pytest.raises((SystemExit, Built)) as ended:
                main(["fit", "--config", str(QUICKSTART), f"--{path}", text])
            err = capsys.readouterr().err
            counts["cli"] += 1
            if ended.type is Built:
                counts["documented"] += (path, text) in DOCUMENTED
                problem = None if (path, text) in DOCUMENTED else _outcome(False, path, text, err)
            elif ended.value.code != 2:
                problem = f"exit code {ended.value.code}: {err[-300:]!r}"
            else:
                problem = _outcome(True, path, text, err, "Traceback" in err)
            if problem:
                problems.append(f"fit --config quickstart.yaml --{path} {text}: {problem}")
    cli_seconds = time.perf_counter() - start
    # each algorithm's own arguments and its task's, as jsonargparse hands them to the class
    for class_path, config in printed.items():
        module_name, _, name = class_path.rpartition(".")
        cls = getattr(importlib.import_module(module_name), name)
        init_args = config["model"]["init_args"]
        with pytest.raises(Built):  # as printed, the config is valid: each refusal below is its one changed value's
            cls(**copy.deepcopy(init_args))
        for path, _ in _leaves({"model": {"init_args": init_args}}):
            if _cli_field(path) or path.startswith(SKIPPED):
                continue
            keys = path.split(".")[2:]  # below model.init_args
            for text, value in VALUES.items():
                arguments = copy.deepcopy(init_args)
                node = arguments
                for key in keys[:-1]:
                    node = node[key]
                node[keys[-1]] = value
                counts["model"] += 1
                try:
                    cls(**arguments)
                except Built:
                    problem = _outcome(False, keys[-1], text, "")
                except ConfigError as err:
                    problem = _outcome(True, keys[-1], text, str(err))
                    messages.append(str(err))
                except Exception as err:  # noqa: BLE001 - a traceback through the command line
                    problem = _outcome(True, keys[-1], text, f"{type(err).__name__}: {err}", traceback=True)
                else:
                    problem = "built without building an environment (the sweep's sentinel was not reached)"
                if problem:
                    problems.append(f"{CHOSEN[class_path].name}: {path} {text}: {problem}")
    total = counts["cli"] + counts["model"]
    print(f"numeric sweep: {len(printed)} algorithms ({', '.join(c.name for c in CHOSEN.values())}); "
          f"{len(cli_leaves)} command-line fields x {len(VALUES)} values = {counts['cli']} CLI cases, "
          f"{counts['model']} algorithm/task cases; {total} in all, {counts['documented']} documented meanings "
          f"({cli_seconds:.0f} s through the command line, {time.perf_counter() - start - cli_seconds:.0f} s the rest)")
    assert not problems, f"{len(problems)} of {total} cases:\n" + "\n".join(problems)
    assert counts["cli"] >= 50 and counts["model"] >= 500  # the sweep found the configs' numbers
