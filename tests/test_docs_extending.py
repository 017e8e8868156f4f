"""The worked examples of docs/concepts/extending.md (docs/examples/*.py) run and do what the page says they do: the
new learner's loss term is declared once, logged and acts on the weights; the new loop trains in the order it
claims; the new task has the specs it claims, ends episodes as it says and trains."""

from __future__ import annotations

import csv
import importlib
import inspect
import runpy
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
import yaml
from torchrl.data import Categorical
from torchrl.envs.utils import check_env_specs

from lit_marl.algorithms import MAPPO
from lit_marl.cli import main
from lit_marl.envs import Task
from lit_marl.errors import ConfigError
from lit_marl.utils import instantiate
from tests.helpers.runs import run_dirs
from tests.helpers.tiny import CONFIGS, ROOT, tiny_kwargs, tiny_task, tiny_trainer

EXAMPLES = ROOT / "docs" / "examples"
#: what keeps ``lit-marl fit --config configs/mappo_vmas_balance.yaml`` to one iteration of a few seconds
ONE_TINY_ITERATION = ["--model.init_args.num_envs", "2", "--model.init_args.frames_per_batch", "20",
                      "--model.init_args.max_frames", "20", "--model.init_args.minibatch_size", "10",
                      "--model.init_args.n_minibatch_iters", "1", "--model.init_args.evaluation_episodes", "1",
                      "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


@pytest.fixture
def example(monkeypatch):
    """Imports a docs/examples module by name, as a user would with docs/examples on the path."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    return importlib.import_module


def _rows(run: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(open(run / "metrics.csv")))


def _column(run: Path, name: str) -> list[float]:
    return [float(r[name]) for r in _rows(run) if r.get(name)]


def test_every_example_is_on_the_page_and_tested_here():
    page = (ROOT / "docs" / "concepts" / "extending.md").read_text()
    this = Path(__file__).read_text()
    for path in sorted(EXAMPLES.glob("*.py")):
        assert f"{{literalinclude}} ../examples/{path.name}" in page, path.name
        assert f'example("{path.stem}")' in this, path.name


@pytest.mark.parametrize("name", ["ppo_with_l2", "critic_first_loop", "rendezvous_task"])
def test_each_example_runs_as_a_script(name, tmp_path):
    """``python docs/examples/<name>.py`` trains for a few seconds and writes its run folder."""
    runpy.run_path(str(EXAMPLES / f"{name}.py"), run_name="__main__")
    assert list(Path("runs").glob("*/version_0/metrics.csv"))


# ------------------------------------------------------------------ a new learner and algorithm
def test_the_new_argument_is_declared_once_and_refused_by_name(example):
    module = example("ppo_with_l2")
    cls = module.RegularisedMAPPO
    parameters = inspect.signature(cls).parameters
    assert parameters["actor_l2"].default == 1e-4
    # the learner's, its loop's and the run's arguments, flat, in one constructor
    assert {"clip_epsilon", "minibatch_size", "frames_per_batch"} <= set(parameters)
    assert "actor_l2: weight of the L2 penalty" in cls.__doc__
    assert "centralised_critic" not in parameters  # fixed by the algorithm, as MAPPO's
    with pytest.raises(ConfigError, match="actor_l2"):
        cls(task=tiny_task(), actor_l2=-1.0, **tiny_kwargs())


def test_the_new_loss_term_is_logged_and_shrinks_the_policy(example, tmp_path):
    cls = example("ppo_with_l2").RegularisedMAPPO
    norms = {}
    for actor_l2 in (0.0, 10.0):
        pl.seed_everything(0)
        model = cls(task=tiny_task("balance"), actor_l2=actor_l2, **tiny_kwargs())
        initial = sum(p.square().sum() for p in model.learners["agents"].policy.parameters()).item()
        trainer = tiny_trainer(tmp_path / str(actor_l2), max_epochs=1)
        trainer.fit(model)
        norms[actor_l2] = sum(p.square().sum() for p in model.learners["agents"].policy.parameters()).item()
        logged = _column(Path(trainer.logger.log_dir), "train/agents/loss_actor_l2")
        assert len(logged) == 1
        assert logged[0] == pytest.approx(actor_l2 * initial, rel=0.05, abs=1e-12)  # near the initial weights
    # every step moves the penalised policy's weights towards zero
    assert norms[10.0] < initial
    assert norms[10.0] < norms[0.0]


def test_the_new_algorithm_runs_from_the_command_line(example):
    example("ppo_with_l2")  # docs/examples on the path, as PYTHONPATH=docs/examples gives the command
    main(["fit", "--config", str(CONFIGS / "mappo_vmas_balance.yaml"), "--model.class_path",
          "ppo_with_l2.RegularisedMAPPO", "--model.init_args.actor_l2", "0.001", *ONE_TINY_ITERATION])
    (run,) = run_dirs()
    config = yaml.safe_load((run / "config.yaml").read_text())["model"]
    assert config["class_path"] == "ppo_with_l2.RegularisedMAPPO"
    assert config["init_args"]["actor_l2"] == 0.001
    assert _column(run, "train/agents/loss_actor_l2")
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["lit_marl"]["algorithm"] == "regularised_mappo"


# ------------------------------------------------------------------ a new loop
class _Moved(pl.Callback):
    """After each optimizer step: whether the policies' and the critics' weights moved in it."""

    def __init__(self) -> None:
        self.steps: list[tuple[bool, bool]] = []

    def _weights(self, module) -> dict[str, torch.Tensor]:
        return {role: torch.cat([p.detach().flatten().clone() for p in getattr(module, part).parameters()])
                for role, part in (("actor", "policies"), ("critic", "critics"))}

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        self.before = self._weights(module)

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        after = self._weights(module)
        self.steps.append(tuple(not torch.equal(self.before[r], after[r]) for r in ("actor", "critic")))


def test_the_loop_trains_the_critics_alone_first(example, tmp_path):
    cls = example("critic_first_loop").CriticFirstMAPPO
    model = cls(task=tiny_task("balance"), critic_epochs=2, **tiny_kwargs(n_minibatch_iters=1))
    moved = _Moved()
    trainer = tiny_trainer(tmp_path, max_epochs=1, callbacks=[moved])
    trainer.fit(model)
    per_epoch = 40 // 20  # frames_per_batch // minibatch_size
    assert len(model.loop) == trainer.global_step == (2 + 1) * per_epoch
    assert model.loop.schedule == ["critic"] * 2 * per_epoch + ["all"] * per_epoch
    # the critics' passes move the critics only; PPO's passes move both
    assert moved.steps == [(False, True)] * 2 * per_epoch + [(True, True)] * per_epoch


def test_the_loop_without_critic_epochs_is_mappo(example, tmp_path):
    """``critic_epochs=0``: the same minibatches, the same steps, the same weights as MAPPO's own loop."""
    cls = example("critic_first_loop").CriticFirstMAPPO
    weights = []
    for algorithm, extra in ((MAPPO, {}), (cls, {"critic_epochs": 0})):
        pl.seed_everything(0)
        model = algorithm(task=tiny_task("balance"), **tiny_kwargs(), **extra)
        tiny_trainer(tmp_path / algorithm.__name__, max_epochs=1).fit(model)
        weights.append(model.learners.state_dict())
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_the_loop_sizes_are_arguments_of_the_algorithm(example):
    cls = example("critic_first_loop").CriticFirstMAPPO
    parameters = inspect.signature(cls).parameters
    assert parameters["critic_epochs"].default == 1
    assert {"n_minibatch_iters", "minibatch_size"} <= set(parameters)
    assert "critic_epochs: passes over each collected batch" in cls.__doc__
    with pytest.raises(ConfigError, match="critic_epochs"):
        cls(task=tiny_task(), critic_epochs=-1, **tiny_kwargs())


# ------------------------------------------------------------------ a new task
def test_the_task_has_the_specs_it_claims(example):
    task = example("rendezvous_task").RendezvousTask(n_agents=3, n_cells=6, max_steps=7)
    specs = task.specs
    assert specs.group_map == {"agents": ["agent_0", "agent_1", "agent_2"]}
    assert specs.observation_spec["agents", "observation"].shape == (3, 6)
    action = specs.group_action_spec("agents")
    assert isinstance(action, Categorical) and action.space.n == 3 and action.shape == (3,)
    assert specs.reward_spec["agents", "reward"].shape == (3, 1)
    assert not task.continuous_actions and task.max_steps == 7 and task.name == "rendezvous/ring"
    check_env_specs(task.make_env(num_envs=4, seed=0))
    # written back and rebuilt from its config, as a checkpoint and config.yaml do
    config = task.to_config()
    assert config["init_args"] == {"n_agents": 3, "n_cells": 6, "max_steps": 7}
    assert instantiate(config, Task, "task").to_config() == config
    with pytest.raises(ConfigError, match="n_agents"):
        type(task)(n_agents=1)


def test_the_task_ends_episodes_as_it_says(example):
    module = example("rendezvous_task")
    env = module.RendezvousEnv(num_envs=2, n_agents=3, n_cells=6, max_steps=4)
    env.set_seed(0)
    td = env.reset()
    env.position[0] = torch.tensor([2, 2, 3])  # env 0: one step from meeting
    env.position[1] = torch.tensor([0, 2, 4])  # env 1: never meets when everyone stays
    td.set(("agents", "action"), torch.tensor([[1, 1, 0], [1, 1, 1]]))  # env 0: agent 2 steps left onto cell 2
    nxt = env.step(td).get("next")
    assert nxt["terminated"].squeeze(-1).tolist() == [True, False]
    assert nxt["agents", "reward"][0].eq(0).all() and nxt["agents", "reward"][1].eq(-1).all()
    # the observation: agent 0's view of env 0 has all three agents on its own cell
    assert nxt["agents", "observation"][0, 0].tolist() == [1.0, 0, 0, 0, 0, 0]
    for _ in range(3):  # env 1 keeps staying: truncated at max_steps, not terminated
        td = env.step(td.set(("agents", "action"), torch.ones(2, 3, dtype=torch.long)))["next"].clone()
    assert td["truncated"][1].item() and not td["terminated"][1].item() and td["done"][1].item()
    # seeded: the same seed gives the same starts
    a, b = (module.RendezvousTask().make_env(num_envs=5, seed=3) for _ in range(2))
    assert torch.equal(a.reset()["agents", "observation"], b.reset()["agents", "observation"])


def test_the_task_trains_and_evaluates(example, tmp_path):
    task = example("rendezvous_task").RendezvousTask(n_agents=2, n_cells=5, max_steps=10)
    model = MAPPO(task=task, **tiny_kwargs())
    trainer = tiny_trainer(tmp_path, max_epochs=1)
    trainer.fit(model)
    run = Path(trainer.logger.log_dir)
    assert _column(run, "counters/frames") == [40.0, 40.0]  # the validation row and the iteration's
    (val_return,) = _column(run, "val/return")
    assert -10.0 <= val_return <= 0.0  # a reward in [-1, 0] per step, at most 10 steps
    assert _column(run, "train/agents/loss_objective")


def test_the_task_runs_from_the_command_line(example):
    example("rendezvous_task")
    main(["fit", "--config", str(CONFIGS / "mappo_vmas_balance.yaml"), "--model.init_args.task.class_path",
          "rendezvous_task.RendezvousTask", "--model.init_args.task.init_args.n_cells", "6", *ONE_TINY_ITERATION])
    (run,) = run_dirs()
    task = yaml.safe_load((run / "config.yaml").read_text())["model"]["init_args"]["task"]
    assert task == {"class_path": "rendezvous_task.RendezvousTask",
                    "init_args": {"n_agents": 3, "n_cells": 6, "max_steps": 100}}  # max_steps: the config's
    assert _column(run, "counters/frames")
