"""LbfTask and RwareTask: ids and sizes give the same simulator, grouped specs, seeded batches, LBF's action masks
follow the game's rules, time limits truncate, bad input is refused by name, and MAPPO / QMIX train on them."""

from __future__ import annotations

import csv
from pathlib import Path

import gymnasium as gym
import lightning.pytorch as pl
import pytest
import torch

from lit_marl.algorithms import MAPPO, QMIX
from lit_marl.callbacks import MarlCallback
from lit_marl.envs import LbfTask, RwareTask, Task
from lit_marl.errors import ConfigError
from lit_marl.models import Mlp
from lit_marl.utils import instantiate
from tests.helpers.missing import hide_package
from tests.helpers.tiny import tiny_kwargs, tiny_trainer

# lbforaging and rware are in the dev extra: where one is missing these tests must fail, not skip
import lbforaging  # noqa: E402,F401
import rware  # noqa: E402,F401

LBF_ID = "Foraging-8x8-2p-2f-coop-v3"


def _rows(root: Path) -> list[dict]:
    (metrics,) = root.rglob("metrics.csv")
    return list(csv.DictReader(open(metrics)))


# ---------------------------------------------------------------------------------------------- LBF
def test_lbf_id_and_sizes_build_the_same_game_with_grouped_specs():
    task = LbfTask(LBF_ID)
    assert task.name == f"lbf/{LBF_ID}" and task.max_steps == 50 and not task.continuous_actions
    assert task.group_map == {"agents": ["agent_0", "agent_1"]} and task.state_key is None
    specs = task.specs
    assert specs.observation_spec["agents", "observation"].shape == (2, 3 * 2 + 3 * 2)  # (y, x, level) per food, player
    assert specs.observation_spec["agents", "action_mask"].shape == (2, 6)
    assert specs.group_action_spec("agents").space.n == 6 and specs.group_action_spec("agents").shape == (2,)
    assert specs.reward_spec["agents", "reward"].shape == (2, 1)
    assert task.action_mask_key("agents") == ("agents", "action_mask")
    assert set(specs.done_spec.keys()) == {"done", "terminated", "truncated"}
    # the id's registered arguments and the same sizes given one by one build the same ForagingEnv
    assert task.simulator_kwargs() == gym.registry[LBF_ID].kwargs
    sizes = LbfTask(field_size=8, players=2, max_num_food=2, force_coop=True)
    assert sizes.simulator_kwargs() == task.simulator_kwargs() and sizes.name == task.name
    partial = LbfTask(field_size=8, players=2, max_num_food=2, force_coop=True, sight=2)
    assert partial.simulator_kwargs() == gym.registry["Foraging-2s-8x8-2p-2f-coop-v3"].kwargs
    assert partial.name == "lbf/Foraging-2s-8x8-2p-2f-coop-v3"
    bigger = LbfTask(field_size=10, players=3, max_num_food=3, max_steps=25, action_mask=False,
                     agent_groups="one_group_per_agent")
    assert bigger.group_map == {f"agent_{i}": [f"agent_{i}"] for i in range(3)} and bigger.max_steps == 25
    assert bigger.specs.observation_spec["agent_2", "observation"].shape == (1, 3 * 3 + 3 * 3)
    assert bigger.action_mask_key("agent_0") is None  # no masks when asked for none


def test_lbf_config_round_trip_rebuilds_the_same_task():
    task = LbfTask(field_size=6, players=2, max_num_food=1, env_kwargs={"penalty": 0.1}, agent_groups={
        "first": ["agent_0"], "second": ["agent_1"]})
    config = task.to_config()
    assert config["class_path"] == "lit_marl.envs.lbf.LbfTask" and config["init_args"]["max_steps"] == 50
    rebuilt = instantiate(config, Task, "task")
    assert rebuilt.to_config() == config and rebuilt.simulator_kwargs() == task.simulator_kwargs()
    assert rebuilt.group_map == {"first": ["agent_0"], "second": ["agent_1"]}


def test_lbf_seeds_fix_the_first_observations():
    task = LbfTask(LBF_ID)
    first = task.make_env(num_envs=3, seed=7).reset()["agents", "observation"]
    again = task.make_env(num_envs=3, seed=7).reset()["agents", "observation"]
    other = task.make_env(num_envs=3, seed=8).reset()["agents", "observation"]
    assert torch.equal(first, again)
    assert not torch.equal(first, other)
    assert not torch.equal(first[0], first[1])  # each env of a batch gets its own seed


def _legal_moves(observation: torch.Tensor, n_food: int, side: int) -> torch.Tensor:
    """What LBF allows, from a fully observed agent's observation: a move onto a cell inside the field without food
    (players do not block moves), LOAD next to food, and none always."""
    foods = [tuple(observation[3 * i: 3 * i + 2].long().tolist()) for i in range(n_food) if observation[3 * i + 2] > 0]
    row, col = observation[3 * n_food: 3 * n_food + 2].long().tolist()  # the agent itself is the first player
    targets = [(row - 1, col), (row + 1, col), (row, col - 1), (row, col + 1)]  # north, south, west, east
    moves = [0 <= r < side and 0 <= c < side and (r, c) not in foods for r, c in targets]
    load = any(abs(r - row) + abs(c - col) == 1 for r, c in foods)
    return torch.tensor([True, *moves, load])


def test_lbf_action_masks_are_the_games_rules_and_illegal_actions_do_nothing():
    task = LbfTask(field_size=5, players=2, max_num_food=1)  # small and crowded: walls and food are often next to one
    env = task.make_env(num_envs=4, seed=0)
    generator = torch.Generator().manual_seed(0)
    td = env.reset()
    checked = illegal = 0
    for _ in range(40):
        obs, mask = td["agents", "observation"], td["agents", "action_mask"]
        for e in range(4):
            for a in range(2):
                assert torch.equal(mask[e, a], _legal_moves(obs[e, a], 1, 5)), (e, a, obs[e, a], mask[e, a])
                checked += 1
        td["agents", "action"] = torch.randint(0, 6, (4, 2), generator=generator)  # illegal ones too
        td, next_td = env.step_and_maybe_reset(td)
        taken = td["agents", "action"]
        forbidden = ~mask.gather(-1, taken.unsqueeze(-1)).squeeze(-1)
        moved = (td["next", "agents", "observation"][..., 3:5] != obs[..., 3:5]).any(-1)
        assert not moved[forbidden & ~td["next", "done"].squeeze(-1).unsqueeze(-1)].any()  # an illegal action is "none"
        illegal += int(forbidden.sum())
        td = next_td
    assert checked == 4 * 2 * 40 and illegal > 10  # the check saw illegal actions, and masks that forbid some


def test_lbf_collecting_all_food_terminates_and_the_step_limit_truncates():
    task = LbfTask(field_size=5, players=2, max_num_food=1, max_steps=20)  # not coop: one player may collect alone
    rollout = task.make_env(num_envs=16, seed=0).rollout(20, break_when_any_done=False)
    done, terminated = rollout["next", "done"].squeeze(-1), rollout["next", "terminated"].squeeze(-1)
    truncated = rollout["next", "truncated"].squeeze(-1)
    assert torch.equal(done, terminated | truncated) and not (terminated & truncated).any()
    assert terminated.any() and truncated.any()  # some of 16 random episodes collect the food, some run out of time
    returns = rollout["next", "agents", "reward"].squeeze(-1).sum(-1).cumsum(1)  # the team's return so far
    first_end = done.float().argmax(1)
    for e in range(16):
        end = int(first_end[e])
        if terminated[e, end]:  # all food collected: normalised rewards sum to 1
            assert returns[e, end] == pytest.approx(1.0)
        else:  # cut at the limit, nothing collected
            assert end == 19 and returns[e, end] == 0


def test_lbf_time_limit_terminal_marks_the_cut_terminated_and_changes_nothing_else():
    """EPyMARL's 2021 convention (its wrapper dropped the time-limit flag): the cut at max_steps is terminated too;
    the episodes, rewards and ``done`` are the same as by default. Kept in the task's config."""
    kwargs = dict(field_size=5, players=2, max_num_food=1, max_steps=20)
    torch.manual_seed(0)  # the random actions
    default = LbfTask(**kwargs).make_env(num_envs=16, seed=0).rollout(20, break_when_any_done=False)
    task = LbfTask(**kwargs, time_limit_terminal=True)
    torch.manual_seed(0)
    terminal = task.make_env(num_envs=16, seed=0).rollout(20, break_when_any_done=False)
    for key in [("next", "agents", "observation"), ("next", "agents", "reward"), ("next", "done")]:
        assert torch.equal(terminal[key], default[key]), key
    assert default["next", "truncated"].any()  # some episodes were cut: the convention has something to change
    assert torch.equal(terminal["next", "terminated"], default["next", "done"])
    assert not terminal["next", "truncated"].any()
    rebuilt = instantiate(task.to_config(), Task, "task")
    assert rebuilt.time_limit_terminal is True and LbfTask(**kwargs).time_limit_terminal is False


# ---------------------------------------------------------------------------------------------- RWARE
def test_rware_id_and_settings_build_the_same_warehouse():
    task = RwareTask("rware-tiny-2ag-v2")
    assert task.name == "rware/rware-tiny-2ag-v2" and task.max_steps == 500 and not task.continuous_actions
    assert task.group_map == {"agents": ["agent_0", "agent_1"]}
    specs = task.specs
    assert specs.observation_spec["agents", "observation"].shape == (2, 71)
    assert specs.group_action_spec("agents").space.n == 5 and task.action_mask_key("agents") is None
    assert task.simulator_kwargs() == gym.registry["rware-tiny-2ag-v2"].kwargs
    for env_id, settings in [("rware-tiny-2ag-v2", {}), ("rware-small-4ag-hard-v2", dict(size="small", n_agents=4,
                                                                                         difficulty="hard")),
                             ("rware-large-6ag-easy-v2", dict(size="large", n_agents=6, difficulty="easy"))]:
        from_settings = RwareTask(**settings)
        assert from_settings.simulator_kwargs() == gym.registry[env_id].kwargs, env_id
        assert from_settings.name == f"rware/{env_id}"
    grouped = RwareTask(n_agents=3, max_steps=30, env_kwargs={"reward_type": "global", "sensor_range": 2},
                        agent_groups="one_group_per_agent")
    assert grouped.group_map == {f"agent_{i}": [f"agent_{i}"] for i in range(3)}
    assert grouped.simulator_kwargs()["reward_type"] is rware.warehouse.RewardType.GLOBAL
    assert grouped.specs.observation_spec["agent_1", "observation"].shape[0] == 1
    assert instantiate(grouped.to_config(), Task, "task").simulator_kwargs() == grouped.simulator_kwargs()


def test_rware_seeds_fix_the_first_observations_and_episodes_are_truncated_at_max_steps():
    task = RwareTask("rware-tiny-2ag-v2", max_steps=8)
    torch.manual_seed(0)  # the random actions
    first = task.make_env(num_envs=3, seed=3).rollout(8, break_when_any_done=False)
    again = task.make_env(num_envs=3, seed=3).reset()["agents", "observation"]
    other = task.make_env(num_envs=3, seed=4).reset()["agents", "observation"]
    assert torch.equal(first[:, 0]["agents", "observation"], again) and not torch.equal(again, other)
    assert not torch.equal(again[0], again[1])
    done = first["next", "done"].squeeze(-1)
    assert done[:, -1].all() and not done[:, :-1].any()
    assert first["next", "truncated"][:, -1].all() and not first["next", "terminated"].any()  # no end state
    assert first["next", "agents", "reward"].shape == (3, 8, 2, 1)
    terminal = RwareTask("rware-tiny-2ag-v2", max_steps=8, time_limit_terminal=True).make_env(num_envs=3, seed=3)
    torch.manual_seed(0)
    cut = terminal.rollout(8, break_when_any_done=False)
    assert torch.equal(cut["next", "terminated"], first["next", "done"]) and not cut["next", "truncated"].any()
    assert torch.equal(cut["next", "agents", "observation"], first["next", "agents", "observation"])


def test_worker_processes_step_the_same_episodes():
    serial = LbfTask(LBF_ID).make_env(num_envs=2, seed=5).rollout(5, break_when_any_done=False)
    env = LbfTask(LBF_ID, num_workers=2).make_env(num_envs=2, seed=5)  # one episode in each of two processes
    try:
        td = env.reset()
        for t in range(5):
            assert torch.equal(td["agents", "observation"], serial[:, t]["agents", "observation"]), t
            assert torch.equal(td["agents", "action_mask"], serial[:, t]["agents", "action_mask"]), t
            td["agents", "action"] = serial[:, t]["agents", "action"]
            td = env.step_and_maybe_reset(td)[1]
    finally:
        env.close()


# ---------------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(("build", "message"), [
    (lambda: LbfTask("Foraging-8x8-2p-2f-cop-v3"),
     r"task.env_id: 'Foraging-8x8-2p-2f-cop-v3' is not an id lbforaging registers; did you mean "
     r"'Foraging-8x8-2p-2f-coop-v3'.*\? allowed: Foraging\[-<sight>s\]-<size>x<size>-<players>p-<food>f\[-coop\]-v3"),
    (lambda: LbfTask(LBF_ID, players=3), r"task.players: set by task.env_id 'Foraging-8x8-2p-2f-coop-v3'; allowed: "
                                         r"null \(or env_id: null to give the sizes instead\)"),
    (lambda: LbfTask(field_size=2), r"task.field_size: 2 leaves no inner cell for food; allowed: an integer >= 3"),
    (lambda: LbfTask(players=0), r"task.players: must be a positive integer, got 0"),
    (lambda: LbfTask(max_steps=True), r"task.max_steps: must be an integer or None, got True"),
    (lambda: LbfTask(env_kwargs={"sight": 2}), r"task.env_kwargs: 'sight' is set by task.sight; allowed: "
                                               r"ForagingEnv's other arguments"),
    (lambda: LbfTask(env_kwargs={"grid_observation": True}), r"task.env_kwargs: 'grid_observation' is not supported"),
    (lambda: LbfTask(agent_groups="teams"), r"task.agent_groups: unknown grouping 'teams'; allowed: null, "
                                            r"'all_in_one_group', 'one_group_per_agent' or a mapping"),
    (lambda: LbfTask(agent_groups={"a": ["agent_0"]}), r"task.agent_groups: .* does not put each agent in exactly one"),
    (lambda: LbfTask(num_workers=0), r"task.num_workers: must be a positive integer, got 0"),
    (lambda: LbfTask(time_limit_terminal="yes"), r"task.time_limit_terminal: must be true or false, got 'yes'"),
    (lambda: RwareTask(time_limit_terminal=1), r"task.time_limit_terminal: must be true or false, got 1"),
    (lambda: LbfTask(env_kwargs={"max_player_level": 0}).specs,
     r"task.env_kwargs: ForagingEnv\(players=2, .*max_player_level=0.*\) failed to build with env_kwargs="
     r"\{'max_player_level': 0\}: .*allowed: arguments and values lbforaging.foraging.environment.ForagingEnv accepts"),
    (lambda: RwareTask("rware-tiny-2ag-v1"),
     r"task.env_id: 'rware-tiny-2ag-v1' is not an id rware registers; did you mean 'rware-tiny-2ag-v2'.*\? allowed: "
     r"rware-<tiny\|small\|medium\|large>"),
    (lambda: RwareTask(size="huge"), r"task.size: 'huge' is not a warehouse size; allowed: 'tiny', 'small', "
                                     r"'medium', 'large'"),
    (lambda: RwareTask(difficulty="medium"), r"task.difficulty: 'medium' is not a difficulty; allowed: 'easy', "
                                             r"'normal', 'hard'"),
    (lambda: RwareTask(n_agents=1, difficulty="hard"), r"task.difficulty: rware-tiny-1ag-hard-v2 requests 0 shelves"),
    (lambda: RwareTask("rware-tiny-2ag-v2", n_agents=4), r"task.n_agents: set by task.env_id 'rware-tiny-2ag-v2'"),
    (lambda: RwareTask(env_kwargs={"msg_bits": 2}), r"task.env_kwargs: 'msg_bits' is not supported"),
    (lambda: RwareTask(env_kwargs={"n_agents": 2}), r"task.env_kwargs: 'n_agents' is set by task.n_agents"),
    (lambda: RwareTask(env_kwargs={"reward_type": "team"}),
     r"task.env_kwargs: reward_type 'team' is not one of 'individual', 'global', 'two_stage'"),
    (lambda: RwareTask(difficulty="easy", env_kwargs={"request_queue_size": 3}),
     r"task.env_kwargs: 'request_queue_size' and task.difficulty both set the requested shelves"),
])
def test_bad_settings_are_refused_by_name_with_what_is_allowed(build, message):
    with pytest.raises(ConfigError, match=message):
        build()


@pytest.mark.parametrize(("module", "build", "extra"), [("lbforaging", LbfTask, "lbf"), ("rware", RwareTask, "rware")])
def test_a_missing_package_names_its_pip_command(monkeypatch, module, build, extra):
    hide_package(monkeypatch, module)
    with pytest.raises(ConfigError, match=rf"task: needs the {module} package, which cannot be imported "
                                          rf"\(ModuleNotFoundError: No module named '{module}'\); install it with pip "
                                          rf"install 'lit-marl\[{extra}\]'"):
        build()


# ---------------------------------------------------------------------------------------------- training
def test_mappo_trains_on_lbf_and_never_takes_a_masked_action(tmp_path):
    counts = {"illegal": 0, "steps": 0}

    class Count(MarlCallback):
        def on_batch_collected(self, trainer, pl_module, batch):
            action, mask = batch["agents", "action"], batch["agents", "action_mask"]
            counts["illegal"] += int((~mask.gather(-1, action.unsqueeze(-1))).sum())
            counts["steps"] += batch.numel()

    pl.seed_everything(0)
    model = MAPPO(LbfTask(LBF_ID, max_steps=10), **tiny_kwargs(max_frames=40, evaluation_episodes=2))
    before = [p.detach().clone() for p in model.policies["agents"].parameters()]
    tiny_trainer(tmp_path, max_epochs=1, callbacks=[Count()]).fit(model)
    assert counts == {"illegal": 0, "steps": 40}
    assert any(not torch.equal(b, p) for b, p in zip(before, model.policies["agents"].parameters()))
    rows = _rows(tmp_path)
    assert max(float(r["counters/frames"]) for r in rows if r.get("counters/frames")) == 40
    assert any(r.get("val/return") for r in rows) and any(r.get("train/agents/loss_objective") for r in rows)


def test_qmix_trains_on_rware(tmp_path):
    pl.seed_everything(0)
    model = QMIX(RwareTask("rware-tiny-2ag-v2", max_steps=10), actor_model=Mlp([32]), frames_per_batch=40, num_envs=4,
                 n_optimizer_steps=4, train_batch_size=16, memory_size=1000, max_frames=40, evaluation_episodes=2)
    assert model.losses["agents"].mixer_network.in_keys[1] == ("agents", "observation")  # RWARE has no state
    before = [p.detach().clone() for p in model.parameters()]
    trainer = tiny_trainer(tmp_path, max_epochs=1)
    trainer.fit(model)
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters()))
    assert torch.isfinite(trainer.callback_metrics["train/agents/loss"])
    assert len(model.replay_buffers()["agents"]) == 40
    assert any(r.get("val/return") for r in _rows(tmp_path))
