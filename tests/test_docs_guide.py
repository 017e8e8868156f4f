"""The user guide's generated tables (``scripts/docs_guide.py``) and install instructions against the code: every
registry entry listed, every task argument described, every shipped config placed, every extra real."""

from __future__ import annotations

import inspect
import re
import runpy
from pathlib import Path

import pytest
import yaml

import lit_marl.envs as envs
from lit_marl.envs import PETTINGZOO_TASKS, VMAS_SCENARIOS
from lit_marl.envs.mamujoco import SCENARIOS as MAMUJOCO_SCENARIOS
from lit_marl.envs.rware import DIFFICULTIES, SIZES

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
GUIDE = runpy.run_path(str(ROOT / "scripts" / "docs_guide.py"))
FAMILIES = GUIDE["FAMILIES"]


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("generated")
    GUIDE["write_all"](out)
    return out


def _table_first_column(text: str) -> list[str]:
    """The first cell of every body row of the Markdown tables in ``text``, without backticks."""
    cells = []
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            cells.append(line.split(" | ")[0].removeprefix("| ").strip().strip("`"))
    return cells


def test_every_family_gets_its_argument_and_config_tables(generated):
    for family in FAMILIES:
        assert (generated / f"task_args_{family}.md").read_text().strip()
        assert (generated / f"task_configs_{family}.md").read_text().strip()
    assert {p.name for p in generated.glob("tasks_*.md")} == {f"tasks_{f}.md" for f in GUIDE["TASK_TABLES"]}


def test_vmas_table_lists_every_scenario(generated):
    rows = _table_first_column((generated / "tasks_vmas.md").read_text())
    assert rows[1:] == list(VMAS_SCENARIOS)  # the header, then one row per scenario, in the registry's order


@pytest.mark.parametrize("extra", ["pettingzoo", "magent2"])
def test_pettingzoo_tables_list_every_registered_task_of_their_extra(generated, extra):
    rows = _table_first_column((generated / f"tasks_{extra}.md").read_text())
    assert rows[1:] == [name for name, entry in PETTINGZOO_TASKS.items() if entry.extra == extra]


def test_every_pettingzoo_task_is_on_one_page(generated):
    listed = [name for extra in ("pettingzoo", "magent2")
              for name in _table_first_column((generated / f"tasks_{extra}.md").read_text())[1:]]
    assert sorted(listed) == sorted(PETTINGZOO_TASKS)


def test_mamujoco_table_lists_every_scenario_and_agent_conf(generated):
    text = (generated / "tasks_mamujoco.md").read_text()
    rows = {line.split(" | ")[0].strip("| `"): line for line in text.splitlines() if line.startswith("| `")}
    assert list(rows) == list(MAMUJOCO_SCENARIOS)
    for scenario, confs in MAMUJOCO_SCENARIOS.items():
        for conf in confs:
            assert f"`{conf.replace('|', chr(92) + '|')}`" in rows[scenario], (scenario, conf)


def test_meltingpot_table_lists_every_substrate_or_says_why_not(generated):
    text = (generated / "tasks_meltingpot.md").read_text()
    substrates = GUIDE["meltingpot_substrates"]()
    if substrates is None:
        assert "not installed" in text
        return
    assert f"{len(substrates)} substrates" in text
    listed = re.findall(r"`([a-z0-9_]+)`", text.split("\n\n", 1)[1])
    assert set(substrates) <= set(listed)


def test_rware_and_lbf_tables_follow_their_modules(generated):
    rware = _table_first_column((generated / "tasks_rware.md").read_text())
    assert set(SIZES) | set(DIFFICULTIES) <= set(rware)
    from lit_marl.envs.lbf import _ID_PATTERN

    assert _ID_PATTERN in (generated / "tasks_lbf.md").read_text()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_argument_tables_describe_every_argument(generated, family):
    cls = getattr(envs, FAMILIES[family]["cls"])
    text = (generated / f"task_args_{family}.md").read_text()
    rows = {line.split(" | ")[0].strip("| `"): line.split(" | ")[-1] for line in text.splitlines()
            if line.startswith("| `")}
    for name, parameter in inspect.signature(cls).parameters.items():
        name = f"**{name}" if parameter.kind is inspect.Parameter.VAR_KEYWORD else name
        assert name in rows, (family, name)
        assert rows[name].strip(" |"), f"{cls.__name__}'s docstring does not describe {name}"


def test_every_shipped_config_and_grid_task_is_on_a_task_page(generated):
    listed = "\n".join((generated / f"task_configs_{family}.md").read_text() for family in FAMILIES)
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        if (yaml.safe_load(path.read_text())["model"]["init_args"] or {}).get("task") is not None:
            assert listed.count(f"`configs/{path.name}`") == 1, path.name
    for path in sorted((ROOT / "configs" / "benchmarks").glob("*.yaml")):
        assert f"`configs/benchmarks/{path.name}`" in listed, path.name


def test_first_sentence_keeps_parentheses_whole():
    first = GUIDE["_first_sentence"]
    assert first("MAPPO on X (a. b: c). More.") == "MAPPO on X (a. b: c)"
    assert first("Short: then more words.") == "Short: then more words"


def pyproject_extras() -> set[str]:
    """The extras of pyproject.toml's ``[project.optional-dependencies]`` (read without tomllib: Python 3.10)."""
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    return set(re.findall(r"^([A-Za-z0-9_-]+) = \[", section, flags=re.M))


def test_every_extra_the_docs_name_exists():
    extras = pyproject_extras()
    assert {"dev", "pettingzoo", "meltingpot", "eval"} <= extras
    pages = [DOCS / "getting-started" / "install.md", *sorted((DOCS / "guide").rglob("*.md"))]
    named = {extra for page in pages for group in re.findall(r'\.\[([a-z0-9_,-]+)\]', page.read_text())
             for extra in group.split(",")}
    assert named, "no extra named in the docs"
    assert named <= extras, f"extras the docs name that pyproject.toml lacks: {sorted(named - extras)}"
    install = (DOCS / "getting-started" / "install.md").read_text()
    assert all(f".[{extra}]" in install for extra in extras), "an extra of pyproject.toml missing from install.md"


def test_every_family_page_includes_its_tables_and_is_in_the_toctree():
    tasks = DOCS / "guide" / "tasks"
    index = (tasks / "index.md").read_text()
    toctree = index.split("```{toctree}", 1)[1].split("```", 1)[0].split()
    for family in FAMILIES:
        page = (tasks / f"{family}.md").read_text()
        assert family in toctree, family
        wanted = [f"task_args_{family}.md"]
        wanted += [f"task_configs_{family}.md"] if GUIDE["configs_using"](family) else []
        wanted += [f"tasks_{family}.md"] if family in GUIDE["TASK_TABLES"] else []
        for name in wanted:
            assert f"```{{include}} ../../_generated/{name}" in page, (family, name)
