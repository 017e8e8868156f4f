"""MADDPG/IDDPG: replay buffers, exploration annealing, target networks, resume with buffers, bad input."""

from __future__ import annotations

import math

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from tensordict import TensorDict

from lit_marl.algorithms import IDDPG, ISAC, MADDPG, MASAC
from lit_marl.callbacks import MarlCallback
from lit_marl.checkpoint import AtomicCheckpointIO
from lit_marl.errors import ConfigError
from tests.helpers.tiny import ddpg_kwargs, tiny_task, tiny_trainer


def _target_and_online(model, group="agents"):
    loss = model.losses[group]
    return loss.target_value_network_params.flatten_keys(), loss.value_network_params.flatten_keys()


@pytest.mark.parametrize("algorithm", [MADDPG, IDDPG])
def test_fit_fills_the_buffer_anneals_noise_and_moves_targets(tmp_path, algorithm):
    pl.seed_everything(0)
    model = algorithm(tiny_task(), **ddpg_kwargs())
    target_before, _ = _target_and_online(model)
    target_before = target_before.clone()
    trainer = tiny_trainer(tmp_path, max_epochs=2)
    trainer.fit(model)
    assert len(model.replay_buffers()["agents"]) == 80 and trainer.global_step == 8
    # sigma anneals linearly from 0.8 to 0.01 over max_frames // 3 = 133 frames
    assert model.explorations["agents"].sigma.item() == pytest.approx(0.8 - 0.79 * 80 / 133, abs=1e-5)
    target_after, online = _target_and_online(model)
    for key in target_after.keys():
        assert not torch.equal(target_after[key], target_before[key])  # moved
        assert not torch.equal(target_after[key], online[key])  # but only part way (soft)
    metrics = trainer.callback_metrics
    for name in ("train/agents/loss_actor", "train/agents/loss_value", "train/agents/critic/grad_norm",
                 "collection/reward/episode_reward_mean", "val/return"):
        assert torch.isfinite(metrics[name]), name


def test_maddpg_critic_is_centralised_and_iddpg_critic_is_local():
    torch.manual_seed(0)
    maddpg, iddpg = MADDPG(tiny_task(), **ddpg_kwargs()), IDDPG(tiny_task(), **ddpg_kwargs())
    specs = maddpg.task.specs
    n, obs_dim = specs.n_agents("agents"), specs.observation_spec["agents", "observation"].shape[-1]
    inputs = TensorDict({("agents", "observation"): torch.randn(5, n, obs_dim),
                         ("agents", "action"): torch.rand(5, n, specs.group_action_spec("agents").shape[-1])}, [5])
    moved = inputs.clone()
    moved["agents", "observation"][:, 1] += 1.0  # only agent 1 sees something else

    def q_of_agent_0(model, td):
        return model.critics["agents"](td.clone())["agents", "state_action_value"][:, 0]

    assert not torch.allclose(q_of_agent_0(maddpg, inputs), q_of_agent_0(maddpg, moved))  # sees all agents
    torch.testing.assert_close(q_of_agent_0(iddpg, inputs), q_of_agent_0(iddpg, moved))  # sees its own only


def test_soft_update_is_polyak_averaging():
    model = MADDPG(tiny_task(), **ddpg_kwargs(polyak_tau=0.25))
    target, online = _target_and_online(model)
    with torch.no_grad():
        for value in online.values():
            value.add_(1.0)
    before = target.clone()
    model.learners["agents"].target_updater.step()
    for key in target.keys():
        torch.testing.assert_close(target[key], 0.75 * before[key] + 0.25 * online[key])


def test_hard_update_copies_every_n_steps():
    model = MADDPG(tiny_task(), **ddpg_kwargs(soft_target_update=False, hard_target_update_frequency=3))
    target, online = _target_and_online(model)
    with torch.no_grad():
        for value in online.values():
            value.add_(1.0)
    before = target.clone()
    for _ in range(3):
        model.learners["agents"].target_updater.step()
        assert all(torch.equal(target[k], before[k]) for k in target.keys())
    model.learners["agents"].target_updater.step()
    assert all(torch.equal(target[k], online[k]) for k in target.keys())


def test_init_random_frames_act_randomly_first(tmp_path):
    seen = []

    class Spy(MarlCallback):
        def on_batch_collected(self, trainer, pl_module, batch):
            seen.append(pl_module.learners["agents"]._random_switch.active)

    pl.seed_everything(0)
    model = MADDPG(tiny_task(), **ddpg_kwargs(init_random_frames=80))
    tiny_trainer(tmp_path, max_epochs=3, callbacks=[Spy()]).fit(model)
    assert seen == [True, True, False]


def _fit(tmp_path, name, max_epochs, ckpt_path=None):
    pl.seed_everything(0)
    model = MADDPG(tiny_task(), **ddpg_kwargs())
    checkpoint = ModelCheckpoint(dirpath=tmp_path / name, save_last=True, every_n_epochs=1,
                                 save_on_train_epoch_end=True)
    trainer = tiny_trainer(tmp_path / name, max_epochs=max_epochs, callbacks=[checkpoint], check_val_every_n_epoch=5)
    trainer.fit(model, ckpt_path=ckpt_path)
    return model, trainer


def test_resume_restores_buffer_targets_noise_and_continues_exactly(tmp_path):
    first, _ = _fit(tmp_path, "first", max_epochs=2)
    # the buffers live in a sidecar file beside the checkpoint; both load with weights_only=True
    checkpoint = torch.load(tmp_path / "first" / "last.ckpt", weights_only=True)
    token = checkpoint["lit_marl"]["replay_buffers_sidecar"]
    sidecar = tmp_path / "first" / f"last.ckpt.buffers-{token}"
    assert "replay_buffers" not in checkpoint["lit_marl"] and "replay_buffers_at" not in checkpoint["lit_marl"]
    saved = torch.load(sidecar, weights_only=True)["agents"]
    assert saved["length"] == 80 and len(saved["data"]["agents"]["observation"]) == 80  # the filled part only
    # ...on disk too: torch.save writes a view's whole storage, so a sliced 1000-transition buffer would be
    # ~12x larger than its 80 filled transitions
    filled_bytes = sum(t.numel() * t.element_size() for t in TensorDict(saved["data"], [80]).values(True, True))
    assert sidecar.stat().st_size < 2 * filled_bytes + 100_000

    straight, straight_trainer = _fit(tmp_path, "straight", max_epochs=4)
    resumed, resumed_trainer = _fit(tmp_path, "resumed", max_epochs=4, ckpt_path=tmp_path / "first" / "last.ckpt")
    assert resumed.frames == straight.frames == 160 and resumed_trainer.global_step == straight_trainer.global_step
    assert torch.equal(resumed.explorations["agents"].sigma, straight.explorations["agents"].sigma)
    straight_buffer, resumed_buffer = straight.replay_buffers()["agents"], resumed.replay_buffers()["agents"]
    assert len(straight_buffer) == len(resumed_buffer) == 160
    assert (straight_buffer.storage[:160].exclude("index") == resumed_buffer.storage[:160].exclude("index")).all()
    for key, value in straight.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[key]), key


def test_resume_restores_the_buffer_contents(tmp_path):
    first, _ = _fit(tmp_path, "first", max_epochs=2)
    restored = MADDPG(tiny_task(), **ddpg_kwargs())
    restored.on_load_checkpoint(AtomicCheckpointIO().load_checkpoint(tmp_path / "first" / "last.ckpt"))
    original, loaded = first.replay_buffers()["agents"], restored.replay_buffers()["agents"]
    assert len(loaded) == 80 and (original.storage[:80].exclude("index") == loaded.storage[:80].exclude("index")).all()


def test_continuous_only_algorithm_on_a_discrete_task_names_what_fits():
    with pytest.raises(ConfigError, match="MADDPG needs continuous actions.*continuous_actions=true") as err:
        MADDPG(tiny_task(continuous_actions=False), **ddpg_kwargs())
    assert str(err.value).endswith("algorithm for discrete actions: HAPPO, HATRPO, IPPO, IQL, ISAC, MAPPO, MASAC, QMIX, VDN")


@pytest.mark.parametrize(
    ("overrides", "fragments"),
    [
        ({"train_batch_size": 2000}, ["train_batch_size", "2000", "memory_size=1000"]),
        ({"init_random_frames": 50}, ["init_random_frames", "50", "frames_per_batch=40"]),
        ({"polyak_tau": 0.0}, ["polyak_tau", "(0, 1]"]),
        ({"polyak_tau": 1.5}, ["polyak_tau", "1.5"]),
        ({"buffer_device": "gpu"}, ["buffer_device", "'gpu'", "cpu, train, disk"]),
        ({"loss_function": "huber"}, ["loss_function", "huber"]),
    ],
)
def test_bad_off_policy_argument_names_field(overrides, fragments, monkeypatch):
    def no_env(*args, **kwargs):
        pytest.fail("an environment was built before the argument was checked")  # passes Task.probing

    monkeypatch.setattr("lit_marl.envs.vmas.BatchedResetVmasEnv", no_env)
    with pytest.raises(ConfigError) as err:
        MADDPG(tiny_task(), **ddpg_kwargs(**overrides))
    for fragment in fragments:
        assert fragment in str(err.value)


@pytest.mark.parametrize("algorithm", [MASAC, ISAC])
@pytest.mark.parametrize("continuous", [True, False])
def test_sac_trains_actor_twin_critics_and_temperature(tmp_path, algorithm, continuous):
    pl.seed_everything(0)
    model = algorithm(tiny_task(continuous_actions=continuous), **ddpg_kwargs())
    loss = model.losses["agents"]
    q_before = loss.qvalue_network_params.clone()
    alpha_before = loss.log_alpha.detach().clone()
    assert q_before.batch_size[0] == 2  # twin Q-functions, initialised independently
    first = next(iter(q_before.values(True, True)))
    assert not torch.equal(first[0], first[1])
    trainer = tiny_trainer(tmp_path, max_epochs=2)
    trainer.fit(model)
    assert all(not torch.equal(a, b) for a, b in zip(q_before.values(True, True), loss.qvalue_network_params.values(True, True)))
    assert not torch.equal(alpha_before, loss.log_alpha.detach())
    expected_entropy = -2.0 if continuous else 0.2 * math.log(9)
    assert loss.target_entropy.item() == pytest.approx(expected_entropy, rel=1e-5)
    for name in ("train/agents/loss_actor", "train/agents/loss_qvalue", "train/agents/loss_alpha", "val/return"):
        assert torch.isfinite(trainer.callback_metrics[name]), name
    assert [g["name"] for g in trainer.optimizers[0].param_groups] == ["agents/actor", "agents/critic", "agents/alpha"]


def test_discrete_masac_q_is_centralised_per_agent_and_isac_q_is_local():
    """Discrete MASAC (no global state): one network reads all agents' observations and values each agent's actions
    apart (BenchMARL's coupled critic, n_agents × n_actions outputs). It was a centralised MultiAgentMLP with shared
    parameters, which gave every agent the same values (found by comparing with BenchMARL)."""
    from tensordict import TensorDict

    torch.manual_seed(0)
    masac = MASAC(tiny_task(continuous_actions=False), **ddpg_kwargs())
    isac = ISAC(tiny_task(continuous_actions=False), **ddpg_kwargs())
    n_agents, n_obs = masac.task.specs.observation_spec["agents", "observation"].shape
    obs = torch.randn(5, n_agents, n_obs)
    for model, centralised in ((masac, True), (isac, False)):
        q = model.losses["agents"].qvalue_network
        values = q(TensorDict({("agents", "observation"): obs}, [5])).get(("agents", "action_value"))
        assert values.shape == (5, n_agents, 9)
        assert not torch.allclose(values[:, 0], values[:, 1])  # each agent valued apart
        moved = obs.clone()
        moved[:, 1] += 1.0  # another agent's observation
        again = q(TensorDict({("agents", "observation"): moved}, [5])).get(("agents", "action_value"))
        assert torch.allclose(values[:, 0], again[:, 0]) is not centralised


def test_fixed_alpha_is_not_trained(tmp_path):
    pl.seed_everything(0)
    model = MASAC(tiny_task(), **ddpg_kwargs(alpha_init=0.3, fixed_alpha=True))
    tiny_trainer(tmp_path, max_epochs=1).fit(model)
    assert model.losses["agents"].log_alpha.exp().item() == pytest.approx(0.3)


def test_prioritized_sampler_draws_by_priority_and_weights_by_importance():
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

    from lit_marl.data.replay import TensorPrioritizedSampler

    torch.manual_seed(0)
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(100), sampler=TensorPrioritizedSampler(100, 1.0, 1.0),
                                    priority_key="td_error")
    buffer.extend(TensorDict({"x": torch.arange(4.0)}, batch_size=[4]))
    buffer.update_priority(torch.arange(4), torch.tensor([1.0, 1.0, 1.0, 7.0]))
    sample = buffer.sample(20_000)
    share = (sample["x"] == 3).float().mean().item()
    assert share == pytest.approx(0.7, abs=0.02)
    weights = sample["priority_weight"]
    assert weights[sample["x"] == 3].unique().item() == pytest.approx(1 / 7, rel=1e-4)
    assert weights[sample["x"] == 0].unique().item() == pytest.approx(1.0)
    # new transitions get the largest priority seen so far
    buffer.extend(TensorDict({"x": torch.tensor([4.0])}, batch_size=[1]))
    assert buffer.sampler._priority[4] == buffer.sampler._priority[3]


@pytest.mark.parametrize("algorithm", [MADDPG, MASAC])
def test_prioritized_replay_updates_priorities_and_resumes_them(tmp_path, algorithm):
    pl.seed_everything(0)
    model = algorithm(tiny_task(), **ddpg_kwargs(use_prioritized_replay_buffer=True))
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    tiny_trainer(tmp_path, max_epochs=2, callbacks=[checkpoint]).fit(model)
    priority = model.replay_buffers()["agents"].sampler._priority[:80]
    assert priority.unique().numel() > 10  # TD errors replaced the uniform initial priority
    restored = algorithm(tiny_task(), **ddpg_kwargs(use_prioritized_replay_buffer=True))
    restored.on_load_checkpoint(AtomicCheckpointIO().load_checkpoint(tmp_path / "ckpt" / "last.ckpt"))
    assert torch.equal(restored.replay_buffers()["agents"].sampler._priority, model.replay_buffers()["agents"].sampler._priority)


def test_sidecar_files_follow_their_checkpoints(tmp_path):
    pl.seed_everything(0)
    model = MADDPG(tiny_task(), **ddpg_kwargs())
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True, every_n_epochs=1, save_top_k=2,
                                 monitor="counters/frames", mode="max", save_on_train_epoch_end=True,
                                 filename="frames_{counters/frames:.0f}", auto_insert_metric_name=False)
    tiny_trainer(tmp_path, max_epochs=4, callbacks=[checkpoint]).fit(model)
    names = sorted(p.name.split(".buffers-")[0] + (".buffers" if ".buffers-" in p.name else "")
                   for p in (tmp_path / "ckpt").iterdir())
    # the two most recent checkpoints and last.ckpt, each with exactly one sidecar; older ones removed
    assert names == ["frames_120.ckpt", "frames_120.ckpt.buffers", "frames_160.ckpt", "frames_160.ckpt.buffers",
                     "last.ckpt", "last.ckpt.buffers"]
    loaded = AtomicCheckpointIO().load_checkpoint(tmp_path / "ckpt" / "frames_120.ckpt")
    assert loaded["lit_marl"]["replay_buffers"]["agents"]["length"] == 120
    # last.ckpt was saved with frames_160.ckpt: its replay is the same file under a second name, not a copy
    sidecar = {p.name.split(".buffers-")[0]: p.stat() for p in (tmp_path / "ckpt").glob("*.buffers-*")}
    assert sidecar["last.ckpt"].st_ino == sidecar["frames_160.ckpt"].st_ino != sidecar["frames_120.ckpt"].st_ino
    assert sidecar["last.ckpt"].st_nlink == 2 and sidecar["frames_120.ckpt"].st_nlink == 1
    # ...and each name outlives the other: removing the periodic checkpoint leaves last.ckpt whole
    AtomicCheckpointIO().remove_checkpoint(tmp_path / "ckpt" / "frames_160.ckpt")
    last = AtomicCheckpointIO().load_checkpoint(tmp_path / "ckpt" / "last.ckpt")
    assert last["lit_marl"]["replay_buffers"]["agents"]["length"] == 160


def test_disk_buffer_lives_in_the_run_folder(tmp_path):
    pl.seed_everything(0)
    model = MADDPG(tiny_task(), **ddpg_kwargs(buffer_device="disk"))
    trainer = tiny_trainer(tmp_path, max_epochs=1)
    trainer.fit(model)
    folder = tmp_path / "run" / "version_0" / "replay_buffers" / "agents"
    assert trainer.log_dir == str(tmp_path / "run" / "version_0")
    assert any(folder.rglob("*.memmap")), list(folder.rglob("*"))
    assert len(model.replay_buffers()["agents"]) == 40


def test_the_actors_tanh_head_maps_like_torchrls_tanh_module():
    from torchrl.data import Bounded
    from torchrl.modules import TanhModule

    from lit_marl.algorithms.common import TanhBounded

    spec = Bounded(low=torch.tensor([-1.0, 0.0]), high=torch.tensor([2.0, 5.0]), shape=(2,))
    x = 3 * torch.randn(64, 2)
    expected = TanhModule(in_keys=["p"], out_keys=["a"], spec=spec)(TensorDict({"p": x}, [64]))["a"]
    torch.testing.assert_close(TanhBounded(spec.space.low, spec.space.high)(x), expected)
    model = MADDPG(tiny_task(), **ddpg_kwargs())
    td = model.task.make_env(4, seed=0).reset()
    action = model.policies["agents"](td)["agents", "action"]
    low, high = model.task.specs.group_action_spec("agents").space.low, model.task.specs.group_action_spec("agents").space.high
    assert ((action >= low) & (action <= high)).all()
