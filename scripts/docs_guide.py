"""The user guide's generated tables, written before every docs build (``docs/_ext/generated_tables.py`` calls
``write_all``) into ``docs/_generated/`` (not committed), so the task pages cannot drift from the registries, the
task classes' arguments or the shipped configs:

- ``tasks_<family>.md``: the family's tasks (``VMAS_SCENARIOS``, ``PETTINGZOO_TASKS``, MaMuJoCo's ``SCENARIOS``,
  Melting Pot's ``SUBSTRATES``, RWARE's sizes and difficulties, LBF's id pattern);
- ``task_args_<family>.md``: the task class's arguments, defaults and meanings (its signature and docstring);
- ``task_configs_<family>.md``: the shipped configs and benchmark grids that use the family.

    python scripts/docs_guide.py            # writes docs/_generated/task*_*.md (what the build does)
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: the task pages' families: the task class, the pyproject extra that installs the simulator (None: always
#: installed), and which of PETTINGZOO_TASKS' entries belong to it
FAMILIES: dict[str, dict[str, Any]] = {
    "vmas": {"cls": "VmasTask", "extra": None},
    "pettingzoo": {"cls": "PettingZooTask", "extra": "pettingzoo"},
    "magent2": {"cls": "PettingZooTask", "extra": "magent2"},
    "meltingpot": {"cls": "MeltingPotTask", "extra": "meltingpot"},
    "mamujoco": {"cls": "MaMuJoCoTask", "extra": "mamujoco"},
    "lbf": {"cls": "LbfTask", "extra": "lbf"},
    "rware": {"cls": "RwareTask", "extra": "rware"},
    "gymnasium": {"cls": "GymnasiumTask", "extra": None},
    "custom": {"cls": "CustomTask", "extra": None},
}

#: PettingZoo's task families, by the module an entry lives in
PETTINGZOO_KINDS = (("mpe2.", "MPE"), ("pettingzoo.sisl.", "SISL"), ("pettingzoo.classic.", "classic (turn-based)"),
                    ("magent2.", "MAgent2"))


# ----------------------------------------------------------------------------------------------- helpers
def _cell(text: Any) -> str:
    """A Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(value: Any) -> str:
    return f"`{value}`"


def _rst_to_md(text: str) -> str:
    """A docstring's reStructuredText inline markup as Markdown: ``x`` and :role:`~a.b.C` become code spans."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`", text)
    return text.replace("``", "`")


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def docstring_args(cls: type) -> dict[str, str]:
    """``{argument: its description}`` from the Google-style ``Args:`` section of ``cls``'s docstring."""
    doc = inspect.getdoc(cls) or ""
    args: dict[str, str] = {}
    inside, current = False, None
    for line in doc.splitlines():
        if line.strip() == "Args:":
            inside = True
            continue
        if not inside:
            continue
        if line and not line.startswith(" "):  # the next section, or prose after the arguments
            break
        match = re.match(r"^    (\*{0,2}\w+): ?(.*)$", line)
        if match:
            current = match.group(1)
            args[current] = match.group(2)
        elif current is not None and line.strip():
            args[current] += " " + line.strip()
    return args


def task_arguments(cls: type) -> list[tuple[str, str, str]]:
    """``(argument, default, description)`` for each argument of a task class, in its signature's order."""
    described = docstring_args(cls)
    rows = []
    for name, parameter in inspect.signature(cls).parameters.items():
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            name = f"**{name}"
            default = ""
        elif parameter.default is inspect.Parameter.empty:
            default = "required"
        else:
            default = _yaml_value(parameter.default)
        rows.append((name, default, _rst_to_md(described.get(name, ""))))
    return rows


def _yaml_value(value: Any) -> str:
    """A default as a YAML config writes it: ``true``, ``null``, ``balance``, ``[32, 32]``."""
    return yaml.safe_dump(value, default_flow_style=True, width=10_000).strip().removesuffix("...").strip()


def _first_comment(path: Path) -> str:
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if text.startswith(("Run:", "Needs:", "Report:")):
            break
        lines.append(text)
    return _first_sentence(" ".join(lines))


def _first_sentence(text: str, longest: int = 160) -> str:
    """The text up to its first full stop outside parentheses, or, where that is longer than ``longest``, up to its
    first colon or semicolon outside them."""
    depth, end, cut = 0, len(text), None
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth or char not in ".:;" or (i + 1 < len(text) and text[i + 1] != " "):
            continue
        if char == ".":
            end = i
            break
        cut = i if cut is None else cut
    if end > longest and cut is not None:
        end = cut
    elif end > longest:  # no stop outside parentheses early on: up to the first parenthesis
        end = text.find(" (", 40) if text.find(" (", 40) > 0 else end
    return text[:end].rstrip(".:; ")


def _task_of(config: dict[str, Any]) -> dict[str, Any] | None:
    try:
        return config["model"]["init_args"]["task"]
    except (KeyError, TypeError):
        return None


def configs_using(family: str) -> list[tuple[str, str, str]]:
    """``(config path, algorithm, what it is)`` of each shipped config whose task is the family's."""
    rows = []
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        config = yaml.safe_load(path.read_text())
        task = _task_of(config)
        if task is None or _family_of(task) != family:
            continue
        algorithm = str(config["model"]["class_path"]).rsplit(".", 1)[-1]
        rows.append((f"configs/{path.name}", algorithm, _first_comment(path)))
    return rows


def grids_using(family: str) -> list[tuple[str, list[str]]]:
    """``(grid path, [task names])`` of each benchmark grid with a task of the family."""
    rows = []
    for path in sorted((ROOT / "configs" / "benchmarks").glob("*.yaml")):
        grid = yaml.safe_load(path.read_text())
        names = [name for name, task in (grid.get("tasks") or {}).items() if _family_of(task) == family]
        if names:
            rows.append((f"configs/benchmarks/{path.name}", names))
    return rows


def _family_of(task: dict[str, Any]) -> str | None:
    """Which task page a task of a config (``{class_path, init_args}``) belongs to."""
    cls = str(task.get("class_path", "")).rsplit(".", 1)[-1]
    if cls == "PettingZooTask":
        from lit_marl.envs import PETTINGZOO_TASKS

        name = (task.get("init_args") or {}).get("task", "simple_spread")
        entry = PETTINGZOO_TASKS.get(name)
        return entry.extra if entry is not None else "pettingzoo"
    return next((family for family, spec in FAMILIES.items() if spec["cls"] == cls and family != "magent2"), None)


# ------------------------------------------------------------------------------------------ the tables
def vmas_table() -> str:
    import vmas

    from lit_marl.envs import VMAS_SCENARIOS
    from lit_marl.envs.vmas_batched import PER_ENV_SCENARIOS

    def collection(name: str) -> str:
        return ("VMAS" if name in vmas.scenarios else "MPE (VMAS's port)" if name in vmas.mpe_scenarios
                else "debug")

    rows = [[_code(name), collection(name),
             f"one at a time: {PER_ENV_SCENARIOS[name]}" if name in PER_ENV_SCENARIOS else "batched"]
            for name in VMAS_SCENARIOS]
    return (f"{len(VMAS_SCENARIOS)} scenarios (`lit_marl.envs.VMAS_SCENARIOS`, VMAS {vmas.__version__}).\n\n"
            + _table(["scenario", "collection", "resets of finished environments"], rows))


def pettingzoo_table(extra: str) -> str:
    from lit_marl.envs import PETTINGZOO_TASKS

    def kind(module: str) -> str:
        return next(label for prefix, label in PETTINGZOO_KINDS if module.startswith(prefix))

    rows = []
    for name, entry in PETTINGZOO_TASKS.items():
        if entry.extra != extra:
            continue
        defaults = ", ".join(f"{k}={v!r}" for k, v in entry.defaults.items()) or "the env's own"
        length = (f"{entry.defaults['max_cycles']} steps" if "max_cycles" in entry.defaults
                  else f"ends by its rules (at most {entry.game_length} moves)" if entry.game_length else "")
        observation = "image `[H, W, C]` per agent" if entry.images else "vector per agent"
        rows.append([_code(name), kind(entry.module), _code(entry.module), entry.actions, observation,
                     "yes" if entry.has_state else "no", length, defaults])
    return _table(["task", "family", "module", "actions", "observation", "global state", "episode",
                   "default arguments"], rows)


def mamujoco_table() -> str:
    from lit_marl.envs.mamujoco import DEFAULT_MAX_STEPS, SCENARIOS

    rows = [[_code(scenario), ", ".join(_code(conf) for conf in confs)] for scenario, confs in SCENARIOS.items()]
    return (f"Episodes are {DEFAULT_MAX_STEPS} steps unless `max_steps` says otherwise.\n\n"
            + _table(["scenario", "agent_conf"], rows))


def meltingpot_substrates() -> list[str] | None:
    """Melting Pot's substrates, or None where it is not installed."""
    from lit_marl.envs.meltingpot import import_meltingpot
    from lit_marl.errors import ConfigError

    try:
        return sorted(import_meltingpot().SUBSTRATES)
    except ConfigError:
        return None


def meltingpot_table() -> str:
    substrates = meltingpot_substrates()
    if substrates is None:
        return ("*Melting Pot is not installed where these pages were built, so its substrates are not listed "
                "here; `meltingpot.substrate.SUBSTRATES` lists them once it is.*\n")
    groups: dict[str, list[str]] = {}
    for name in substrates:
        base, _, variant = name.partition("__")
        groups.setdefault(base, []).append(variant)
    rows = [[_code(base), ", ".join(_code(f"{base}__{v}") if v else _code(base) for v in variants)]
            for base, variants in groups.items()]
    return (f"{len(substrates)} substrates (`meltingpot.substrate.SUBSTRATES`), by game.\n\n"
            + _table(["game", "substrates"], rows))


def rware_table() -> str:
    from lit_marl.envs.rware import DIFFICULTIES, SIZES

    sizes = _table(["size", "shelf rows × shelf columns"],
                   [[_code(name), f"{rows} × {columns}"] for name, (rows, columns) in SIZES.items()])
    difficulties = _table(["difficulty", "requested shelves per robot"],
                          [[_code(name), f"{per:g}"] for name, per in DIFFICULTIES.items()])
    return sizes + "\n" + difficulties


def lbf_table() -> str:
    from lit_marl.envs.lbf import _ID_PATTERN, REGISTERED

    defaults = ", ".join(f"`{k}={v!r}`" for k, v in REGISTERED.items())
    return (f"Registered ids follow `{_ID_PATTERN}` (e.g. `Foraging-8x8-2p-2f-coop-v3`, "
            f"`Foraging-2s-8x8-2p-2f-coop-v3`); every id also sets {defaults}.\n")


def args_table(cls_name: str) -> str:
    import lit_marl.envs as envs

    cls = getattr(envs, cls_name)
    rows = [[_code(name), _code(default) if default and default != "required" else default, text]
            for name, default, text in task_arguments(cls)]
    return (f"Arguments of {{py:class}}`lit_marl.envs.{cls_name}` (under `model.init_args.task.init_args`):\n\n"
            + _table(["argument", "default", "meaning"], rows))


def configs_table(family: str) -> str:
    rows = [[_code(path), algorithm, text] for path, algorithm, text in configs_using(family)]
    grids = [[_code(path), ", ".join(names)] for path, names in grids_using(family)]
    out = _table(["config", "algorithm", "what it is"], rows) if rows else "No shipped config uses this family.\n"
    if grids:
        out += "\nBenchmark grids with these tasks:\n\n" + _table(["grid", "tasks"], grids)
    return out


#: the task list of each family (the families without a registry have none)
TASK_TABLES = {
    "vmas": vmas_table,
    "pettingzoo": lambda: pettingzoo_table("pettingzoo"),
    "magent2": lambda: pettingzoo_table("magent2"),
    "meltingpot": meltingpot_table,
    "mamujoco": mamujoco_table,
    "lbf": lbf_table,
    "rware": rware_table,
}


def write_all(out: Path) -> None:
    """Write every generated table of the user guide into ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for family, spec in FAMILIES.items():
        if family in TASK_TABLES:
            (out / f"tasks_{family}.md").write_text(TASK_TABLES[family]())
        (out / f"task_args_{family}.md").write_text(args_table(spec["cls"]))
        (out / f"task_configs_{family}.md").write_text(configs_table(family))


if __name__ == "__main__":
    write_all(ROOT / "docs" / "_generated")
