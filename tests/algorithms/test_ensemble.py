"""Per-group algorithms (``Ensemble``): each group really uses its own algorithm and networks, one run trains them
all, resume continues exactly, the CLI config runs, and bad input is refused by name."""

from __future__ import annotations

import csv
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
import yaml
from lightning.pytorch.callbacks import ModelCheckpoint

from lit_marl.algorithms import DDPG, IPPO, MADDPG, MAPPO, MASAC, SAC, Ensemble
from lit_marl.cli import main
from lit_marl.envs import VmasTask
from lit_marl.errors import ConfigError
from tests.helpers.tiny import CONFIGS, tiny_task, tiny_trainer

MLP = {"class_path": "lit_marl.models.Mlp", "init_args": {"num_cells": [32, 32]}}
SHARED = dict(frames_per_batch=40, num_envs=4, max_frames=10_000, evaluation_episodes=4)


def _tag() -> VmasTask:
    """VMAS simple_tag: groups adversary (3 agents) and agent (1), episodes of 10 steps."""
    return VmasTask("simple_tag", max_steps=10)


def _on_policy(**overrides) -> Ensemble:
    algorithms = {"adversary": {"class_path": "lit_marl.algorithms.MAPPO",
                                "init_args": {"actor_model": MLP, "critic_model": MLP, "lr": 1e-3}},
                  "agent": {"class_path": "lit_marl.algorithms.IPPO",
                            "init_args": {"actor_model": MLP, "critic_model": MLP, "lr": 3e-4}}}
    return Ensemble(_tag(), algorithms, **{**SHARED, "n_minibatch_iters": 2, "minibatch_size": 20, **overrides})


def _off_policy(**overrides) -> Ensemble:
    algorithms = {"adversary": {"class_path": "lit_marl.algorithms.MADDPG",
                                "init_args": {"actor_model": MLP, "critic_model": MLP, "memory_size": 400}},
                  "agent": {"class_path": "lit_marl.algorithms.MASAC",
                            "init_args": {"actor_model": MLP, "critic_model": MLP, "memory_size": 400}}}
    return Ensemble(_tag(), algorithms, **{**SHARED, "n_optimizer_steps": 2, "train_batch_size": 16, **overrides})


def test_each_group_uses_its_own_algorithm():
    model = _on_policy()
    assert model.algorithm_classes == {"adversary": MAPPO, "agent": IPPO}
    assert model.learners["adversary"].group == "adversary" and model.learners["agent"].group == "agent"
    assert model.learners["adversary"].centralised_critic and not model.learners["agent"].centralised_critic
    specs = model.task.specs
    obs_adversary = specs.observation_spec["adversary", "observation"].shape[-1]
    obs_agent = specs.observation_spec["agent", "observation"].shape[-1]
    # MAPPO's critic reads all three predators' observations, IPPO's the prey's own
    first_critic_layer = {g: next(c.parameters()) for g, c in model.critics.items()}
    assert first_critic_layer["adversary"].shape[-1] == 3 * obs_adversary
    assert first_critic_layer["agent"].shape[-1] == obs_agent
    # the networks are the groups' learners' own, registered once
    assert model.policies["adversary"] is model.learners["adversary"].policy
    assert all(key.startswith("learners.") for key in model.state_dict())
    # each group's optimizer parameter groups keep that group's learning rate
    lrs = {g["name"]: g["lr"] for g in model.configure_optimizers().param_groups}
    assert lrs == {"adversary/actor": 1e-3, "adversary/critic": 1e-3, "agent/actor": 3e-4, "agent/critic": 3e-4}


def test_off_policy_groups_train_with_their_own_buffers_and_targets(tmp_path):
    model = _off_policy()
    assert model.algorithm_classes == {"adversary": MADDPG, "agent": MASAC}
    assert isinstance(model.learners["adversary"], DDPG) and isinstance(model.learners["agent"], SAC)
    trainer = tiny_trainer(tmp_path, max_epochs=2)
    trainer.fit(model)
    assert model.frames == 80 and trainer.global_step == 4
    assert {g: len(b) for g, b in model.replay_buffers().items()} == {"adversary": 80, "agent": 80}
    logged = trainer.logged_metrics
    assert "train/adversary/loss_actor" in logged and "train/agent/loss_alpha" in logged
    assert "val/adversary/return" in logged and "val/agent/return" in logged


def _fit(tmp_path, name, build, max_epochs, ckpt_path=None):
    pl.seed_everything(0)
    model = build()
    checkpoint = ModelCheckpoint(dirpath=tmp_path / name, save_last=True, every_n_epochs=1,
                                 save_on_train_epoch_end=True)
    trainer = tiny_trainer(tmp_path / name, max_epochs=max_epochs, callbacks=[checkpoint], check_val_every_n_epoch=2)
    trainer.fit(model, ckpt_path=ckpt_path)
    return model, trainer


@pytest.mark.parametrize("build", [_on_policy, _off_policy], ids=["mappo+ippo", "maddpg+masac"])
def test_resume_continues_counters_and_weights_bitwise(tmp_path, build):
    straight, straight_trainer = _fit(tmp_path, "straight", build, max_epochs=4)
    _fit(tmp_path, "first", build, max_epochs=2)
    resumed, resumed_trainer = _fit(tmp_path, "resumed", build, max_epochs=4, ckpt_path=tmp_path / "first" / "last.ckpt")
    assert resumed.frames == straight.frames == 160 and resumed.iteration == straight.iteration == 4
    assert resumed_trainer.global_step == straight_trainer.global_step
    straight_state, resumed_state = straight.state_dict(), resumed.state_dict()
    assert straight_state.keys() == resumed_state.keys()
    for key in straight_state:
        assert torch.equal(straight_state[key], resumed_state[key]), key
    if build is _off_policy:  # (target networks are in the state_dict compared above)
        for group in ("adversary", "agent"):
            assert len(resumed.replay_buffers()[group]) == len(straight.replay_buffers()[group]) == 160


def test_checkpoint_names_each_groups_algorithm_and_refuses_another(tmp_path):
    _fit(tmp_path, "run", _on_policy, max_epochs=1)
    checkpoint = torch.load(tmp_path / "run" / "last.ckpt", weights_only=True)
    assert checkpoint["lit_marl"]["algorithm"] == "ensemble"
    assert checkpoint["lit_marl"]["ensemble"] == {"adversary": "mappo", "agent": "ippo"}
    loaded = Ensemble.load_from_checkpoint(tmp_path / "run" / "last.ckpt", weights_only=True)
    assert loaded.algorithm_classes == {"adversary": MAPPO, "agent": IPPO}
    swapped = Ensemble(_tag(), {"adversary": {"class_path": "IPPO", "init_args": {"actor_model": MLP, "critic_model": MLP}},
                                "agent": {"class_path": "MAPPO", "init_args": {"actor_model": MLP, "critic_model": MLP}}},
                       **SHARED, n_minibatch_iters=2, minibatch_size=20)
    with pytest.raises(ValueError, match=r"^checkpoint: its groups were trained by .*allowed: the same algorithm"):
        swapped.on_load_checkpoint(checkpoint)


def test_the_config_runs_one_iteration_through_the_cli():
    pytest.importorskip("mpe2")
    main(["fit", "--config", str(CONFIGS / "ensemble_mpe_simple_tag.yaml"), "--trainer.enable_progress_bar", "false",
          "--trainer.enable_model_summary", "false", "--trainer.check_val_every_n_epoch", "1",
          "--model.init_args.frames_per_batch", "200", "--model.init_args.num_envs", "2",
          "--model.init_args.minibatch_size", "100", "--model.init_args.n_minibatch_iters", "1",
          "--model.init_args.evaluation_episodes", "2", "--model.init_args.max_frames", "200"])
    (run,) = [p.parent for p in Path("runs").glob("*/version_*/config.yaml")]
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    for name in ("val/adversary/return", "val/agent/return", "train/adversary/loss_objective",
                 "train/agent/loss_objective", "train/agent/actor/grad_norm"):
        assert any(r.get(name) for r in rows), name
    meta = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["lit_marl"]
    assert meta["frames"] == 200 and meta["ensemble"] == {"adversary": "mappo", "agent": "ippo"}
    saved = yaml.safe_load((run / "config.yaml").read_text())["model"]
    assert saved["class_path"] == "lit_marl.algorithms.Ensemble"
    assert saved["init_args"]["algorithms"]["agent"]["init_args"]["entropy_coef"] == 0.01


# ---------------------------------------------------------------------------------------------- bad input
def _no_env(monkeypatch):
    monkeypatch.setattr(VmasTask, "_make_env", lambda *a, **k: pytest.fail("an environment was built"))


def _algorithms(adversary="lit_marl.algorithms.MAPPO", agent="lit_marl.algorithms.IPPO", **agent_args):
    return {"adversary": {"class_path": adversary}, "agent": {"class_path": agent, "init_args": agent_args}}


@pytest.mark.parametrize("algorithms, kwargs, expected", [
    (_algorithms(agent="lit_marl.algorithms.MADDPG"), {},
     r"^algorithms: adversary: MAPPO \(on-policy\), agent: MADDPG \(off-policy\); .* all on-policy or all off-policy"),
    (_algorithms(agent="torch.nn.Linear"), {},
     r"^algorithms.agent.class_path: 'torch.nn.Linear' is not a lit-marl algorithm; allowed: .*MAPPO"),
    (_algorithms(agent="lit_marl.algorithms.PPO"), {}, r"^algorithms.agent.class_path: 'lit_marl.algorithms.PPO' is not"),
    (_algorithms(agent="lit_marl.algorithms.Ensemble"), {}, r"^algorithms.agent.class_path: .*Ensemble' is not"),
    ({"agent": "MAPPO"}, {}, r"^algorithms.agent: expected \{class_path"),
    ({}, {}, r"^algorithms: expected one entry per agent group"),
    (_algorithms(frames_per_batch=400), {},
     r"^algorithms.agent.init_args.frames_per_batch: set once for all groups on the ensemble"),
    (_algorithms(minibatch_size=10), {}, r"^algorithms.agent.init_args.minibatch_size: set once for all groups"),
    (_algorithms(clip_eps=0.1), {}, r"^algorithms.agent.init_args.clip_eps: IPPO has no such argument; allowed: .*"
                                    r"clip_epsilon"),
    (_algorithms(), {"n_optimizer_steps": 5},
     r"^n_optimizer_steps: 5 is an off-policy setting and the ensemble's algorithms are on-policy"),
])
def test_bad_input_is_refused_by_name_before_any_env(monkeypatch, algorithms, kwargs, expected):
    _no_env(monkeypatch)
    with pytest.raises(ConfigError, match=expected):
        Ensemble(_tag(), algorithms, **SHARED, **kwargs)


def test_unknown_and_missing_groups_are_refused_by_name():
    with pytest.raises(ConfigError, match=r"^algorithms.prey: the task vmas/simple_tag has no agent group 'prey'; "
                                          r"allowed: adversary, agent"):
        Ensemble(_tag(), {**_algorithms(), "prey": {"class_path": "IPPO"}}, **SHARED, minibatch_size=20)
    with pytest.raises(ConfigError, match=r"^algorithms: no algorithm for group\(s\) 'agent' .*allowed: one entry for "
                                          r"each group: adversary, agent"):
        Ensemble(_tag(), {"adversary": {"class_path": "MAPPO"}}, **SHARED, minibatch_size=20)


def test_a_groups_own_bad_argument_is_named_with_its_group():
    with pytest.raises(ConfigError, match=r"^algorithms.agent.init_args.lr: must be a positive"):
        Ensemble(_tag(), _algorithms(lr=-1.0), **SHARED, minibatch_size=20)
    discrete = VmasTask("simple_tag", max_steps=10, continuous_actions=False)
    with pytest.raises(ConfigError, match=r"^algorithms.agent \(MADDPG\): task.continuous_actions: MADDPG needs"):
        Ensemble(discrete, _algorithms(adversary="MASAC", agent="MADDPG"), **SHARED, train_batch_size=16)


def test_cli_refuses_a_mixed_ensemble_before_anything_runs(tmp_path, capsys):
    config = yaml.safe_load((CONFIGS / "ensemble_mpe_simple_tag.yaml").read_text())
    config["model"]["init_args"]["algorithms"]["agent"] = {"class_path": "lit_marl.algorithms.MASAC"}
    (tmp_path / "mixed.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(tmp_path / "mixed.yaml")])
    assert exit_info.value.code == 2
    assert "algorithms: adversary: MAPPO (on-policy), agent: MASAC (off-policy)" in capsys.readouterr().err
    assert not Path("runs").exists() or not list(Path("runs").glob("*/version_*"))


@pytest.mark.parametrize("sequential", ["HAPPO", "HATRPO"])
def test_a_sequential_agents_algorithm_beside_another_loop_is_refused_by_name(sequential):
    """Issue 34: HAPPO (or HATRPO) beside MAPPO in an ensemble stayed idle (its loss empty, its weights unmoved)
    under the ensemble's loop. Issue 35: each learner names its loop, and an ensemble refuses a mix of loops."""
    from lit_marl.errors import ConfigError

    algorithms = {"agent_0": {"class_path": f"lit_marl.algorithms.{sequential}"},
                  "agent_1": {"class_path": "lit_marl.algorithms.MAPPO"}}
    with pytest.raises(ConfigError, match=f"algorithms: agent_0: {sequential} \\(agents one after another.*, "
                                          f"on-policy\\), agent_1: MAPPO \\(on-policy\\); .*one loop kind"):
        Ensemble(tiny_task("balance", scenario_kwargs={"n_agents": 2}, agent_groups="one_group_per_agent"),
                 algorithms)


@pytest.mark.parametrize("sequential", ["HAPPO", "HATRPO"])
def test_happo_in_every_group_trains_every_agent_in_one_order_across_the_groups(sequential, tmp_path):
    """Issue 35: the sequential-agents loop is the run's, not a learner's state: an ensemble whose groups all take
    HAPPO (each with its own arguments) trains every group's agents one after another, in one order per iteration
    drawn over all of them; every group's actor and critic move (who moves in which turn: tests/algorithms/
    test_happo.py)."""
    algorithms = {"agent_0": {"class_path": f"lit_marl.algorithms.{sequential}", "init_args": {"lr": 1e-3}},
                  "agent_1": {"class_path": f"lit_marl.algorithms.{sequential}", "init_args": {"lr": 3e-3}}}
    model = Ensemble(tiny_task("balance", scenario_kwargs={"n_agents": 2}, agent_groups="one_group_per_agent"),
                     algorithms, frames_per_batch=40, num_envs=4, n_minibatch_iters=2, minibatch_size=20,
                     evaluation_episodes=2)
    before = {g: [p.detach().clone() for p in learner.parameters()] for g, learner in model.learners.items()}
    tiny_trainer(tmp_path, max_epochs=1, check_val_every_n_epoch=100).fit(model)
    (order,) = model.loop.agent_orders
    assert sorted(order) == ["agent_0/agent_0", "agent_1/agent_1"]
    # two agents' turns (HAPPO: 2 epochs of 2 minibatches each; HATRPO: one step on the whole batch), then the critics
    assert len(model.loop) == (2 * 2 * 2 if sequential == "HAPPO" else 2) + 2 * 2
    for group, learner in model.learners.items():
        moved = {role: all(not torch.equal(before[group][i], p) for i, p in _indexed(learner, params))
                 for role, params in learner.param_groups().items()}
        assert moved["critic"], group  # last, on the critics' minibatches
        if sequential == "HAPPO":  # HATRPO's line search may reject a step: its turn is checked in test_hatrpo.py
            assert all(moved.values()), (group, moved)


def _indexed(learner, params):
    """``(index in learner.parameters(), parameter)`` of each of ``params``."""
    index = {id(p): i for i, p in enumerate(learner.parameters())}
    return [(index[id(p)], p) for p in params]


def test_hasac_is_refused_in_an_ensemble_by_name():
    """Issue 35 item 4: HASAC's critics value the joint action of every agent; a learner per group would see its own
    group's actions only, so HASAC in every group is refused by name (once the groups are known, before any step), and
    beside MASAC (agents together) the mix of loops is."""
    from lit_marl.errors import ConfigError

    task = tiny_task("balance", scenario_kwargs={"n_agents": 2}, agent_groups="one_group_per_agent")
    with pytest.raises(ConfigError, match="agent_0: HASAC \\(agents one after another, off-policy\\), agent_1: MASAC "
                                          "\\(off-policy\\); .*one loop kind"):
        Ensemble(task, {"agent_0": {"class_path": "lit_marl.algorithms.HASAC"},
                        "agent_1": {"class_path": "lit_marl.algorithms.MASAC"}})
    with pytest.raises(ConfigError, match="task.agent_groups: 2 groups \\(agent_0, agent_1\\); HASAC's critics value "
                                          "the joint action of every agent"):
        Ensemble(task, {g: {"class_path": "lit_marl.algorithms.HASAC"} for g in ("agent_0", "agent_1")},
                 frames_per_batch=40, num_envs=4, n_optimizer_steps=3, train_batch_size=16)
