"""The Algorithms pages' generated tables (``scripts/docs_algorithms.py``) against the code's behaviour: every
algorithm has a page that includes its tables, the cells agree with the capability flags the registry reads, what a
table calls refused is refused on another task too, and what it calls usable trains an iteration."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import lightning.pytorch as pl
import pytest

from lit_marl.algorithms import IQL, MADDPG, MAPPO, QMIX, Ensemble
from lit_marl.algorithms.loops import loop_kind
from lit_marl.algorithms.registry import algorithm_names, algorithms_by_name
from lit_marl.envs import VmasTask
from lit_marl.errors import ConfigError
from lit_marl.models import Gru, Mlp

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "docs" / "algorithms"


def _load_generator():
    spec = importlib.util.spec_from_file_location("docs_algorithms", ROOT / "scripts" / "docs_algorithms.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


gen = _load_generator()
LEARNING = [cls for cls in gen.ordered_algorithms() if cls.learner_class is not None]


def _cells(cls) -> dict:
    return gen.capabilities(cls.algorithm_name)


# ---------------------------------------------------------------------------------------------------- pages
def test_every_algorithm_has_a_page_that_includes_its_tables(tmp_path):
    assert sorted(gen.PAGES) == sorted(algorithms_by_name()), "a new algorithm needs a page (and a place in PAGES)"
    written = {path.name for path in gen.write_all(tmp_path)}
    index = (PAGES / "index.md").read_text()
    for name in gen.PAGES:
        page = (PAGES / f"{name}.md").read_text()
        for table in ("capabilities", "arguments", "configs"):
            file = f"algorithm_{name}_{table}.md"
            assert file in written
            assert f"```{{include}} ../_generated/{file}" in page, f"{name}.md does not include {file}"
        assert re.search(rf"^{name}$", index, re.M), f"index.md's toctree does not list {name}"
        assert f"{{py:class}}`lit_marl.algorithms.{algorithms_by_name()[name].__name__}`" in (
            tmp_path / f"algorithm_{name}_arguments.md").read_text()
    for file in ("algorithms_summary.md", "algorithms_run_arguments.md"):
        assert file in written and f"../_generated/{file}" in index


def test_the_summary_has_a_row_per_algorithm(tmp_path):
    gen.write_all(tmp_path)
    rows = [line for line in (tmp_path / "algorithms_summary.md").read_text().splitlines()[2:] if line]
    assert len(rows) == len(gen.PAGES) == 13
    assert [re.search(r"`(\w+) <", row).group(1) for row in rows] == [c.__name__ for c in gen.ordered_algorithms()]


def test_pages_and_tables_carry_no_issue_numbers(tmp_path):
    """The algorithm pages are organised by what a reader wants, not by the project's history."""
    gen.write_all(tmp_path)
    texts = {p.name: p.read_text() for p in [*PAGES.glob("*.md"), *tmp_path.glob("algorithm*.md")]}
    for name, text in texts.items():
        assert not re.search(r"\bissue \d+", text, re.I), name


def test_every_argument_in_the_tables_is_documented():
    for cls in gen.ordered_algorithms():
        for klass, rows in gen.argument_sections(cls):
            for name, _, doc in rows:
                assert doc, f"{cls.__name__}: {name} (declared by {klass.__name__}) has no docstring entry"


# ---------------------------------------------------------------------------------------------------- cells and flags
@pytest.mark.parametrize("cls", LEARNING, ids=lambda c: c.__name__)
def test_cells_agree_with_the_capability_flags(cls):
    cells = _cells(cls)
    assert cells["continuous"].supported == cls.supports_continuous_actions
    assert cells["discrete"].supported == cls.supports_discrete_actions
    assert cells["recurrent_policy"].supported == cls.supports_recurrent
    assert (cls.__name__ in algorithm_names(supports_recurrent=True)) == cls.supports_recurrent
    assert cells["loop"].short.startswith("on-policy" if cls.on_policy else "off-policy")
    # DDP refuses exactly the algorithms whose agents update in turn (what lit_marl.distributed.shares reads)
    assert cells["ddp"].supported == (not cls.learner_class.sequential_agents)
    for key, cell in cells.items():
        assert cell.supported or cell.text == "**no**", (key, cell)


@pytest.mark.parametrize("cls", LEARNING, ids=lambda c: c.__name__)
def test_the_critic_cell_describes_the_critic_the_learner_builds(cls):
    model = gen.build(cls)
    learner = next(iter(model.learners.values()))
    short = _cells(cls)["critic"].short
    if short.startswith("none"):
        assert not cls.learner_class.has_critic and learner.critic is None
    elif short == "per agent":
        assert learner.centralised_critic is False
    else:
        assert short == "centralised"
        if hasattr(learner, "centralised_critic"):
            assert learner.centralised_critic is True
        else:  # HASAC: one Q-function of the group's joint action
            q = learner.objective.qvalue_network
            assert (learner.group, "action") in q.in_keys and (learner.group, "observation") in q.in_keys


# ---------------------------------------------------------------------------------------------------- behaviour
def _other_task(cls, groups: int = 1) -> VmasTask:
    """A task the generator did not probe with: VMAS navigation, 2 agents."""
    grouping = {"agent_groups": "one_group_per_agent"} if groups > 1 else {}
    return VmasTask("navigation", max_steps=10, continuous_actions=cls.supports_continuous_actions, n_agents=2,
                    **grouping)


#: how each refusable row is asked for again, on another task
ASK = {
    "shared_policy": lambda cls: {"share_policy_params": True},
    "own_policy": lambda cls: {"share_policy_params": False},
    "recurrent_policy": lambda cls: {"actor_model": Gru(hidden_size=8)},
    "recurrent_critic": lambda cls: {"critic_model": Gru(hidden_size=8)},
    "agent_ids_policy": lambda cls: {"actor_model": Mlp([8], agent_id=True)},
    "agent_ids_critic": lambda cls: {"critic_model": Mlp([8], agent_id=True)},
    "compile": lambda cls: {"compile": True},
}


def _build_on(task, cls, **arguments):
    models = {"actor_model": Mlp([8]), **({"critic_model": Mlp([8])} if gen.has_critic_model(cls) else {})}
    memory = {} if cls.on_policy else {"memory_size": 100}
    return cls(task, **gen.RUN, **gen.loop_sizes(cls), **memory, **{**models, **arguments})


@pytest.mark.parametrize("cls", LEARNING, ids=lambda c: c.__name__)
def test_what_a_table_refuses_is_refused_on_another_task_too(cls):
    cells = _cells(cls)
    for key, ask in ASK.items():
        if cells[key].supported or cells[key].text == "no critic":
            continue
        with pytest.raises(ConfigError):
            _build_on(_other_task(cls), cls, **ask(cls))
    if not cells["groups"].supported:
        with pytest.raises(ConfigError, match="agent_groups"):
            _build_on(_other_task(cls, groups=2), cls)
    action = "discrete" if cls.supports_continuous_actions else "continuous"
    if not cells[action].supported:
        task = VmasTask("navigation", max_steps=10, n_agents=2, continuous_actions=action == "continuous")
        with pytest.raises(ConfigError, match="continuous_actions"):
            _build_on(task, cls)


@pytest.mark.parametrize("cls", LEARNING, ids=lambda c: c.__name__)
def test_what_a_table_calls_usable_trains_an_iteration(cls, tmp_path):
    """Every model option the table says yes to, all at once, through one iteration of a Trainer on another task."""
    cells = _cells(cls)
    ids = {"agent_id": True} if cells["agent_ids_policy"].supported else {}
    actor = Gru(hidden_size=8, **ids) if cells["recurrent_policy"].supported else Mlp([8], **ids)
    arguments = {"actor_model": actor}
    if gen.has_critic_model(cls):
        critic_ids = {"agent_id": True} if cells["agent_ids_critic"].supported else {}
        arguments["critic_model"] = (Gru(hidden_size=8, **critic_ids) if cells["recurrent_critic"].supported
                                     else Mlp([8], **critic_ids))
    if cells["shared_policy"].supported and cells["own_policy"].supported:
        arguments["share_policy_params"] = False  # the non-default one
    model = _build_on(_other_task(cls), cls, **arguments)
    pl.Trainer(max_epochs=-1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
               enable_model_summary=False, limit_val_batches=0, default_root_dir=tmp_path).fit(model)
    assert model.frames == gen.RUN["max_frames"]


def test_ensemble_partners_are_the_algorithms_of_the_same_loop():
    for cls in LEARNING:
        cell = _cells(cls)["ensemble"]
        if not cell.supported:
            continue
        partners = set(re.search(r"beside (.*) \(", cell.text).group(1).split(", "))
        same_loop = {c.__name__ for c in LEARNING if loop_kind(c.learner_class) == loop_kind(cls.learner_class)
                     and _cells(c)["ensemble"].supported}
        assert partners == same_loop, cls.__name__


def _entry(cls) -> dict:
    args = {"actor_model": {"class_path": "lit_marl.models.Mlp", "init_args": {"num_cells": [8]}}}
    return {"class_path": f"lit_marl.algorithms.{cls.__name__}",
            "init_args": {**args, **({} if cls.on_policy else {"memory_size": 100})}}


def test_an_ensemble_takes_partners_and_refuses_algorithms_of_another_loop():
    discrete = VmasTask("navigation", max_steps=10, continuous_actions=False, n_agents=2,
                        agent_groups="one_group_per_agent")
    model = Ensemble(discrete, {"agent_0": _entry(QMIX), "agent_1": _entry(IQL)}, **gen.RUN, train_batch_size=10,
                     n_optimizer_steps=1)
    assert model.algorithm_classes == {"agent_0": QMIX, "agent_1": IQL}
    assert "MADDPG" not in _cells(MAPPO)["ensemble"].text
    continuous = VmasTask("navigation", max_steps=10, n_agents=2, agent_groups="one_group_per_agent")
    with pytest.raises(ConfigError, match="one loop kind|share one loop"):
        Ensemble(continuous, {"agent_0": _entry(MAPPO), "agent_1": _entry(MADDPG)}, **gen.RUN)
