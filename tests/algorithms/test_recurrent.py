"""Recurrent networks (Gru, Lstm): hidden states reset exactly at episode starts, training on trajectory chunks sees
what collection saw, MAPPO learns a task that needs memory where an MLP cannot, resume, and bad input."""

from __future__ import annotations

import csv
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from tensordict import TensorDict

from lit_marl.algorithms import IPPO, IQL, ISAC, MADDPG, MAPPO, QMIX
from lit_marl.errors import ConfigError
from lit_marl.models import Gru, Lstm, Mlp, ModelInputs
from lit_marl.models.recurrent import sequence_mode
from tests.helpers.tiny import ddpg_kwargs, tiny_kwargs, tiny_task, tiny_trainer
from tests.helpers.memory_task import CueMemoryTask


def _module(kind="lstm", share_params=False, centralised=False, n_agents=3, features=4):
    config = Lstm(hidden_size=8) if kind == "lstm" else Gru(hidden_size=8, n_layers=2)
    inputs = ModelInputs(group="agents", n_agents=n_agents, keys=[("agents", "observation")],
                         shapes=[torch.Size([features])])
    return config.build_module(inputs, [("agents", "out")], 2, centralised=centralised, share_params=share_params)


def _step_input(module, obs, states, is_init):
    entries = {("agents", "observation"): obs, "is_init": is_init}
    entries.update(dict(zip(module.state_keys, states)))
    return TensorDict(entries, batch_size=obs.shape[:1])


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_hidden_state_is_zeroed_exactly_where_an_episode_starts(kind):
    torch.manual_seed(0)
    module = _module(kind)
    obs = torch.randn(5, 3, 4)
    stale = [torch.randn(5, *spec.shape) for spec in module.state_specs.values()]
    zeros = [torch.zeros_like(s) for s in stale]
    start = torch.tensor([[True], [False], [True], [False], [False]])
    out = module(_step_input(module, obs, stale, start))["agents", "out"]
    fresh = module(_step_input(module, obs, zeros, torch.zeros(5, 1, dtype=torch.bool)))["agents", "out"]
    torch.testing.assert_close(out[start[:, 0]], fresh[start[:, 0]])  # episode start: the old state is gone
    assert not torch.isclose(out[~start[:, 0]], fresh[~start[:, 0]]).all(-1).any()  # elsewhere it counts


def test_collected_hidden_states_restart_at_every_episode(tmp_path):
    torch.manual_seed(0)
    model = MAPPO(tiny_task(max_steps=5), **tiny_kwargs(actor_model=Gru(hidden_size=8), critic_model=Lstm(hidden_size=8)))
    env = model.collection.make_env(4, seed=0)
    with torch.no_grad():
        rollout = env.rollout(13, policy=model.collection.policy(), break_when_any_done=False)
    starts = rollout["is_init"][..., 0]
    assert starts[:, [0, 5, 10]].all() and starts.sum() == 4 * 3
    for key in ("loc_hidden", "state_value_hidden", "state_value_cell"):  # actor's and critic's states
        norms = rollout["agents", key].flatten(2).norm(dim=-1)
        assert (norms[starts] == 0).all() and (norms[~starts] > 0).all(), key


@pytest.mark.parametrize("share_params", [True, False])
def test_training_on_a_chunk_reproduces_what_collection_computed(share_params):
    """Sequence mode from the state stored at the chunk's first step gives the step-by-step outputs, resets included."""
    torch.manual_seed(0)
    module = _module("lstm", share_params=share_params, centralised=True)
    time, batch = 7, 2
    obs = torch.randn(batch, time, 3, 4)
    is_init = torch.zeros(batch, time, 1, dtype=torch.bool)
    is_init[0, 3] = is_init[1, 5] = True  # episodes restart inside the chunk
    states = [torch.randn(batch, *spec.shape) for spec in module.state_specs.values()]  # mid-episode start
    stored_states, stepped = [], []
    for t in range(time):
        td = module(_step_input(module, obs[:, t], states, is_init[:, t]))
        stored_states.append(states)
        stepped.append(td["agents", "out"])
        states = [td["next", *key] for key in module.state_keys]
    chunk = TensorDict({("agents", "observation"): obs, "is_init": is_init,
                        **{key: torch.stack([s[i] for s in stored_states], 1) for i, key in enumerate(module.state_keys)}},
                       batch_size=[batch, time])
    with sequence_mode():
        replayed = module(chunk)["agents", "out"]
    torch.testing.assert_close(replayed, torch.stack(stepped, 1))
    # gradients flow back through time, and stop at an episode start
    obs.requires_grad_(True)
    chunk.set(("agents", "observation"), obs)
    with sequence_mode():
        out = module(chunk)["agents", "out"]
    (grad_before_reset,) = torch.autograd.grad(out[1, 4].sum(), obs, retain_graph=True)
    assert grad_before_reset[1, 0].abs().sum() > 0
    (grad_after_reset,) = torch.autograd.grad(out[1, 6].sum(), obs)
    assert grad_after_reset[1, :5].abs().sum() == 0 and grad_after_reset[1, 5].abs().sum() > 0


def test_separate_parameters_keep_agents_apart():
    torch.manual_seed(0)
    module = _module("gru", share_params=False, centralised=False)
    assert len(module.rnns) == 3
    obs = torch.randn(4, 3, 4)
    states = [torch.zeros(4, *spec.shape) for spec in module.state_specs.values()]
    start = torch.ones(4, 1, dtype=torch.bool)
    base = module(_step_input(module, obs, states, start))["agents", "out"]
    moved = obs.clone()
    moved[:, 2] += 1.0
    out = module(_step_input(module, moved, states, start))["agents", "out"]
    torch.testing.assert_close(out[:, :2], base[:, :2])
    assert not torch.allclose(out[:, 2], base[:, 2])


def test_minibatches_are_whole_chunks_in_time_order():
    model = MAPPO(CueMemoryTask(length=4), actor_model=Gru(hidden_size=8), critic_model=Mlp(num_cells=[8]),
                  frames_per_batch=64, num_envs=8, minibatch_size=16, n_minibatch_iters=2, sequence_length=4,
                  evaluation_episodes=2)
    batches = list(model.loop)
    assert len(batches) == len(model.loop) == 2 * (64 // 16)
    for batch in batches:
        assert batch.batch_size == (4, 4)  # 4 chunks of 4 steps
        progress = batch["agents", "observation"][..., 0, 1]
        torch.testing.assert_close(progress, torch.tensor([0.0, 0.25, 0.5, 0.75]).expand(4, 4))
        assert batch["is_init"][:, 0].all() and not batch["is_init"][:, 1:].any()


def _memory_run(tmp_path, model_config, iterations=20):
    pl.seed_everything(0)
    model = MAPPO(CueMemoryTask(), actor_model=model_config, critic_model=model_config, frames_per_batch=256,
                  num_envs=64, minibatch_size=64, n_minibatch_iters=4, lr=3e-3, max_frames=256 * iterations,
                  evaluation_episodes=64)
    trainer = tiny_trainer(tmp_path, max_epochs=-1, check_val_every_n_epoch=iterations)
    before = trainer.validate(model, verbose=False)[0]["val/return"]
    trainer.fit(model)
    rows = [r for r in csv.DictReader(open(Path(trainer.logger.log_dir) / "metrics.csv")) if r.get("val/return")]
    return before, float(rows[-1]["val/return"])


def test_recurrent_mappo_remembers_the_cue_where_an_mlp_cannot(tmp_path):
    gru_before, gru_after = _memory_run(tmp_path / "gru", Gru(hidden_size=32))
    _, mlp_after = _memory_run(tmp_path / "mlp", Mlp(num_cells=[32, 32]))
    # random or memoryless play earns 0 in expectation (±1 at the last step); remembering earns 1
    assert abs(gru_before) < 0.4 and gru_after >= 0.9
    assert mlp_after <= 0.35


def test_recurrent_resume_continues_bitwise(tmp_path):
    def fit(name, max_epochs, ckpt_path=None):
        pl.seed_everything(0)
        model = IPPO(tiny_task(), **tiny_kwargs(actor_model=Gru(hidden_size=8), critic_model=Lstm(hidden_size=8),
                                                sequence_length=5))
        checkpoint = ModelCheckpoint(dirpath=tmp_path / name, save_last=True, every_n_epochs=1,
                                     save_on_train_epoch_end=True)
        trainer = tiny_trainer(tmp_path / name, max_epochs=max_epochs, callbacks=[checkpoint],
                               check_val_every_n_epoch=5)
        trainer.fit(model, ckpt_path=ckpt_path)
        return model

    straight = fit("straight", 3)
    fit("first", 1)
    resumed = fit("resumed", 3, tmp_path / "first" / "last.ckpt")
    for key, value in straight.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[key]), key


def test_recurrent_bad_input_stops_before_training():
    with pytest.raises(ConfigError, match=r"critic_model: Gru is recurrent; off-policy algorithms train recurrent "
                                          r"policies"):
        MADDPG(tiny_task(), critic_model=Gru())
    with pytest.raises(ConfigError, match="use_prioritized_replay_buffer: true is not supported with a recurrent"):
        QMIX(tiny_task(continuous_actions=False), actor_model=Lstm(), use_prioritized_replay_buffer=True)
    with pytest.raises(ConfigError, match=r"burn_in: 8 \+ sequence_length 4 exceeds the episode length max_steps=10"):
        IQL(tiny_task(continuous_actions=False), actor_model=Gru(), sequence_length=4, burn_in=8)
    with pytest.raises(ConfigError, match="burn_in: must be an integer >= 0, got -1"):
        IQL(tiny_task(continuous_actions=False), actor_model=Gru(), burn_in=-1)
    with pytest.raises(ConfigError, match=r"sequence_length: 3 does not divide the 10 steps"):
        MAPPO(tiny_task(), **tiny_kwargs(actor_model=Gru(), sequence_length=3))
    with pytest.raises(ConfigError, match=r"minibatch_size: 5 frames cannot hold one chunk of 10 steps"):
        MAPPO(tiny_task(), **tiny_kwargs(actor_model=Gru(), minibatch_size=5))  # chunks: each env's 10 steps
    with pytest.raises(ConfigError, match="hidden_size"):
        Gru(hidden_size=0)


# ------------------------------------------------------------------------------------------ off-policy
def _iql_memory_run(tmp_path, model_config):
    pl.seed_everything(0)
    model = IQL(CueMemoryTask(), actor_model=model_config, frames_per_batch=256, num_envs=64, n_optimizer_steps=20,
                train_batch_size=64, memory_size=20_000, lr=3e-3, max_frames=256 * 10, evaluation_episodes=64,
                sequence_length=4, exploration_eps_init=0.5, exploration_eps_end=0.05, polyak_tau=0.05)
    trainer = tiny_trainer(tmp_path, max_epochs=-1, check_val_every_n_epoch=10)
    trainer.fit(model)
    return float(trainer.callback_metrics["val/return"])


def test_recurrent_q_learning_trains_on_sampled_sequences_and_remembers(tmp_path):
    assert _iql_memory_run(tmp_path / "gru", Gru(hidden_size=32)) >= 0.9  # a DRQN
    assert _iql_memory_run(tmp_path / "mlp", Mlp(num_cells=[32, 32])) <= 0.35


def test_sequence_slices_stay_in_one_episode_and_burn_in_refreshes_the_state():
    torch.manual_seed(0)
    model = IQL(tiny_task(continuous_actions=False, max_steps=6), actor_model=Gru(hidden_size=8),
                frames_per_batch=48, num_envs=4, n_optimizer_steps=3, train_batch_size=8, memory_size=1000,
                sequence_length=2, burn_in=3, evaluation_episodes=2)
    batches = list(model.loop)
    assert len(batches) == 3 and batches[0].batch_size == (4, 5)  # 8 // 2 slices of burn-in 3 + 2 steps
    sample = batches[0]["agents"]
    episode = sample["collector", "traj_ids"]
    assert (episode == episode[:, :1]).all()  # every slice inside one episode
    with torch.no_grad():  # new weights: the stored states are stale now
        for p in model.policies["agents"].parameters():
            p.add_(0.1 * torch.randn_like(p))
    key = ("agents", "action_value_hidden")
    fresh = model.learners["agents"]._burn_in(sample.clone())
    assert fresh.batch_size == (4, 2)
    state = sample[key][:, 0]
    with torch.no_grad():
        for t in range(3):  # step the current weights through the burn-in steps from the stored state
            step = sample[:, t].clone()
            step.set(key, state)
            state = model.policies["agents"](step)["next", *key]
    torch.testing.assert_close(fresh[key][:, 0], state)
    assert not torch.allclose(fresh[key][:, 0], sample[key][:, 3])


@pytest.mark.parametrize("algorithm", [MADDPG, ISAC])
def test_actor_critic_off_policy_trains_a_recurrent_actor_with_burn_in(tmp_path, algorithm):
    task = tiny_task() if algorithm is MADDPG else tiny_task(continuous_actions=False)
    model = algorithm(task, **ddpg_kwargs(actor_model=Lstm(hidden_size=8), sequence_length=4, burn_in=2))
    before = {k: v.clone() for k, v in model.policies.state_dict().items()}
    tiny_trainer(tmp_path, max_epochs=2).fit(model)
    assert model.frames == 80
    assert any(not torch.equal(v, before[k]) for k, v in model.policies.state_dict().items() if "rnns" in k)
