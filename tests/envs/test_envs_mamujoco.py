"""MaMuJoCoTask: grouped continuous specs and the robot's global state, seeded batches, time limits truncate and falls
terminate, bad input is refused by name before anything is built, videos render (or are refused), MADDPG trains."""

from __future__ import annotations

import csv
import importlib
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest
import torch

from lit_marl.algorithms import MADDPG, MAPPO
from lit_marl.envs import MaMuJoCoTask, Task
from lit_marl.envs import mamujoco
from lit_marl.errors import ConfigError
from lit_marl.callbacks import EvaluationReport
from lit_marl.models import Mlp
from lit_marl.utils import instantiate
from tests.helpers.missing import hide_package
from tests.helpers.tiny import tiny_kwargs, tiny_trainer

# gymnasium-robotics and mujoco are in the dev extra: where one is missing these tests must fail, not skip
import gymnasium_robotics  # noqa: E402,F401
import mujoco  # noqa: E402,F401


def test_halfcheetah_2x3_has_one_group_of_two_agents_with_continuous_actions_and_the_robots_state():
    task = MaMuJoCoTask("HalfCheetah", "2x3", agent_obsk=1)
    assert task.name == "mamujoco/HalfCheetah-2x3" and task.max_steps == 1000 and task.continuous_actions
    assert task.group_map == {"agents": ["agent_0", "agent_1"]}
    specs = task.specs
    # each agent: its 3 joints' qpos and qvel, the neighbouring thigh's qpos, root z/angle qpos and 3 root qvel
    assert specs.observation_spec["agents", "observation"].shape == (2, 12)
    action = specs.group_action_spec("agents")
    assert action.shape == (2, 3) and action.dtype == torch.float32
    assert torch.equal(action.space.low, -torch.ones(2, 3)) and torch.equal(action.space.high, torch.ones(2, 3))
    assert specs.reward_spec["agents", "reward"].shape == (2, 1)
    assert task.has_state and task.state_key == "state" and specs.state_spec.shape == (17,)  # HalfCheetah-v5's obs
    assert set(specs.done_spec.keys()) == {"done", "terminated", "truncated"}
    # agent_obsk 0: each agent sees only its own joints (and the root)
    assert MaMuJoCoTask("HalfCheetah", "2x3", agent_obsk=0).specs.observation_spec["agents", "observation"].shape \
        == (2, 11)


def test_agents_of_different_sizes_need_their_own_groups():
    # Hopper 3x1: the thigh agent sees both neighbours (9 features), the leg and foot agents 8
    with pytest.raises(ConfigError, match=r"task.agent_groups: group 'agents' of mamujoco/Hopper-3x1 mixes agents of "
                                          r"different observation/action sizes \(agent_0: 8/1, agent_1: 9/1, agent_2: "
                                          r"8/1\); allowed: 'one_group_per_agent'"):
        MaMuJoCoTask("Hopper", "3x1")
    task = MaMuJoCoTask("Hopper", "3x1", agent_groups="one_group_per_agent")
    assert task.group_map == {f"agent_{i}": [f"agent_{i}"] for i in range(3)}
    specs = task.specs
    assert [specs.observation_spec[g, "observation"].shape for g in task.group_map] == [(1, 8), (1, 9), (1, 8)]
    assert specs.state_spec.shape == (11,)
    ends = MaMuJoCoTask("Hopper", "3x1", agent_groups={"ends": ["agent_0", "agent_2"], "middle": ["agent_1"]})
    assert ends.specs.observation_spec["ends", "observation"].shape == (2, 8)
    with pytest.raises(ConfigError, match=r"task.agent_groups: group 'mixed' .* allowed: a mapping that groups only"):
        MaMuJoCoTask("Hopper", "3x1", agent_groups={"mixed": ["agent_0", "agent_1"], "foot": ["agent_2"]})


def test_a_rollout_shares_the_reward_and_carries_the_state():
    env = MaMuJoCoTask("HalfCheetah", "2x3").make_env(num_envs=2, seed=0)
    td = env.rollout(6)
    assert td.batch_size == (2, 6)
    reward = td["next", "agents", "reward"]
    assert reward.shape == (2, 6, 2, 1) and torch.equal(reward[..., 0, :], reward[..., 1, :])  # one team reward
    assert td["next", "state"].shape == (2, 6, 17) and not torch.equal(td["state"], td["next", "state"])
    # the state is the robot's whole observation: each agent's observation is a part of it
    factorization = env.base_env._envs[0].simulator.observation_factorization
    for i, agent in enumerate(("agent_0", "agent_1")):
        index = torch.as_tensor(factorization[agent])
        assert torch.equal(td["next", "agents", "observation"][:, :, i], td["next", "state"][:, :, index])
    assert not td["next", "done"].any()
    assert not Path("MUJOCO_LOG.TXT").exists()  # MuJoCo's warnings go to Python's warnings, not into a file here


def test_seeds_fix_the_first_observations():
    task = MaMuJoCoTask("HalfCheetah", "2x3")
    first = task.make_env(num_envs=3, seed=7).reset()
    again = task.make_env(num_envs=3, seed=7).reset()
    other = task.make_env(num_envs=3, seed=8).reset()
    assert torch.equal(first["agents", "observation"], again["agents", "observation"])
    assert torch.equal(first["state"], again["state"])
    assert not torch.equal(first["agents", "observation"], other["agents", "observation"])
    assert not torch.equal(first["state"][0], first["state"][1])  # each env of a batch gets its own seed


def test_the_step_limit_truncates_and_a_fall_terminates():
    td = MaMuJoCoTask("HalfCheetah", "2x3", max_steps=5).make_env(num_envs=2, seed=0).rollout(
        8, break_when_any_done=False)
    truncated, terminated = td["next", "truncated"].squeeze(-1), td["next", "terminated"].squeeze(-1)
    assert truncated[:, 4].all() and not truncated[:, :4].any() and not terminated.any()
    assert torch.equal(td["next", "done"], td["next", "truncated"])
    # Hopper falls (Gymnasium's unhealthy state) long before 1000 steps when it kicks at full strength
    task = MaMuJoCoTask("Hopper", "3x1", agent_groups="one_group_per_agent")
    env = task.make_env(num_envs=1, seed=0)
    td = env.reset()
    for step in range(200):
        for i, group in enumerate(task.group_map):
            td[group, "action"] = torch.full((1, 1, 1), 1.0 if i % 2 == 0 else -1.0)
        td = env.step(td)
        if td["next", "done"].any():
            break
        td = td["next"]
    assert step < 199 and td["next", "terminated"].all() and not td["next", "truncated"].any()


def test_worker_processes_step_the_same_episodes():
    serial = MaMuJoCoTask("HalfCheetah", "2x3").make_env(num_envs=2, seed=5).rollout(4, break_when_any_done=False)
    env = MaMuJoCoTask("HalfCheetah", "2x3", num_workers=2).make_env(num_envs=2, seed=5)
    try:
        td = env.reset()
        for t in range(4):
            assert torch.allclose(td["agents", "observation"], serial[:, t]["agents", "observation"]), t
            td["agents", "action"] = serial[:, t]["agents", "action"]
            td = env.step_and_maybe_reset(td)[1]
    finally:
        env.close()


def test_config_round_trip_rebuilds_the_same_task():
    task = MaMuJoCoTask("Ant", "4x2", agent_obsk=0, max_steps=50, env_kwargs={"ctrl_cost_weight": 0.1})
    config = task.to_config()
    assert config["class_path"] == "lit_marl.envs.mamujoco.MaMuJoCoTask"
    rebuilt = instantiate(config, Task, "task")
    assert rebuilt.to_config() == config and rebuilt.group_map == {"agents": [f"agent_{i}" for i in range(4)]}


@pytest.mark.parametrize(("build", "message"), [
    (lambda: MaMuJoCoTask("HalfCheeta"), r"task.scenario: unknown MaMuJoCo scenario 'HalfCheeta'; did you mean "
                                         r"'HalfCheetah'\? allowed: HalfCheetah, Ant, Hopper, Walker2d, Humanoid, "
                                         r"HumanoidStandup, Swimmer, Reacher, Pusher$"),
    (lambda: MaMuJoCoTask("HalfCheetah", "2x4"), r"task.agent_conf: '2x4' is not a split of HalfCheetah's joints "
                                                 r"MaMuJoCo knows; allowed: '2x3', '6x1'$"),
    (lambda: MaMuJoCoTask("Ant", "2x3"), r"task.agent_conf: '2x3' is not a split of Ant's joints MaMuJoCo knows; "
                                         r"allowed: '2x4', '2x4d', '4x2'$"),
    (lambda: MaMuJoCoTask(agent_obsk=-1), r"task.agent_obsk: must be an integer >= 0 \(joints away an agent sees\), "
                                          r"got -1$"),
    (lambda: MaMuJoCoTask(agent_obsk=None), r"task.agent_obsk: must be an integer, got None$"),
    (lambda: MaMuJoCoTask(max_steps=0), r"task.max_steps: must be a positive integer, got 0$"),
    (lambda: MaMuJoCoTask(env_kwargs={"max_episode_steps": 5}),
     r"task.env_kwargs: 'max_episode_steps' is set by lit-marl \(task.max_steps\); allowed: the Gymnasium MuJoCo "
     r"env's other arguments$"),
    (lambda: MaMuJoCoTask(agent_groups="teams"), r"task.agent_groups: unknown grouping 'teams'; allowed: null, "
                                                 r"'all_in_one_group', 'one_group_per_agent' or a mapping"),
    (lambda: MaMuJoCoTask(num_workers=0), r"task.num_workers: must be a positive integer, got 0$"),
    (lambda: MaMuJoCoTask(env_kwargs={"no_such_argument": 1}).specs,
     r"task.env_kwargs: mamujoco/HalfCheetah-2x3 failed to build with env_kwargs=\{'no_such_argument': 1\}: "
     r"TypeError: .*no_such_argument"),
])
def test_bad_settings_are_refused_by_name_with_what_is_allowed(build, message):
    with pytest.raises(ConfigError, match=message):
        build()


def test_bad_settings_are_refused_before_anything_is_built(monkeypatch):
    built = []
    monkeypatch.setattr(mamujoco, "_make_simulator", lambda *args: built.append(args))
    for bad in (dict(scenario="Cheetah"), dict(agent_conf="3x2"), dict(agent_obsk=-2)):
        with pytest.raises(ConfigError):
            MaMuJoCoTask(**bad)
    assert built == []


@pytest.mark.parametrize("module", ["gymnasium_robotics", "mujoco"])
def test_a_missing_package_names_its_pip_command(monkeypatch, module):
    hide_package(monkeypatch, module)
    package = module.replace("_", "-")
    with pytest.raises(ConfigError, match=rf"^task: needs the {package} package, which cannot be imported "
                                          rf"\(ModuleNotFoundError: No module named '{module}'\); install it with pip "
                                          rf"install 'lit-marl\[mamujoco\]'$"):
        MaMuJoCoTask("HalfCheetah", "2x3")


def test_a_package_missing_its_own_dependency_is_named_without_a_traceback(monkeypatch):
    """Issue 34: gymnasium-robotics installed without mujoco raised Gymnasium's DependencyNotInstalled at import (not
    an ImportError): three tracebacks through jsonargparse instead of the pip command."""
    from gymnasium.error import DependencyNotInstalled

    from lit_marl.envs.agent_tuple import import_simulator

    def broken(name, *args, **kwargs):
        raise DependencyNotInstalled('MuJoCo is not installed, run `pip install "gymnasium[mujoco]"`')

    monkeypatch.setattr(importlib, "import_module", broken)
    with pytest.raises(ConfigError, match=r"^task: needs the gymnasium-robotics package, which cannot be imported "
                                          r"\(DependencyNotInstalled: MuJoCo is not installed, .*\); install it with "
                                          r"pip install 'lit-marl\[mamujoco\]'$"):
        import_simulator("gymnasium_robotics", "gymnasium-robotics", "mamujoco")


# ---------------------------------------------------------------------------------------------- rendering
def test_frames_render_headless_where_mujoco_can():
    task = MaMuJoCoTask("HalfCheetah", "2x3")
    if task.renderer_problem() is not None:  # this machine has no EGL/OSMesa: the refusal is tested below
        pytest.skip(task.renderer_problem())
    env = task.make_env(num_envs=2, seed=0)
    env.reset()
    frame = task.render(env, 1)
    assert isinstance(frame, np.ndarray) and frame.shape == (480, 480, 3) and frame.dtype == np.uint8
    assert frame.std() > 0  # a picture, not a blank
    # lit-marl test's videos: one frame per step of the evaluated episode
    av = pytest.importorskip("av")
    module = MAPPO(MaMuJoCoTask("HalfCheetah", "2x3", max_steps=4), **tiny_kwargs(test_episodes=1))
    report = EvaluationReport(videos=1, output_dir="eval")
    pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
               callbacks=[report]).test(module, verbose=False)
    (record,) = report.result["per_episode"]
    with av.open(str(report.folder / record["video"])) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(frames) == record["length"] == 4 and frames[0].shape == (480, 480, 3)


def test_videos_are_refused_by_name_where_no_renderer_works(monkeypatch):
    monkeypatch.setattr(MaMuJoCoTask, "renderer_problem", lambda self: "MuJoCo's headless rendering failed")
    module = MAPPO(MaMuJoCoTask("HalfCheetah", "2x3", max_steps=5), **tiny_kwargs(test_episodes=1))
    report = EvaluationReport(videos=1, output_dir="eval")
    trainer = pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[report])
    with pytest.raises(ConfigError, match=r"^evaluation.videos: 1 videos asked for, but MaMuJoCoTask "
                                          r"\(mamujoco/HalfCheetah-2x3\) cannot render frames on this machine: "
                                          r"MuJoCo's headless rendering failed; allowed: evaluation.videos=0$"):
        trainer.test(module, verbose=False)
    assert not Path("eval").exists() or not any(Path("eval").iterdir())


# ---------------------------------------------------------------------------------------------- training
def test_maddpg_trains_one_iteration_on_halfcheetah(tmp_path):
    pl.seed_everything(0)
    model = MADDPG(MaMuJoCoTask("HalfCheetah", "2x3", max_steps=10), actor_model=Mlp([32]), critic_model=Mlp([32]),
                   frames_per_batch=40, num_envs=4, n_optimizer_steps=4, train_batch_size=16, memory_size=1000,
                   max_frames=40, evaluation_episodes=2)
    before = [p.detach().clone() for p in model.parameters()]
    trainer = tiny_trainer(tmp_path, max_epochs=1)
    trainer.fit(model)
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters()))
    assert len(model.replay_buffers()["agents"]) == 40
    (metrics,) = tmp_path.rglob("metrics.csv")
    rows = list(csv.DictReader(open(metrics)))
    assert max(float(r["counters/frames"]) for r in rows if r.get("counters/frames")) == 40
    assert any(r.get("val/return") for r in rows)
    # the centralised critic reads the robot's state
    assert "state" in model.losses["agents"].value_network.in_keys
