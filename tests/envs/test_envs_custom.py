"""CustomTask: a user's own torchrl, PettingZoo (parallel and turn-based) or Gymnasium env class by import path."""

from __future__ import annotations

import csv
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
import yaml

from lit_marl.algorithms import IQL, MAPPO
from lit_marl.cli import main
from lit_marl.envs import CustomTask, Task
from lit_marl.errors import ConfigError
from lit_marl.models import Mlp
from lit_marl.utils import instantiate
from tests.helpers.tiny import tiny_kwargs, tiny_trainer
from tests.helpers.tiny_env import first_episode

KINDS = {  # import path -> (groups, continuous actions)
    "tests.helpers.custom_envs.LineWalkEnv": ({"walkers": ["walker_0", "walker_1"]}, True),
    "tests.helpers.custom_envs.MatchParallelEnv": ({"player": ["player_0", "player_1"]}, False),
    "tests.helpers.custom_envs.NimAECEnv": ({"agents": ["player_0", "player_1"]}, False),
    "tests.helpers.custom_envs.ReachGymEnv": ({"agent": ["agent_0"]}, False),
}


def _rows(run_dir: Path) -> list[dict]:
    (metrics,) = run_dir.rglob("metrics.csv")
    return list(csv.DictReader(open(metrics)))


@pytest.mark.parametrize("path", KINDS)
def test_each_kind_is_built_from_its_import_path_and_round_trips(path):
    task = CustomTask(path, max_steps=6)
    groups, continuous = KINDS[path]
    assert task.group_map == groups and task.continuous_actions == continuous
    assert task.name == f"custom/{path.rsplit('.', 1)[1]}" and task.max_steps == 6
    for group, agents in groups.items():
        assert task.specs.observation_spec[group, "observation"].shape[0] == len(agents)
    rebuilt = instantiate(task.to_config(), Task, "task")
    assert rebuilt.to_config() == task.to_config() and rebuilt.group_map == groups


def test_torchrl_env_of_one_episode_is_batched_seeded_and_cut_at_max_steps():
    task = CustomTask("tests.helpers.custom_envs.LineWalkEnv", max_steps=6, env_kwargs={"speed": 0.5})
    rollout = task.make_env(num_envs=3, seed=4).rollout(12, break_when_any_done=False)
    assert rollout.batch_size == (3, 12)
    done = rollout["next", "done"].squeeze(-1)
    assert done[:, [5, 11]].all() and done.sum() == 6  # LineWalkEnv never ends by itself: max_steps cuts it
    obs = task.make_env(num_envs=3, seed=4).reset()["walkers", "observation"]
    assert torch.equal(obs, rollout[:, 0]["walkers", "observation"])  # same seed, same starts
    assert not torch.equal(obs[0], obs[1])  # and each env its own
    step = rollout["next", "walkers", "observation"][..., 0] - rollout["walkers", "observation"][..., 0]
    torch.testing.assert_close(step[:, :5], 0.5 * rollout["walkers", "action"][:, :5].squeeze(-1))  # env_kwargs reach it
    torch.testing.assert_close(rollout["next", "walkers", "episode_reward"][:, 5],
                               rollout["next", "walkers", "reward"][:, :6].sum(1))


def test_a_batched_torchrl_env_is_built_once_with_num_envs_and_seed():
    task = CustomTask("tests.helpers.tiny_env.CountdownEnv", max_steps=5, success_key="success")
    assert task.success_key == "success"
    env = task.make_env(num_envs=4, seed=3)
    assert type(env.base_env).__name__ == "CountdownEnv" and env.batch_size == (4,)
    rollout = env.rollout(5, break_when_any_done=False)
    for e in range(4):
        length, sign = first_episode(3, e)
        assert bool(rollout["next", "done"][e, length - 1]) and rollout["next", "agents", "reward"][e, 0, 0, 0] == sign


def test_turn_based_pettingzoo_class_masks_the_waiting_player_and_pays_the_winner():
    task = CustomTask("tests.helpers.custom_envs.NimAECEnv", max_steps=5, env_kwargs={"stones": 4})
    assert task.turn_based and task.action_mask_key("agents") == ("agents", "action_mask")
    env = task.make_env(num_envs=6, seed=0)
    td = env.reset()
    playing = torch.ones(6, dtype=torch.bool)
    final = torch.zeros(6, 2)
    for _ in range(4):  # piles of 3-4 stones end within 4 moves
        acting = td["agents", "mask"][playing]
        assert acting.sum(-1).eq(1).all()
        waiting_mask = td["agents", "action_mask"][playing][~acting]
        assert waiting_mask[:, 0].all() and not waiting_mask[:, 1].any()
        td["agents", "action"] = torch.zeros(6, 2, dtype=torch.long)  # everyone takes one stone
        td, next_td = env.step_and_maybe_reset(td)
        ended = playing & td["next", "done"].squeeze(-1)
        final[ended] = td["next", "agents", "reward"][ended].squeeze(-1)
        playing &= ~ended
        td = next_td
    assert not playing.any()
    assert torch.equal(final.sum(-1), torch.zeros(6)) and final.abs().eq(1).all()  # one wins, one loses


def test_gymnasium_class_is_a_one_agent_group_with_success():
    task = CustomTask("tests.helpers.custom_envs.ReachGymEnv", max_steps=8, group="robot")
    assert task.group_map == {"robot": ["robot_0"]} and task.success_key == "is_success"
    env = task.make_env(num_envs=2, seed=0)
    td = env.reset()
    flags = []
    for _ in range(5):
        td["robot", "action"] = torch.ones(2, 1, dtype=torch.long)
        td, td_next = env.step_and_maybe_reset(td)
        flags.append(td["next", "robot", "is_success"].reshape(2).bool())
        td = td_next
    assert not torch.stack(flags[:4]).any() and flags[4].all()


def test_pettingzoo_class_state_for_centralised_critics():
    task = CustomTask("tests.helpers.custom_envs.MatchParallelEnv", max_steps=5, state_key="state")
    assert task.state_key == "state" and task.specs.state_spec.shape == (3,)


@pytest.mark.parametrize("path", KINDS)
def test_mappo_trains_on_each_kind_and_logs_its_groups(tmp_path, path):
    pl.seed_everything(0)
    task = CustomTask(path, max_steps=10)
    model = MAPPO(task, **tiny_kwargs(max_frames=80, evaluation_episodes=2))
    before = {g: [p.detach().clone() for p in model.policies[g].parameters()] for g in model.groups}
    tiny_trainer(tmp_path, max_epochs=2).fit(model)
    rows = _rows(tmp_path)
    assert max(float(r["counters/frames"]) for r in rows if r.get("counters/frames")) == 80
    for group in task.group_map:
        assert any(r.get(f"train/{group}/loss_objective") for r in rows) and any(r.get(f"val/{group}/return")
                                                                                 for r in rows)
        assert any(not torch.equal(b, p) for b, p in zip(before[group], model.policies[group].parameters()))


def test_iql_trains_on_a_custom_pettingzoo_env(tmp_path):
    pl.seed_everything(0)
    model = IQL(CustomTask("tests.helpers.custom_envs.MatchParallelEnv", max_steps=10), actor_model=Mlp([16]),
                frames_per_batch=40, num_envs=4, memory_size=1000, n_optimizer_steps=4, train_batch_size=16,
                max_frames=80, evaluation_episodes=2)
    tiny_trainer(tmp_path, max_epochs=2).fit(model)
    assert len(model.replay_buffers()["player"]) == 80 and any(r.get("train/player/loss") for r in _rows(tmp_path))


def test_a_yaml_config_names_the_class_by_import_path(tmp_path):
    config = {
        "seed_everything": 0,
        "trainer": {"max_epochs": -1, "enable_progress_bar": False, "enable_model_summary": False,
                    "check_val_every_n_epoch": 1, "num_sanity_val_steps": 0},
        "model": {"class_path": "lit_marl.algorithms.MAPPO", "init_args": {
            "task": {"class_path": "lit_marl.envs.CustomTask", "init_args": {
                "env_class": "tests.helpers.custom_envs.MatchParallelEnv", "env_kwargs": {"n_symbols": 4}, "max_steps": 10}},
            "frames_per_batch": 40, "num_envs": 4, "minibatch_size": 20, "n_minibatch_iters": 1, "max_frames": 40,
            "evaluation_episodes": 2}},
    }
    (tmp_path / "custom.yaml").write_text(yaml.safe_dump(config))
    main(["fit", "--config", str(tmp_path / "custom.yaml")])
    (saved,) = Path("runs").glob("*/version_*/config.yaml")
    task = yaml.safe_load(saved.read_text())["model"]["init_args"]["task"]
    assert task["init_args"]["env_class"] == "tests.helpers.custom_envs.MatchParallelEnv"
    assert task["init_args"]["env_kwargs"] == {"n_symbols": 4}
    assert any(r.get("val/player/return") for r in _rows(saved.parent))


@pytest.mark.parametrize(("kwargs", "fragments"), [
    ({"env_class": "LineWalkEnv"}, ["task.env_class", "'LineWalkEnv' is not an import path", "package.module.ClassName"]),
    ({"env_class": "tests.no_such_module.Env"}, ["task.env_class", "cannot import module 'tests.no_such_module'",
                                                 "No module named"]),
    ({"env_class": "tests.helpers.custom_envs.LineWalkEnvv"}, ["has no 'LineWalkEnvv'",
                                                        "did you mean 'tests.helpers.custom_envs.LineWalkEnv'"]),
    ({"env_class": "tests.helpers.custom_envs.make_line_walk"}, ["'tests.helpers.custom_envs.make_line_walk' is a function, not a class"]),
    ({"env_class": "tests.helpers.custom_envs.NotAnEnv"}, ["is a class", "but no environment", "gymnasium.Env subclass"]),
    ({"env_class": "tests.helpers.custom_envs.UngroupedEnv"}, ["task.env_class", "group_map=None", "(group, 'observation')"]),
    ({"env_class": "tests.helpers.custom_envs.LineWalkEnv", "env_kwargs": {"sped": 1}}, ["task.env_class", "sped"]),
    ({"env_class": "tests.helpers.custom_envs.LineWalkEnv", "max_steps": 0}, ["task.max_steps", "0"]),
    ({"env_class": "tests.helpers.custom_envs.LineWalkEnv", "state_key": "state"}, ["task.state_key", "'state'", "null"]),
    ({"env_class": "tests.helpers.custom_envs.MatchParallelEnv", "env_kwargs": {"n_symbols": "x"}}, ["task.env_class",
                                                                                            "failed to build"]),
    ({"env_class": "tests.helpers.custom_envs.MatchParallelEnv", "agent_groups": "teams"}, ["task.agent_groups", "'teams'"]),
    ({"env_class": "tests.helpers.custom_envs.ReachGymEnv", "vectorization": "threads"}, ["task.vectorization", "'threads'"]),
    ({"env_class": "tests.helpers.custom_envs.LineWalkEnv", "agent_groups": "all_in_one_group"}, ["task.agent_groups",
                                                                                           "PettingZoo"]),
])
def test_bad_env_class_or_settings_name_field_value_and_allowed(kwargs, fragments):
    with pytest.raises(ConfigError) as err:
        CustomTask(**{"max_steps": 5, **kwargs})
    for fragment in fragments:
        assert fragment in str(err.value), (fragment, str(err.value))


def test_worker_processes_reset_finished_episodes_like_one_process():
    """Episodes of 2-5 steps end at different steps: each env's partial reset must reach its own worker."""
    rollouts = []
    for workers in (1, 2):
        env = CustomTask("tests.helpers.custom_envs.LineWalkEnv", max_steps=6, env_kwargs={"random_length": True},
                         num_workers=workers).make_env(num_envs=4, seed=5)
        assert type(env.base_env).__name__ == ("FlatBatchEnv" if workers == 2 else "SerialEnv")
        torch.manual_seed(0)
        rollouts.append(env.rollout(12, break_when_any_done=False))
        env.close()
    one, two = rollouts
    done = one["next", "done"].squeeze(-1)
    assert len({tuple(d.nonzero().flatten().tolist()) for d in done}) > 1  # the envs end at different steps
    for key in one.keys(True, True):
        assert torch.equal(one[key], two[key]), key


def test_workers_are_refused_where_they_cannot_run():
    with pytest.raises(ConfigError, match=r"task.num_workers: turn-based .* got 2; allowed: 1"):
        CustomTask("tests.helpers.custom_envs.NimAECEnv", max_steps=6, num_workers=2)
    with pytest.raises(ConfigError, match=r"task.num_workers: .*Gymnasium env \(use vectorization: async"):
        CustomTask("tests.helpers.custom_envs.ReachGymEnv", max_steps=6, num_workers=2)
    with pytest.raises(ConfigError, match=r"task.num_workers: .*batched torchrl env"):
        CustomTask("tests.helpers.tiny_env.CountdownEnv", max_steps=6, num_workers=2)
