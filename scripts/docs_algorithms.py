"""The Algorithms pages' generated tables, written before every docs build (``docs/_ext/generated_tables.py`` calls
``write_all``) into ``docs/_generated/`` (not committed), so the pages cannot drift from the code:

* ``algorithms_summary.md``: what each of the 13 algorithms can be used with, one row each;
* ``algorithm_<name>_capabilities.md``: the same for one algorithm, with the ``ConfigError`` each refusal raises (for
  the Ensemble: which algorithms can share one);
* ``algorithm_<name>_arguments.md``: its arguments, defaults and a line each, from the signatures and docstrings;
* ``algorithm_<name>_configs.md``: the shipped configs (and benchmark grids) that train it;
* ``algorithms_run_arguments.md``: the run's arguments, the same for every algorithm.

Every capability is found by asking the code, not written down: each algorithm is built (networks and all, no
environment stepped) on a tiny VMAS *balance* task with the setting in question, and a ``ConfigError`` means the
code refuses it; DDP asks :func:`lit_marl.distributed.shares`, as the Trainer's setup does. About 150 constructions,
a few seconds. ``tests/test_docs_algorithms.py`` checks the tables against the capability flags and, for a few cells,
against a real ``fit``.

    python scripts/docs_algorithms.py         # writes docs/_generated/algorithm*_*.md (what the build does)
"""

from __future__ import annotations

import functools
import inspect
import re
import runpy
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from lit_marl import algorithms as algorithms_module  # noqa: E402
from lit_marl.algorithms import Ensemble, GroupLearner, MarlAlgorithm, OffPolicyLearner  # noqa: E402
from lit_marl.algorithms.arguments import LOOP_CONTEXT, _args_section, _own_init, declaring, learner_skip  # noqa: E402
from lit_marl.algorithms.loops import OffPolicyLoop, OnPolicyLoop, loop_kind  # noqa: E402
from lit_marl.algorithms.off_policy import AnnealedExploration  # noqa: E402
from lit_marl.algorithms.registry import algorithms_by_name  # noqa: E402
from lit_marl.distributed import shares  # noqa: E402
from lit_marl.envs import VmasTask  # noqa: E402
from lit_marl.errors import ConfigError  # noqa: E402
from lit_marl.models import Gru, Mlp  # noqa: E402

#: the pages, in the order the index lists them (each algorithm's ``algorithm_name``)
PAGES = ["mappo", "ippo", "maddpg", "iddpg", "masac", "isac", "qmix", "vdn", "iql", "happo", "hatrpo", "hasac",
         "ensemble"]

#: each capability a page's table answers, in order: key -> the row's label
ROWS = {
    "loop": "Trains on",
    "continuous": "Continuous actions",
    "discrete": "Discrete actions",
    "shared_policy": "One policy network shared by a group's agents (`share_policy_params: true`)",
    "own_policy": "A policy network per agent (`share_policy_params: false`)",
    "critic": "Critic",
    "recurrent_policy": "Recurrent policy (`actor_model: Gru` or `Lstm`)",
    "recurrent_critic": "Recurrent critic (`critic_model: Gru` or `Lstm`)",
    "agent_ids_policy": "Agent ids in the policy (`Mlp(agent_id=true)`)",
    "agent_ids_critic": "Agent ids in the critic, where it reads the agents' observations",
    "groups": "Tasks of several agent groups",
    "ensemble": "In an `Ensemble` (another algorithm per group)",
    "ddp": "Several processes (DDP: `trainer.devices` > 1 or several nodes)",
    "compile": "`compile: true` (`torch.compile` of each loss)",
}

#: the summary table's columns: key -> header (a column shows the short form of that capability)
SUMMARY = {"loop": "Trains on", "continuous": "Continuous", "discrete": "Discrete", "policy": "Policy parameters",
           "critic": "Critic", "recurrent": "Recurrent", "agent_ids_policy": "Agent ids",
           "ensemble": "Ensemble", "ddp": "DDP", "compile": "`compile`"}


@dataclass(frozen=True)
class Cell:
    """One answer: what the table shows, the short form the summary shows, and the ConfigError the code raised
    where it refuses."""

    text: str
    short: str
    refusal: str | None = None

    @property
    def supported(self) -> bool:
        return self.refusal is None


def _answer(refusal: str | None, yes: str = "yes", short_yes: str = "yes") -> Cell:
    return Cell(yes, short_yes) if refusal is None else Cell("**no**", "no", refusal)


# ---------------------------------------------------------------------------------------------------- probing
@functools.lru_cache(maxsize=None)
def probe_task(continuous: bool, groups: int = 1) -> VmasTask:
    """VMAS *balance* with 2 agents and 10-step episodes (its probe env built once per task): in one group, or one
    group per agent."""
    grouping = {"agent_groups": "one_group_per_agent"} if groups > 1 else {}
    return VmasTask("balance", max_steps=10, continuous_actions=continuous, n_agents=2, **grouping)


#: a run of the smallest sizes every algorithm takes (2 envs x 10 steps; sizes split over 2 processes)
RUN = {"frames_per_batch": 20, "num_envs": 2, "max_frames": 20, "evaluation_episodes": 2, "test_episodes": 2}
LOOP_SIZES = {OnPolicyLoop: {"n_minibatch_iters": 1, "minibatch_size": 10},
              OffPolicyLoop: {"n_optimizer_steps": 1, "train_batch_size": 10}}


def small() -> Mlp:
    return Mlp(num_cells=[8])


def loop_sizes(cls: type[MarlAlgorithm]) -> dict[str, int]:
    return dict(LOOP_SIZES[cls.learner_class.loop])


def home_continuous(cls: type[MarlAlgorithm]) -> bool:
    """The action space an algorithm's other probes use: continuous where it takes them, else discrete."""
    return bool(cls.supports_continuous_actions)


def has_critic_model(cls: type[MarlAlgorithm]) -> bool:
    return "critic_model" in inspect.signature(cls).parameters


def build(cls: type[MarlAlgorithm], continuous: bool | None = None, groups: int = 1, **arguments: Any) -> Any:
    """``cls`` on the probe task with small networks and sizes, and ``arguments`` (they win)."""
    continuous = home_continuous(cls) if continuous is None else continuous
    models = {"actor_model": small(), **({"critic_model": small()} if has_critic_model(cls) else {})}
    memory = {} if cls.on_policy else {"memory_size": 100}
    return cls(probe_task(continuous, groups), **RUN, **loop_sizes(cls), **memory, **{**models, **arguments})


def build_ensemble(cls: type[MarlAlgorithm], continuous: bool | None = None) -> Ensemble:
    """An Ensemble on the two-group probe task with ``cls`` in both groups."""
    continuous = home_continuous(cls) if continuous is None else continuous
    mlp = {"class_path": "lit_marl.models.Mlp", "init_args": {"num_cells": [8]}}
    init_args = {"actor_model": mlp, **({"critic_model": mlp} if has_critic_model(cls) else {}),
                 **({} if cls.on_policy else {"memory_size": 100})}
    task = probe_task(continuous, groups=2)
    entry = {"class_path": f"lit_marl.algorithms.{cls.__name__}", "init_args": init_args}
    return Ensemble(task, {group: entry for group in task.group_map}, **RUN, **loop_sizes(cls))


def refusal(make: Callable[[], Any]) -> str | None:
    """The message of the ConfigError ``make`` raises, or None where it builds."""
    try:
        make()
    except ConfigError as err:
        return str(err)
    return None


def ensemble_partners(cls: type[MarlAlgorithm]) -> list[str]:
    """The algorithms an Ensemble takes beside ``cls``: those whose learners train in the same loop (the rule
    :class:`~lit_marl.algorithms.Ensemble` applies), the ones refused in an ensemble left out."""
    kind = loop_kind(cls.learner_class)
    return [other.__name__ for other in ordered_algorithms() if other.learner_class is not None
            and loop_kind(other.learner_class) == kind
            and refusal(lambda other=other: build_ensemble(other)) is None]


def critic_cell(cls: type[MarlAlgorithm]) -> Cell:
    """What the critic sees: the algorithm's fixed ``centralised_critic`` or ``mixer`` setting, or the family's."""
    learner, settings = cls.learner_class, cls.learner_settings
    if not learner.has_critic:
        mixer = settings.get("mixer")
        if mixer == "vdn":
            return Cell("none: the team value is the sum of the agents' Q-values", "none (sum of Q-values)")
        if mixer == "qmix":
            return Cell("none: a monotonic network, conditioned on the global state (or the group's observations), "
                        "mixes the agents' Q-values", "none (monotonic mixer)")
        return Cell("none: each agent's Q-function of its own observation", "none (own Q-values)")
    centralised = settings.get("centralised_critic")
    if centralised is True:
        return Cell("centralised: it sees all the group's agents (or the task's global state)", "centralised")
    if centralised is False:
        return Cell("decentralised: each agent's critic sees its own observation", "per agent")
    if "centralised_critic" not in inspect.signature(learner).parameters:  # HASAC: one critic of the joint action
        return Cell("centralised: twin Q-functions of the group's joint action (and all observations or the "
                    "global state)", "centralised")
    return Cell("centralised or per agent (`centralised_critic`)", "either")


def loop_cell(cls: type[MarlAlgorithm]) -> Cell:
    learner = cls.learner_class
    data = "the frames just collected (on-policy)" if cls.on_policy else "a replay buffer (off-policy)"
    short = "on-policy" if cls.on_policy else "off-policy"
    _, sequential, whole_batch = loop_kind(learner)
    if sequential:
        turn = "one trust-region step each on the whole batch" if whole_batch else "a gradient step each in turn"
        return Cell(f"{data}; the agents update one after another in a random order ({turn})",
                    f"{short}, agents in turn")
    return Cell(data, short)


@functools.lru_cache(maxsize=None)
def capabilities(name: str) -> dict[str, Cell]:
    """Every row of :data:`ROWS` for the algorithm ``name``, by building it with each setting."""
    cls = algorithms_by_name()[name]
    gru = Gru(hidden_size=8)
    cells = {"loop": loop_cell(cls)}
    cells["continuous"] = _answer(refusal(lambda: build(cls, continuous=True)))
    cells["discrete"] = _answer(refusal(lambda: build(cls, continuous=False)))
    cells["shared_policy"] = _answer(refusal(lambda: build(cls, share_policy_params=True)))
    cells["own_policy"] = _answer(refusal(lambda: build(cls, share_policy_params=False)))
    cells["critic"] = critic_cell(cls)
    cells["recurrent_policy"] = _answer(refusal(lambda: build(cls, actor_model=gru)))
    cells["agent_ids_policy"] = _answer(refusal(lambda: build(cls, actor_model=Mlp([8], agent_id=True))))
    if has_critic_model(cls):
        cells["recurrent_critic"] = _answer(refusal(lambda: build(cls, critic_model=gru)))
        cells["agent_ids_critic"] = _answer(refusal(lambda: build(cls, critic_model=Mlp([8], agent_id=True))))
    else:
        cells["recurrent_critic"] = cells["agent_ids_critic"] = Cell("no critic", "no critic")
    cells["groups"] = _answer(refusal(lambda: build(cls, groups=2)))
    refused = refusal(lambda: build_ensemble(cls))
    partners = ", ".join(ensemble_partners(cls)) if refused is None else ""
    cells["ensemble"] = _answer(refused, f"yes, beside {partners} (groups sharing one training loop)")
    model = build(cls)
    problems = shares(model, 2, "fit")
    cells["ddp"] = _answer("; ".join(problems) if problems else None)
    cells["compile"] = _answer(refusal(lambda: build(cls, compile=True)))
    ordered = {key: cells[key] for key in ROWS}
    ordered["policy"] = policy_summary(ordered)
    ordered["recurrent"] = recurrent_summary(ordered)
    return ordered


def policy_summary(cells: dict[str, Cell]) -> Cell:
    shared, own = cells["shared_policy"].supported, cells["own_policy"].supported
    text = {(True, True): "shared or per agent", (False, True): "per agent", (True, False): "shared"}[(shared, own)]
    return Cell(text, text)


def recurrent_summary(cells: dict[str, Cell]) -> Cell:
    policy, critic = cells["recurrent_policy"].supported, cells["recurrent_critic"].supported
    if policy and critic and cells["recurrent_critic"].text != "no critic":
        return Cell("policy and critic", "policy and critic")
    return Cell("policy", "policy") if policy else Cell("no", "no")


def ordered_algorithms() -> list[type[MarlAlgorithm]]:
    found = algorithms_by_name()
    return [found[name] for name in PAGES if name in found]


# ---------------------------------------------------------------------------------------------------- tables
def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _page_link(name: str) -> str:
    """A link to an algorithm's page (by document name: a generated file is included from another folder, so a
    relative link would resolve from ``_generated/``)."""
    cls = algorithms_by_name()[name]
    return f"{{doc}}`{cls.__name__} </algorithms/{name}>`"


def summary_table() -> str:
    """One row per algorithm (the Ensemble's cells are its groups' algorithms')."""
    lines = ["| Algorithm | " + " | ".join(SUMMARY.values()) + " |", "|---" * (len(SUMMARY) + 1) + "|"]
    for cls in ordered_algorithms():
        name = cls.algorithm_name
        if cls.learner_class is None:  # the Ensemble: each group's algorithm decides
            row = ["one loop for all groups"] + ["its groups'"] * (len(SUMMARY) - 1)
        else:
            cells = capabilities(name)
            row = [cells[key].short for key in SUMMARY]
        lines.append(f"| {_page_link(name)} | " + " | ".join(_escape(v) for v in row) + " |")
    return "\n".join(lines) + "\n"


def capability_table(name: str) -> str:
    """The page's table, then the message of each refusal (what a user who asks for it reads)."""
    cells = capabilities(name)
    lines = ["| Can I use it with… | Answer |", "|---|---|"]
    notes = []
    for key, label in ROWS.items():
        cell = cells[key]
        text = cell.text
        if cell.refusal is not None:
            notes.append(cell.refusal)
            text = f"{text} [{len(notes)}]"
        lines.append(f"| {_escape(label)} | {_escape(text)} |")
    if notes:
        lines += ["", "What the code answers where it refuses (a `ConfigError`, before any environment steps):", ""]
        lines += [f"{i}. `{_code(note)}`" for i, note in enumerate(notes, 1)]
    return "\n".join(lines) + "\n"


def ensemble_table() -> str:
    """Which algorithms can share an Ensemble (those whose learners train in the same loop), and which cannot be in
    one, with the ConfigError it raises."""
    lines = ["| The groups' loop | Algorithms that can share an ensemble |", "|---|---|"]
    kinds: dict[tuple, list[str]] = {}
    refused = []
    for cls in ordered_algorithms():
        if cls.learner_class is None:
            continue
        cell = capabilities(cls.algorithm_name)["ensemble"]
        if cell.supported:
            kinds.setdefault(loop_kind(cls.learner_class), []).append(cls)
        else:
            refused.append((cls, cell.refusal))
    for members in kinds.values():
        lines.append(f"| {_escape(loop_cell(members[0]).text)} | "
                     f"{', '.join(_page_link(c.algorithm_name) for c in members)} |")
    for cls, message in refused:
        lines += ["", f"{_page_link(cls.algorithm_name)} cannot be in an ensemble: `{_code(message)}`"]
    return "\n".join(lines) + "\n"


def _code(text: str) -> str:
    """``text`` inside one code span (its own backticks dropped)."""
    return text.replace("`", "'")


# ---------------------------------------------------------------------------------------------------- arguments
#: how a table of arguments is titled, by the class that declares them
TITLES = {
    GroupLearner: "Networks and optimisation (every algorithm)",
    OffPolicyLearner: "Replay buffer and target networks (every off-policy algorithm)",
    AnnealedExploration: "Exploration",
    OnPolicyLoop: "Training loop (on-policy)",
    OffPolicyLoop: "Training loop (off-policy)",
}
PUBLIC = set(algorithms_module.__all__)
ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|obj):`~?([^`]+)`")


def _markdown(text: str) -> str:
    """A docstring's reST as Markdown table text: ``code`` spans, roles as code (their short names)."""
    text = ROLE.sub(lambda m: f"`{m.group(1).split('.')[-1]}`", text)
    return _escape(re.sub(r"``([^`]+)``", r"`\1`", " ".join(text.split())))


def first_sentence(text: str) -> str:
    parts = re.split(r"(?<=[a-z0-9)`'\]])(?<!e\.g)(?<!i\.e)\.\s+(?=[A-Z(`])", text.strip(), maxsplit=1)
    sentence = parts[0]
    return sentence if sentence.endswith(".") or len(parts) == 1 and sentence.endswith(")") else sentence + "."


def documented(klass: type) -> dict[str, str]:
    """``{argument: its docstring entry}`` of the ``Args:`` sections of ``klass`` and its own ``__init__``."""
    entries: dict[str, list[str]] = {}
    name = None
    init = _own_init(klass)
    for line in _args_section(klass.__doc__) + _args_section(init.__doc__ if init is not None else None):
        if line and not line.startswith(" "):
            name, _, rest = line.partition(":")
            name = name.strip()
            entries[name] = [rest.strip()]
        elif name is not None:
            entries[name].append(line.strip())
    return {key: " ".join(lines).strip() for key, lines in entries.items()}


def _title(klass: type) -> str:
    if klass in TITLES:
        return TITLES[klass]
    link = (f"{{py:class}}`~lit_marl.algorithms.{klass.__name__}`" if klass.__name__ in PUBLIC
            else f"`{klass.__name__}`")
    return f"Its own, declared by {link}"


def argument_sections(cls: type[MarlAlgorithm]) -> list[tuple[type, list[tuple[str, Any, str]]]]:
    """``(declaring class, [(argument, default, description)])`` of the algorithm's own arguments (its learner's and
    its loop's, or an Ensemble's), most specific class first; the run's are listed once, on the index."""
    signature = inspect.signature(cls).parameters
    chains: list[tuple[type, list[inspect.Parameter]]] = []
    if cls.learner_class is not None:
        chains += [(k, p) for k, _, p in declaring(cls.learner_class, learner_skip(cls))]
        chains += [(k, p) for k, _, p in declaring(cls.learner_class.loop, LOOP_CONTEXT)]
    else:  # the Ensemble: its own arguments
        chains += [(k, p[1:]) for k, _, p in declaring(cls) if k is cls]
    seen: set[str] = set()
    sections = []
    for klass, parameters in chains:
        docs = documented(klass)
        rows = []
        for parameter in parameters:
            if parameter.name in seen or parameter.name not in signature:
                continue
            seen.add(parameter.name)
            rows.append((parameter.name, signature[parameter.name].default, docs.get(parameter.name, "")))
        if rows:
            sections.append((klass, rows))
    return sections


def _default(value: Any) -> str:
    if value is inspect.Parameter.empty:
        return "required"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10_000:
        return f"`{value:_}`"  # 1_000_000: the same number to Python and to the YAML of a config
    return f"`{_code(repr(value))}`"


def argument_table(rows: list[tuple[str, Any, str]]) -> list[str]:
    lines = ["| Argument | Default | What it sets |", "|---|---|---|"]
    lines += [f"| `{name}` | {_default(default)} | {_markdown(first_sentence(doc)) if doc else ''} |"
              for name, default, doc in rows]
    return lines


def arguments_page(cls: type[MarlAlgorithm]) -> str:
    lines = []
    for klass, rows in argument_sections(cls):
        lines += [f"**{_title(klass)}**", "", *argument_table(rows), ""]
    lines.append(f"Each argument in full: {{py:class}}`lit_marl.algorithms.{cls.__name__}`. The run's arguments "
                 f"(sizes, budget, evaluation, devices, `seed`, `compile`…) are every algorithm's: "
                 f"{{ref}}`the run's arguments <algorithms-run-arguments>`.")
    return "\n".join(lines) + "\n"


def run_arguments_page() -> str:
    """The run's arguments (:class:`~lit_marl.algorithms.MarlAlgorithm`'s), the same for every algorithm."""
    docs = documented(MarlAlgorithm)
    parameters = [p for _, _, params in declaring(MarlAlgorithm) for p in params][1:]  # after ``task``
    rows = [(p.name, p.default, docs.get(p.name, "")) for p in parameters]
    return "\n".join(argument_table(rows)) + "\n"


# ---------------------------------------------------------------------------------------------------- configs
def _comment_header(path: Path) -> list[str]:
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return lines


#: a config's pointer to the issue it came from: project history, not what a reader of the docs needs
ISSUE = re.compile(r"(?<=\()issue \d+[:;]\s*|\s*\(issue \d+[^;:)]*\)|,?\s*issue \d+")


def config_description(path: Path) -> tuple[str, str]:
    """The first sentence of a config's header comment (without issue numbers), and what it needs installed (its
    ``Needs:`` line)."""
    header = _comment_header(path)
    text = []
    for line in header:
        if not line or re.match(r"(Run|Needs|Report|Hyper-parameters)\b.*:", line):
            break
        text.append(line)
    needs = next((re.sub(r"^Needs:\s*", "", line) for line in header if line.startswith("Needs:")), "")
    return ISSUE.sub("", first_sentence(" ".join(text))), needs


def _class_name(path: str | None) -> str:
    return (path or "").rpartition(".")[2]


@functools.lru_cache(maxsize=None)
def shipped_configs() -> tuple[dict[str, list[tuple[str, str]]], dict[str, list[str]]]:
    """``({class name: [(config file, role)]}, {class name: [grid file]})`` of ``configs/`` (role: ``""``, or the
    groups of an Ensemble it trains) and of ``configs/benchmarks/``."""
    configs: dict[str, list[tuple[str, str]]] = {}
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        model = (yaml.safe_load(path.read_text()) or {}).get("model") or {}
        name = _class_name(model.get("class_path"))
        configs.setdefault(name, []).append((path.name, ""))
        for group, entry in ((model.get("init_args") or {}).get("algorithms") or {}).items():
            configs.setdefault(_class_name(entry.get("class_path")), []).append((path.name, group))
    grids: dict[str, list[str]] = {}
    for path in sorted((ROOT / "configs" / "benchmarks").glob("*.yaml")):
        for entry in ((yaml.safe_load(path.read_text()) or {}).get("algorithms") or {}).values():
            config, overrides = (entry, {}) if isinstance(entry, str) else (entry["config"], entry.get("overrides", {}))
            name = _class_name(overrides.get("model.class_path"))
            if not name:
                model = (yaml.safe_load((path.parent / config).read_text()) or {}).get("model") or {}
                name = _class_name(model.get("class_path"))
            if path.name not in grids.setdefault(name, []):
                grids[name].append(path.name)
    return configs, grids


def configs_page(cls: type[MarlAlgorithm]) -> str:
    configs, grids = shipped_configs()
    lines = ["| Config | What it trains | Needs |", "|---|---|---|"]
    for file, group in configs.get(cls.__name__, []):
        description, needs = config_description(ROOT / "configs" / file)
        if group:
            description = f"group `{group}` of an ensemble: {description}"
        needed = f"`{_code(needs)}`" if needs else "(nothing more)"
        lines.append(f"| `configs/{file}` | {_markdown(description)} | {needed} |")
    if len(lines) == 2:
        lines = ["No config of its own ships yet: take a config of its family and change `model.class_path`."]
    own_grids = grids.get(cls.__name__, [])
    if own_grids:
        lines += ["", "Benchmark grids that run it (`lit-marl benchmark --config configs/benchmarks/<grid>`):", ""]
        for grid in own_grids:
            description, _ = config_description(ROOT / "configs" / "benchmarks" / grid)
            lines.append(f"- `configs/benchmarks/{grid}`: {_markdown(description)}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------- files
def pages() -> dict[str, str]:
    """Every generated file's name and text."""
    files = {"algorithms_summary.md": summary_table(), "algorithms_run_arguments.md": run_arguments_page()}
    for cls in ordered_algorithms():
        name = cls.algorithm_name
        files[f"algorithm_{name}_capabilities.md"] = (capability_table(name) if cls.learner_class is not None
                                                       else ensemble_table())
        files[f"algorithm_{name}_arguments.md"] = arguments_page(cls)
        files[f"algorithm_{name}_configs.md"] = configs_page(cls)
    return files


def write_all(out: Path) -> list[Path]:
    """Write every generated file into ``out`` (unchanged files are left alone, so Sphinx rebuilds no page)."""
    write_pages = runpy.run_path(str(Path(__file__).with_name("docs_api.py")))["write_pages"]
    return write_pages(out, pages())


if __name__ == "__main__":
    for path in write_all(ROOT / "docs" / "_generated"):
        print(path.relative_to(ROOT))
