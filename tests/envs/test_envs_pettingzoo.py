"""PettingZooTask: MPE groups, global state, heterogeneous groups, turn-based games, bad input, learning."""

from __future__ import annotations

import csv
import importlib
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lit_marl.algorithms import IQL, MAPPO, MASAC
from lit_marl.envs import PETTINGZOO_TASKS, PettingZooTask, Task
from lit_marl.errors import ConfigError
from lit_marl.models import Mlp
from lit_marl.utils import instantiate
from tests.helpers.tiny import tiny_kwargs, tiny_trainer

# pettingzoo and mpe2 are in the dev extra: where one is missing these tests must fail, not skip
import mpe2  # noqa: E402,F401
import pettingzoo  # noqa: E402,F401


def _rows(run_dir: Path) -> list[dict]:
    (metrics,) = run_dir.rglob("metrics.csv")
    return list(csv.DictReader(open(metrics)))


def _last(rows: list[dict], name: str) -> float:
    return [float(r[name]) for r in rows if r.get(name)][-1]


# ---------------------------------------------------------------------------------------------- specs
def test_simple_tag_has_two_groups_a_state_and_benchmarl_settings():
    task = PettingZooTask("simple_tag", continuous_actions=False)
    assert task.name == "pettingzoo/simple_tag" and task.max_steps == 100  # BenchMARL's max_cycles
    assert task.env_kwargs()["num_good"] == 2 and task.env_kwargs()["num_adversaries"] == 3
    assert task.group_map == {"adversary": ["adversary_0", "adversary_1", "adversary_2"],
                              "agent": ["agent_0", "agent_1"]}
    specs = task.specs
    assert specs.observation_spec["adversary", "observation"].shape == (3, 20)
    assert specs.observation_spec["agent", "observation"].shape == (2, 18)
    assert specs.group_action_spec("adversary").space.n == 5
    assert task.state_key == "state" and specs.state_spec.shape == (3 * 20 + 2 * 18,)  # state(): every observation
    continuous = PettingZooTask("simple_tag", max_steps=25)
    assert continuous.continuous_actions and continuous.specs.group_action_spec("agent").shape == (2, 5)


def test_envs_are_batched_seeded_and_track_each_groups_return():
    task = PettingZooTask("simple_spread", max_steps=5, continuous_actions=False)
    first = task.make_env(num_envs=3, seed=7).rollout(5)
    again = task.make_env(num_envs=3, seed=7).reset()
    assert first.batch_size == (3, 5)
    assert torch.equal(first[:, 0]["agent", "observation"], again["agent", "observation"])
    other = task.make_env(num_envs=3, seed=8).reset()
    assert not torch.equal(again["agent", "observation"], other["agent", "observation"])
    assert not torch.equal(again["agent", "observation"][0], again["agent", "observation"][1])  # seeds differ per env
    torch.testing.assert_close(first["next", "agent", "episode_reward"][:, -1], first["next", "agent", "reward"].sum(1))
    assert bool(first["next", "done"][:, -1].all()) and not bool(first["next", "done"][:, :-1].any())


def test_config_round_trip_rebuilds_the_same_task():
    task = PettingZooTask("simple_spread_v3", max_steps=25, task_kwargs={"N": 2})
    config = task.to_config()
    assert config == {"class_path": "lit_marl.envs.pettingzoo.PettingZooTask",
                      "init_args": {"task": "simple_spread", "max_steps": 25, "continuous_actions": True,
                                    "task_kwargs": {"N": 2}, "agent_groups": None, "return_state": None,
                                    "num_workers": 1}}
    rebuilt = instantiate(config, Task, "task")
    assert rebuilt.to_config() == config and rebuilt.group_map == {"agent": ["agent_0", "agent_1"]}
    game = PettingZooTask("connect_four")
    assert instantiate(game.to_config(), Task, "task").max_steps == 42


# ---------------------------------------------------------------------------------------------- bad input
def test_unknown_task_lists_close_matches():
    with pytest.raises(ConfigError, match=r"task.task: unknown PettingZoo task 'simple_sprad'; did you mean "
                                          r"'simple_spread'.*allowed: .*connect_four"):
        PettingZooTask("simple_sprad")


@pytest.mark.parametrize(("kwargs", "fragments"), [
    ({"task": "connect_four", "continuous_actions": True}, ["task.continuous_actions", "only discrete", "false"]),
    ({"task": "multiwalker", "continuous_actions": False}, ["task.continuous_actions", "only continuous"]),
    ({"task": "tic_tac_toe", "max_steps": 20}, ["task.max_steps", "at most 9 moves", "20"]),
    ({"task": "simple_spread", "max_steps": 0}, ["task.max_steps", "0"]),
    ({"task": "simple_spread", "agent_groups": "teams"}, ["task.agent_groups", "'teams'", "one_group_per_agent"]),
    ({"task": "simple_spread", "task_kwargs": {"max_cycles": 5}}, ["task.task_kwargs", "task.max_steps"]),
])
def test_bad_settings_name_field_value_and_allowed(kwargs, fragments):
    with pytest.raises(ConfigError) as err:
        PettingZooTask(**kwargs)
    for fragment in fragments:
        assert fragment in str(err.value), (fragment, str(err.value))


def test_a_missing_extra_names_the_install_line(monkeypatch):
    real = importlib.import_module

    def no_mpe2(name, *args, **kwargs):
        if name.startswith("mpe2"):
            raise ModuleNotFoundError("No module named 'mpe2'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib, "import_module", no_mpe2)
    with pytest.raises(ConfigError, match=r"task.task: 'simple_spread' needs mpe2 .*pip install -e \"\.\[pettingzoo\]\""):
        PettingZooTask("simple_spread")


def test_an_algorithm_for_other_actions_is_refused_before_any_env():
    with pytest.raises(ConfigError, match=r"IQL needs discrete actions.*pettingzoo/multiwalker"):
        IQL(PettingZooTask("multiwalker"), frames_per_batch=40, num_envs=4)


def test_state_is_refused_where_the_env_has_none():
    with pytest.raises(ConfigError, match="task.return_state: tic_tac_toe has no global state"):
        PettingZooTask("tic_tac_toe", return_state=True).specs


def test_every_registered_task_builds():
    for name, entry in PETTINGZOO_TASKS.items():
        small = {"map_size": 12} if entry.extra == "magent2" else None  # MAgent2's 45x45 maps hold ~160 agents
        task = PettingZooTask(name, max_steps=None, task_kwargs=small)
        observation = task.specs.observation_spec[next(iter(task.group_map)), "observation"]
        assert task.group_map and observation.ndim == (4 if entry.images else 2)  # [agents, H, W, C] or [agents, D]


# ---------------------------------------------------------------------------------------------- training
def test_heterogeneous_groups_train_their_own_networks_and_log_per_group(tmp_path):
    pl.seed_everything(0)
    task = PettingZooTask("simple_tag", max_steps=10, continuous_actions=False)
    model = MAPPO(task, **tiny_kwargs())
    assert set(model.policies) == set(model.critics) == {"adversary", "agent"}
    adversary, agent = model.policies["adversary"], model.policies["agent"]
    assert not {id(p) for p in adversary.parameters()} & {id(p) for p in agent.parameters()}
    names = [g["name"] for g in model.configure_optimizers().param_groups]
    assert names == ["adversary/actor", "adversary/critic", "agent/actor", "agent/critic"]
    before = {g: [p.detach().clone() for p in model.policies[g].parameters()] for g in model.groups}
    tiny_trainer(tmp_path, max_epochs=2).fit(model)
    for group in model.groups:  # both groups trained
        assert any(not torch.equal(b, p) for b, p in zip(before[group], model.policies[group].parameters())), group
    rows = _rows(tmp_path)
    for group in ("adversary", "agent"):
        for name in (f"train/{group}/loss_objective", f"train/{group}/loss_critic", f"train/{group}/actor/grad_norm",
                     f"collection/{group}/reward/episode_reward_mean", f"val/{group}/return"):
            assert any(r.get(name) for r in rows), name
    # adversaries are rewarded for tagging, good agents penalised: the groups' returns differ in sign or size
    assert _last(rows, "val/adversary/return") != _last(rows, "val/agent/return")
    assert _last(rows, "counters/frames") == 80


def test_masac_trains_both_groups_with_a_centralised_critic_of_the_state(tmp_path):
    pl.seed_everything(0)
    task = PettingZooTask("simple_tag", max_steps=10)  # continuous
    model = MASAC(task, actor_model=Mlp([32]), critic_model=Mlp([32]), frames_per_batch=40, num_envs=4,
                  n_optimizer_steps=4, train_batch_size=16, memory_size=1000, evaluation_episodes=2, max_frames=80)
    assert ("next", "state") in model.learners["adversary"].training_keys()  # the TD target reads the next state
    tiny_trainer(tmp_path, max_epochs=2).fit(model)
    rows = _rows(tmp_path)
    assert any(r.get("train/adversary/loss_qvalue") for r in rows) and any(r.get("train/agent/loss_qvalue") for r in rows)
    assert len(model.replay_buffers()["agent"]) == 80


def _fit(tmp_path, name, max_epochs, ckpt_path=None, seed=0):
    pl.seed_everything(seed)
    task = PettingZooTask("simple_spread", max_steps=10, continuous_actions=False)
    model = MAPPO(task, **tiny_kwargs(seed=seed))  # frames_per_batch = num_envs × max_steps
    checkpoint = ModelCheckpoint(dirpath=tmp_path / name, save_last=True, every_n_epochs=1,
                                 save_on_train_epoch_end=True)
    trainer = tiny_trainer(tmp_path / name, max_epochs=max_epochs, callbacks=[checkpoint], check_val_every_n_epoch=2)
    trainer.fit(model, ckpt_path=ckpt_path)
    return model


def test_same_seed_same_metrics_and_resume_is_bitwise(tmp_path):
    straight = _fit(tmp_path, "straight", max_epochs=4)
    again = _fit(tmp_path, "again", max_epochs=4)
    _fit(tmp_path, "first", max_epochs=2)
    resumed = _fit(tmp_path, "resumed", max_epochs=4, ckpt_path=tmp_path / "first" / "last.ckpt")
    collected = [r["collection/reward/episode_reward_mean"] for r in _rows(tmp_path / "straight")
                 if r.get("collection/reward/episode_reward_mean")]
    assert len(collected) == 4
    assert collected == [r["collection/reward/episode_reward_mean"] for r in _rows(tmp_path / "again")
                         if r.get("collection/reward/episode_reward_mean")]
    resumed_collected = [r["collection/reward/episode_reward_mean"] for r in _rows(tmp_path / "resumed")
                         if r.get("collection/reward/episode_reward_mean")]
    assert resumed_collected == collected[2:]
    for key, value in straight.state_dict().items():
        assert torch.equal(value, again.state_dict()[key]), key
        assert torch.equal(value, resumed.state_dict()[key]), key


# ---------------------------------------------------------------------------------------------- turn-based
def test_turn_based_game_masks_the_waiting_player_and_rewards_both():
    task = PettingZooTask("tic_tac_toe")
    assert task.turn_based and task.max_steps == 9 and not task.continuous_actions and task.state_key is None
    assert task.group_map == {"agents": ["player_1", "player_2"]}
    assert task.action_mask_key("agents") == ("agents", "action_mask")
    assert task.specs.observation_spec["agents", "observation"].shape == (2, 3 * 3 * 2 + 1)  # board + "my turn"
    env = task.make_env(num_envs=8, seed=0)
    td = env.reset()
    playing = torch.ones(8, dtype=torch.bool)  # envs still in their first game
    ended_at = torch.full((8,), -1)
    final = torch.zeros(8, 2)
    for step in range(9):  # random legal moves for whoever acts (the waiting player's action is ignored)
        mask = td["agents", "action_mask"]
        td["agents", "action"] = torch.distributions.Categorical(probs=mask.float()).sample()
        acting = td["agents", "mask"][playing]
        assert acting.sum(-1).eq(1).all()  # one player per env acts
        assert bool(acting[:, step % 2].all())  # player_1 moves first, then they alternate
        assert torch.equal(td["agents", "observation"][playing][..., -1], acting.float())  # the "my turn" feature
        waiting = td["agents", "action_mask"][playing][~acting]
        assert waiting[:, 0].all() and not waiting[:, 1:].any()  # the waiting player may only take action 0
        td, next_td = env.step_and_maybe_reset(td)
        reward = td["next", "agents", "reward"].squeeze(-1)
        done = td["next", "done"].squeeze(-1)
        assert reward[playing & ~done].abs().sum() == 0  # rewards come only when a game ends
        ended = playing & done
        final[ended], ended_at[ended] = reward[ended], step
        playing &= ~done
        td = next_td
    assert not playing.any()  # tic-tac-toe ends within 9 moves
    for env_index in range(8):
        result = final[env_index]
        assert result.sum() == 0  # a win for one is a loss for the other (or a draw)
        if result.abs().sum() > 0:  # the winner is the player who made the last move
            mover = int(ended_at[env_index]) % 2
            assert result[mover] == 1.0 and result[1 - mover] == -1.0
    assert (final.abs().sum(-1) > 0).any()  # at least one game of eight was won


def _win_rate_vs_random(model: MAPPO, games: int = 200, seed: int = 1234) -> dict[str, float]:
    """player_1 (the trained policy, moving first) against uniformly random legal moves as player_2."""
    task = model.task
    env = task.make_env(num_envs=games, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    result = torch.zeros(games)
    over = torch.zeros(games, dtype=torch.bool)
    illegal = 0  # moves of the trained player outside its action mask, on its turns, in the counted games
    with torch.no_grad(), task.isolated_rng(seed):
        from torchrl.envs.utils import ExplorationType, set_exploration_type
        td = env.reset()
        for _ in range(task.max_steps):
            with set_exploration_type(ExplorationType.DETERMINISTIC):
                td = model.policy(td)
            its_turn = td["agents", "mask"][:, 0] & ~over
            chosen = td["agents", "action"][:, 0]
            legal = td["agents", "action_mask"][:, 0].gather(-1, chosen.unsqueeze(-1)).squeeze(-1)
            illegal += int((its_turn & ~legal).sum())
            mask = td["agents", "action_mask"][:, 1]
            random_move = torch.multinomial(mask.float(), 1, generator=generator).squeeze(-1)
            td["agents", "action"][:, 1] = random_move
            td, next_td = env.step_and_maybe_reset(td)  # a finished game restarts; only the first one counts
            done = td["next", "done"].squeeze(-1) & ~over
            result[done] = td["next", "agents", "reward"][done, 0, 0]
            over |= done
            if bool(over.all()):
                break
            td = next_td
    return {"win": float((result == 1).float().mean()), "loss": float((result == -1).float().mean()),
            "ended": float(over.float().mean()), "illegal": illegal}


def test_mappo_trains_on_a_turn_based_game(tmp_path):
    pl.seed_everything(0)
    model = MAPPO(PettingZooTask("tic_tac_toe"), **tiny_kwargs(frames_per_batch=36, minibatch_size=18))
    before = [p.detach().clone() for p in model.policies["agents"].parameters()]
    tiny_trainer(tmp_path, max_epochs=2).fit(model)
    assert any(not torch.equal(b, p) for b, p in zip(before, model.policies["agents"].parameters()))
    rows = _rows(tmp_path)
    assert _last(rows, "counters/frames") == 72 and any(r.get("val/agents/return") for r in rows)
    rates = _win_rate_vs_random(model, games=20)
    # every game played to its end within 9 moves, the trained player never choosing an occupied square
    assert rates["ended"] == 1.0 and rates["illegal"] == 0


@pytest.mark.learning
def test_tic_tac_toe_win_rate_against_a_random_player_rises(tmp_path):
    pl.seed_everything(0)
    model = MAPPO(PettingZooTask("tic_tac_toe"), actor_model=Mlp([64, 64]), critic_model=Mlp([64, 64]),
                  frames_per_batch=900, num_envs=100, n_minibatch_iters=4, minibatch_size=300, lr=1e-3,
                  entropy_coef=0.01, max_frames=900 * ITERATIONS_TTT, seed=0)
    before = _win_rate_vs_random(model)
    pl.Trainer(max_epochs=-1, gradient_clip_val=5.0, logger=False, enable_checkpointing=False,
               enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
               default_root_dir=tmp_path).fit(model)
    after = _win_rate_vs_random(model)
    print(f"tic-tac-toe vs random: win {before['win']:.2f} -> {after['win']:.2f}, "
          f"loss {before['loss']:.2f} -> {after['loss']:.2f}")
    assert after["win"] - before["win"] >= WIN_MARGIN


#: measured on this 2-core machine (seed 0, 200 games, player_1 deterministic vs random), win rate 0.64 before and
#: after iterations 1-13: 0.80 0.76 0.78 0.80 0.80 0.81 0.86 0.85 0.81 0.80 0.73 0.76 0.80 (900 frames each; 5
#: iterations take about 35 s with both win-rate checks). The rate settles near 0.8 within the first iterations and
#: does not climb further at this budget; 5 iterations give +0.16 against a margin of 0.10 (200-game sampling
#: noise is about 0.03; an untrained or broken learner stays at 0.64)
ITERATIONS_TTT = 5
WIN_MARGIN = 0.10


@pytest.mark.learning
@pytest.mark.long  # not honest within CI's time yet: see the xfail's reason
@pytest.mark.xfail(strict=True, reason=(
    "issue 48: at these settings MAPPO does not beat doing nothing on simple_spread within CI's budget. Every agent "
    "staying put scores -23.39 on these episodes; seeds 0/1/2 reached -27.1/-22.6/-22.9 after 21 iterations and "
    "-19.1/-40.8/-32.3 after 41 (seed 1 collapses at lr 1e-3); at lr 3e-4 seed 0 reached -20.9 after 71. Strict: "
    "once settings are found that pass, remove this mark"))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mappo_raises_the_return_on_simple_spread(tmp_path, seed):
    """Seeds 0-2, chosen without looking at their start (an earlier version ran seed 1 only, whose untrained greedy
    policy, -58.3, was the worst of four: its "rise" of +29 was mostly regression to doing nothing's -23.4). The rise
    is measured from the better of the untrained policy and doing nothing (tests/helpers/trivial.py)."""
    from tests.helpers.trivial import do_nothing_return, mean_return

    pl.seed_everything(seed)
    task = PettingZooTask("simple_spread", max_steps=25, continuous_actions=False)
    model = MAPPO(task, actor_model=Mlp([64, 64]), critic_model=Mlp([64, 64]), frames_per_batch=1000, num_envs=20,
                  n_minibatch_iters=10, minibatch_size=250, lr=1e-3, entropy_coef=0.01,
                  max_frames=1000 * SPREAD_ITERATIONS, seed=seed)
    before, nothing = mean_return(model, episodes=20), do_nothing_return(model, episodes=20)
    pl.Trainer(max_epochs=-1, gradient_clip_val=5.0, logger=False, enable_checkpointing=False,
               enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
               default_root_dir=tmp_path).fit(model)
    after = mean_return(model, episodes=20)
    print(f"simple_spread seed {seed}: mean evaluation return {before:.2f} -> {after:.2f} (doing nothing {nothing:.2f})")
    assert after - max(before, nothing) >= SPREAD_MARGIN, f"seed {seed}: {before:.2f} -> {after:.2f}"


SPREAD_ITERATIONS = 20
SPREAD_MARGIN = 3.0


# ---------------------------------------------------------------------------------------------- worker processes
def _fit_with_workers(tmp_path, num_workers: int) -> MAPPO:
    pl.seed_everything(0)
    task = PettingZooTask("simple_tag", max_steps=10, continuous_actions=False, num_workers=num_workers)
    model = MAPPO(task, **tiny_kwargs(max_frames=80, evaluation_episodes=4))
    tiny_trainer(tmp_path / f"workers_{num_workers}", max_epochs=2).fit(model)
    return model


def test_two_worker_processes_collect_the_same_data_as_one(tmp_path):
    env = PettingZooTask("simple_spread", max_steps=5, num_workers=2).make_env(num_envs=4, seed=3)
    assert type(env.base_env).__name__ == "FlatBatchEnv" and env.batch_size == (4,)
    env.close()
    one, two = _fit_with_workers(tmp_path, 1), _fit_with_workers(tmp_path, 2)
    rows = {n: _rows(tmp_path / f"workers_{n}") for n in (1, 2)}
    for name in ("collection/adversary/reward/episode_reward_mean", "collection/agent/reward/episode_reward_mean",
                 "val/adversary/return", "val/agent/return"):
        values = {n: [r[name] for r in rows[n] if r.get(name)] for n in (1, 2)}
        assert len(values[1]) == 2 and values[1] == values[2], name
    for key, value in one.state_dict().items():  # the same data, so the same updates
        assert torch.equal(value, two.state_dict()[key]), key


def test_workers_split_the_envs_evenly():
    from lit_marl.envs.batching import workers_for

    assert [workers_for(n, 2) for n in (1, 2, 3, 4, 10)] == [1, 2, 1, 2, 2]
    assert workers_for(12, 5) == 4 and workers_for(7, 3) == 1
    with pytest.raises(ConfigError, match="task.num_workers: must be a positive integer, got 0"):
        PettingZooTask("simple_spread", num_workers=0)
    with pytest.raises(ConfigError, match="task.num_workers: turn-based"):
        PettingZooTask("connect_four", num_workers=2)
