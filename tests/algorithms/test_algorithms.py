"""MAPPO/IPPO: networks per group, training with a plain Lightning Trainer, hooks for research code."""

from __future__ import annotations

import csv
from typing import ClassVar

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torchrl.modules import MultiAgentMLP

from lit_marl.algorithms import IPPO, MAPPO
from lit_marl.callbacks import MarlCallback
from lit_marl.errors import ConfigError
from tests.helpers.tiny import tiny_kwargs, tiny_task, tiny_trainer


def _metrics(trainer) -> list[dict[str, str]]:
    with open(f"{trainer.logger.log_dir}/metrics.csv") as f:
        return list(csv.DictReader(f))


def _column(rows, name) -> list[float]:
    return [float(r[name]) for r in rows if r.get(name)]


def test_mappo_critic_is_centralised_and_ippo_critic_is_local():
    mappo, ippo = MAPPO(tiny_task(), **tiny_kwargs()), IPPO(tiny_task(), **tiny_kwargs())
    mappo_net, ippo_net = mappo.critics["agents"].module, ippo.critics["agents"].module
    assert isinstance(mappo_net, MultiAgentMLP) and mappo_net.centralized
    assert isinstance(ippo_net, MultiAgentMLP) and not ippo_net.centralized
    # a change in agent 0's observation moves agent 1's value only under the centralised critic
    obs = torch.zeros(1, 3, mappo_net.n_agent_inputs)
    moved = obs.clone()
    moved[0, 0] += 1.0
    assert not torch.allclose(mappo_net(obs)[0, 1], mappo_net(moved)[0, 1])
    assert torch.allclose(ippo_net(obs)[0, 1], ippo_net(moved)[0, 1])


def test_share_policy_params_controls_weight_sharing():
    shared = MAPPO(tiny_task(), **tiny_kwargs(share_policy_params=True))
    separate = MAPPO(tiny_task(), **tiny_kwargs(share_policy_params=False))
    n_shared = sum(p.numel() for p in shared.policies.parameters())
    n_separate = sum(p.numel() for p in separate.policies.parameters())
    assert n_separate == 3 * n_shared  # simple_spread has 3 agents


def test_fit_logs_benchmarl_metrics_and_stops_at_frame_budget(tmp_path):
    pl.seed_everything(0)
    model = MAPPO(tiny_task(), **tiny_kwargs(max_frames=100))  # 40 frames/iteration → 3 iterations
    trainer = tiny_trainer(tmp_path, max_epochs=-1)
    trainer.fit(model)
    assert model.frames == 120 and model.iteration == 3 and trainer.current_epoch == 3
    assert trainer.global_step == 3 * 2 * 2
    rows = _metrics(trainer)
    train_rows = [r for r in rows if r.get("train/agents/loss_objective")]
    assert _column(train_rows, "counters/frames") == [40.0, 80.0, 120.0]
    val_rows = [r for r in rows if r.get("val/return")]
    assert _column(val_rows, "counters/frames") == [40.0, 80.0, 120.0]  # val rows carry the frame count
    for name in ("collection/reward/episode_reward_mean", "collection/agents/reward/episode_reward_mean",
                 "train/agents/loss_objective", "train/agents/loss_critic", "train/agents/actor/grad_norm",
                 "train/agents/critic/grad_norm", "timers/collection_time", "timers/training_time", "val/return",
                 "val/agents/return", "val/episode_len"):
        values = _column(rows, name)
        assert values and all(torch.isfinite(torch.tensor(values))), name
    assert _column(rows, "val/episode_len") == [10.0, 10.0, 10.0]


def test_gradient_clipping_is_per_parameter_group():
    model = MAPPO(tiny_task(), **tiny_kwargs())
    optimizer = model.configure_optimizers()
    names = [g["name"] for g in optimizer.param_groups]
    assert names == ["agents/actor", "agents/critic"]
    for scale, group in zip((100.0, 1e-3), optimizer.param_groups):
        for p in group["params"]:
            p.grad = torch.full_like(p, scale)
    small_before = [p.grad.clone() for p in optimizer.param_groups[1]["params"]]
    model.configure_gradient_clipping(optimizer, gradient_clip_val=1.0, gradient_clip_algorithm="norm")
    actor_norm = torch.nn.utils.get_total_norm([p.grad for p in optimizer.param_groups[0]["params"]])
    assert actor_norm == pytest.approx(1.0, rel=1e-4)
    # the critic's small gradient is untouched: a global clip would have shrunk it too
    for before, p in zip(small_before, optimizer.param_groups[1]["params"]):
        assert torch.equal(before, p.grad)


@pytest.mark.parametrize("algorithm", [MAPPO, IPPO])
def test_discrete_actions_train(tmp_path, algorithm):
    pl.seed_everything(0)
    model = algorithm(tiny_task(continuous_actions=False), **tiny_kwargs())
    before = [p.detach().clone() for p in model.parameters()]
    seen = {}

    class Spy(MarlCallback):
        def on_batch_collected(self, trainer, pl_module, batch):
            seen["action"] = batch.get(("agents", "action"))

    tiny_trainer(tmp_path, max_epochs=1, callbacks=[Spy()]).fit(model)
    assert seen["action"].dtype == torch.long and seen["action"].shape == (4, 10, 3)
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters()))


def test_two_groups_train_together_with_their_own_networks(tmp_path):
    pl.seed_everything(0)
    model = MAPPO(tiny_task("simple_tag", max_steps=10), **tiny_kwargs())
    assert model.groups == ["adversary", "agent"]
    before = {g: [p.detach().clone() for p in model.policies[g].parameters()] for g in model.groups}
    trainer = tiny_trainer(tmp_path, max_epochs=1)
    trainer.fit(model)
    rows = _metrics(trainer)
    for group in model.groups:
        assert _column(rows, f"train/{group}/loss_objective"), group
        assert _column(rows, f"val/{group}/return"), group
        assert any(not torch.equal(b, p) for b, p in zip(before[group], model.policies[group].parameters()))


def test_subclass_adds_a_loss_term_without_copying_the_training_step(tmp_path):
    class RegularisedMAPPO(MAPPO):
        def loss(self, group, batch):
            terms = super().loss(group, batch)
            terms["loss_l2"] = 1e-3 * sum(p.square().sum() for p in self.policies[group].parameters())
            return terms

    pl.seed_everything(0)
    model = RegularisedMAPPO(tiny_task(), **tiny_kwargs())
    trainer = tiny_trainer(tmp_path, max_epochs=1)
    trainer.fit(model)
    l2 = _column(_metrics(trainer), "train/agents/loss_l2")
    assert l2 and l2[0] > 0


def test_callbacks_see_every_batch_and_every_evaluation(tmp_path):
    events = []

    class Recorder(MarlCallback):
        def on_batch_collected(self, trainer, pl_module, batch):
            events.append(("batch", tuple(batch.batch_size)))

        def on_evaluation_end(self, trainer, pl_module, episodes):
            events.append(("eval", sum(e.batch_size[0] for e in episodes), episodes[0][("episode", "mask")].shape))

    pl.seed_everything(0)
    model = MAPPO(tiny_task(), **tiny_kwargs())
    tiny_trainer(tmp_path, max_epochs=2, callbacks=[Recorder()]).fit(model)
    assert events == [("batch", (4, 10)), ("eval", 4, (4, 10))] * 2


def test_evaluation_does_not_change_training(tmp_path):
    def train(check_val_every_n_epoch):
        pl.seed_everything(0)
        # Stochastic evaluation draws from the global RNG, and seeding the evaluation env reseeds VMAS's
        # own (process-wide) generator; balance ends episodes early, so training envs reset mid-batch
        # from that generator. Neither may leak into training.
        task = tiny_task("balance", max_steps=10, n_agents=2)
        model = MAPPO(task, **tiny_kwargs(evaluation_deterministic=False, frames_per_batch=60))  # 15 steps: episodes in flight
        tiny_trainer(tmp_path, max_epochs=2, check_val_every_n_epoch=check_val_every_n_epoch).fit(model)
        return model.state_dict()

    with_eval, without_eval = train(1), train(10)
    for key in with_eval:
        assert torch.equal(with_eval[key], without_eval[key]), key


def test_evaluation_counts_only_steps_of_the_first_episode():
    pl.seed_everything(0)
    model = MAPPO(tiny_task("balance", max_steps=60, n_agents=2), **tiny_kwargs())
    rollout = model.evaluate(seed=3, num_envs=8)
    mask, done = rollout.get(("episode", "mask")), rollout.get(("next", "done")).squeeze(-1)
    assert (~mask).any(), "an untrained policy drops the package before max_steps in some episode"
    for env in range(8):
        first_done = int(done[env].nonzero()[0])
        assert mask[env].sum() == first_done + 1
        assert mask[env, : first_done + 1].all() and not mask[env, first_done + 1 :].any()


def test_load_from_checkpoint_gives_a_working_policy_without_a_trainer(tmp_path):
    pl.seed_everything(0)
    model = MAPPO(tiny_task(), **tiny_kwargs())
    tiny_trainer(tmp_path, max_epochs=1, callbacks=[ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)]).fit(model)
    loaded = MAPPO.load_from_checkpoint(tmp_path / "ckpt" / "last.ckpt")
    for key, value in model.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[key]), key
    assert loaded.frames == 40 and loaded.task.scenario == "simple_spread"
    env = loaded.task.make_env(num_envs=2, seed=0)
    rollout = env.rollout(5, policy=loaded.policy)
    assert rollout.get(("agents", "action")).shape == (2, 5, 3, 2)


def test_algorithm_needing_discrete_actions_refuses_a_continuous_task():
    class DiscreteOnly(MAPPO):
        supports_continuous_actions: ClassVar[bool] = False

    with pytest.raises(ConfigError, match="continuous_actions"):
        DiscreteOnly(tiny_task(), **tiny_kwargs())


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"frames_per_batch": 42}, "frames_per_batch"),
        ({"minibatch_size": 400}, "minibatch_size"),
        ({"lr": 0.0}, "lr"),
        ({"lr": -1e-3}, "lr"),
        ({"max_frames": 0}, "max_frames"),
        ({"num_envs": 0}, "num_envs"),
        ({"gamma": 1.5}, "gamma"),
        ({"clip_epsilon": 0}, "clip_epsilon"),
        ({"loss_critic_type": "l3"}, "loss_critic_type"),
        ({"scale_mapping": "cube"}, "scale_mapping"),
        ({"test_videos": 101}, "test_videos"),
        ({"sequence_length": 0}, "sequence_length"),
        ({"sampling_device": "gpu"}, "sampling_device"),
    ],
)
def test_bad_argument_names_field_and_value(overrides, field, monkeypatch):
    def no_env(*args, **kwargs):
        pytest.fail("an environment was built before the argument was checked")  # passes Task.probing

    monkeypatch.setattr("lit_marl.envs.vmas.BatchedResetVmasEnv", no_env)
    with pytest.raises(ConfigError, match=field) as err:
        MAPPO(tiny_task(), **tiny_kwargs(**overrides))
    assert str(next(iter(overrides.values()))) in str(err.value)


class _EnvRequested(Exception):
    """Raised by the recording task below instead of building an env on a device this machine lacks."""


@pytest.mark.parametrize("sampling_device, expected", [(None, "cpu"), ("cpu", "cpu"), ("cuda:0", "cuda:0")])
def test_sampling_device_is_where_collection_and_evaluation_ask_for_their_envs(monkeypatch, sampling_device, expected):
    """The device every env is requested on (Task.make_env's ``device``) is ``sampling_device``, else the module's:
    for training collection, for evaluation and for ``make_env``. ``cuda:0`` is made to pass the device check on a
    machine without CUDA; the recording task stops at the request, so nothing is built there."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    task = tiny_task()
    model = MAPPO(task, **tiny_kwargs(sampling_device=sampling_device))
    requested = []

    def make_env(num_envs, seed=None, device="cpu", **kwargs):
        requested.append(torch.device(device))
        raise _EnvRequested

    monkeypatch.setattr(task, "make_env", make_env)
    for ask in (lambda: model.collection.make_env(2), model.collection.get_sampler, lambda: model.evaluate(seed=0, num_envs=2)):
        with pytest.raises(_EnvRequested):
            ask()
    assert requested == [torch.device(expected)] * 3


def test_a_cuda_sampling_device_is_refused_by_name_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ConfigError, match=r"sampling_device: 'cuda:0' but this machine has 0 CUDA device\(s\)"):
        MAPPO(tiny_task(), **tiny_kwargs(sampling_device="cuda:0"))


