"""IQL, VDN, QMIX: epsilon-greedy exploration, mixers, target networks, bad input."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from tensordict.utils import unravel_key
from torchrl.modules import QMixer

from lit_marl.algorithms import IQL, MAPPO, QMIX, VDN
from lit_marl.algorithms.q_learning import RunningMoments
from lit_marl.errors import ConfigError
from lit_marl.models import Mlp
from tests.helpers.tiny import tiny_task, tiny_trainer


def q_kwargs(**overrides) -> dict:
    kwargs = dict(actor_model=Mlp([32, 32]), frames_per_batch=40, num_envs=4, n_optimizer_steps=4, train_batch_size=16,
                  memory_size=1000, max_frames=400, evaluation_episodes=4, lr=1e-3)
    kwargs.update(overrides)
    return kwargs


@pytest.mark.parametrize("algorithm", [IQL, VDN, QMIX])
def test_fit_anneals_epsilon_trains_and_moves_targets(tmp_path, algorithm):
    pl.seed_everything(0)
    model = algorithm(tiny_task(continuous_actions=False), **q_kwargs())
    before = [p.detach().clone() for p in model.parameters()]
    target_name = "target_value_network_params" if algorithm is IQL else "target_local_value_network_params"
    target_before = getattr(model.losses["agents"], target_name).clone()
    trainer = tiny_trainer(tmp_path, max_epochs=2)
    trainer.fit(model)
    assert model.explorations["agents"].eps.item() == pytest.approx(0.8 - 0.79 * 80 / 133, abs=1e-5)
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters()))
    target_after = getattr(model.losses["agents"], target_name)
    assert any(not torch.equal(target_before[k], target_after[k]) for k in target_after.keys(True, True))
    assert torch.isfinite(trainer.callback_metrics["train/agents/loss"])
    expected_groups = ["agents/actor"] + (["agents/mixer"] if algorithm is QMIX else [])  # VDN's sum has no weights
    assert [g["name"] for g in trainer.optimizers[0].param_groups] == expected_groups


def test_evaluation_acts_greedily():
    model = IQL(tiny_task(continuous_actions=False), **q_kwargs())
    rollout = model.evaluate(seed=0, num_envs=3)
    greedy = rollout.get(("agents", "action_value")).argmax(-1)
    assert torch.equal(rollout.get(("agents", "action")), greedy)


def test_vdn_team_value_is_the_sum_of_agent_values():
    model = VDN(tiny_task(continuous_actions=False), **q_kwargs())
    mixer = model.losses["agents"].mixer_network
    td = model.task.make_env(num_envs=5, seed=0).reset()
    td = model.policy(td)
    mixed = mixer(td.clone()).get(("agents_team", "global_value"))
    torch.testing.assert_close(mixed, td.get(("agents", "chosen_action_value")).sum(-2))


def test_qmix_mixer_is_monotonic_in_every_agent_value():
    torch.manual_seed(0)
    mixer = QMixer(state_shape=(3, 14), mixing_embed_dim=32, n_agents=3, device="cpu")
    values = torch.randn(256, 3, 1)
    state = torch.randn(256, 3, 14)
    base = mixer(values, state)
    for agent in range(3):
        raised = values.clone()
        raised[:, agent] += torch.rand(256, 1) + 1e-3
        assert (mixer(raised, state) >= base - 1e-6).all()


def test_qmix_conditions_on_the_group_observations_without_a_state():
    model = QMIX(tiny_task(continuous_actions=False), **q_kwargs())
    assert model.losses["agents"].mixer_network.in_keys == [("agents", "chosen_action_value"), ("agents", "observation")]


def test_value_based_algorithm_refuses_continuous_actions_and_names_what_fits():
    with pytest.raises(ConfigError, match="QMIX needs discrete actions") as err:
        QMIX(tiny_task(), **q_kwargs())
    assert str(err.value).endswith(
        "algorithm for continuous actions: HAPPO, HASAC, HATRPO, IDDPG, IPPO, ISAC, MADDPG, MAPPO, MASAC")
    assert MAPPO.supports_continuous_actions


def test_bad_q_learning_argument_names_field():
    with pytest.raises(ConfigError, match="mixing_embed_dim: must be a positive integer, got 0"):
        QMIX(tiny_task(continuous_actions=False), **q_kwargs(mixing_embed_dim=0))


@pytest.mark.learning  # ~40 s each on two cores: CI runs it after the default suite
@pytest.mark.parametrize("algorithm", [IQL, VDN, QMIX])
def test_value_based_algorithms_learn_navigation(algorithm):
    """VMAS navigation, discrete: standing still (action 0) scores exactly 0 (the reward is the change of distance to
    the goal) and the untrained greedy policy -2.83, so the rise is measured from the better of the two
    (tests/helpers/trivial.py): a Q-network collapsed onto "stay" gains nothing here. The untrained policy is also what
    a frozen one scores: the evaluation episodes are seeded.

    Measured (seed 0, 54k frames, 2026-12-07): IQL -2.83 -> 1.57, VDN -2.83 -> 1.46, QMIX -2.83 -> 0.93: +1.57, +1.46,
    +0.93 above doing nothing, against a margin of 0.5. QMIX on seeds 0 / 1 / 2 along the way: -0.02 / 0.36 / 1.11
    after 7 iterations, -0.33 / 0.95 / 1.09 after 13, and seed 1 1.67 after 18: seed 0's last iterations decide."""
    from lit_marl.envs import VmasTask
    from tests.helpers.trivial import do_nothing_return, mean_return

    pl.seed_everything(0)
    task = VmasTask("navigation", max_steps=50, continuous_actions=False, n_agents=2)
    model = algorithm(task, actor_model=Mlp([64, 64]), frames_per_batch=3000, num_envs=60, n_optimizer_steps=150,
                      train_batch_size=256, memory_size=100_000, lr=3e-4, max_frames=54_000,
                      exploration_anneal_frames=27_000)
    before, nothing = mean_return(model), do_nothing_return(model)
    pl.Trainer(max_epochs=-1, gradient_clip_val=5.0, logger=False, enable_checkpointing=False, enable_progress_bar=False,
               enable_model_summary=False, limit_val_batches=0).fit(model)
    after = mean_return(model)
    print(f"{algorithm.__name__}: mean evaluation return {before:.2f} -> {after:.2f} after {model.frames} frames "
          f"(doing nothing: {nothing:.2f})")
    assert nothing == 0.0  # what makes this task a test of learning: no reward for standing still
    assert after - max(before, nothing) >= 0.5


def test_qmix_mixer_reads_the_global_state_where_the_task_has_one():
    from tests.algorithms.test_global_state import SpreadWithState

    task = SpreadWithState("simple_spread", max_steps=10, continuous_actions=False)
    assert QMIX(task, **q_kwargs()).losses["agents"].mixer_network.in_keys[1] == "state"
    forced = QMIX(task, **q_kwargs(mixer_input="observations"))
    assert forced.losses["agents"].mixer_network.in_keys[1] == ("agents", "observation")
    with pytest.raises(ConfigError, match="mixer_input: 'state' but the task 'vmas/simple_spread' has no global state"):
        QMIX(tiny_task(continuous_actions=False), **q_kwargs(mixer_input="state"))


@pytest.mark.parametrize("settings", [{}, {"standardise_rewards": True},
                                      {"sample_episodes": True, "train_batch_size": 4, "memory_size": 10}],
                         ids=["plain", "standardise_rewards", "sample_episodes"])
def test_qmix_resume_continues_exactly(tmp_path, settings):
    from lightning.pytorch.callbacks import ModelCheckpoint

    def fit(name, max_epochs, ckpt_path=None):
        pl.seed_everything(0)
        model = QMIX(tiny_task(continuous_actions=False), **q_kwargs(**settings))
        checkpoint = ModelCheckpoint(dirpath=tmp_path / name, save_last=True, every_n_epochs=1,
                                     save_on_train_epoch_end=True)
        tiny_trainer(tmp_path / name, max_epochs=max_epochs, callbacks=[checkpoint],
                     check_val_every_n_epoch=5).fit(model, ckpt_path=ckpt_path)
        return model

    fit("first", 2)
    straight, resumed = fit("straight", 4), fit("resumed", 4, tmp_path / "first" / "last.ckpt")
    assert resumed.frames == straight.frames == 160
    assert torch.equal(resumed.explorations["agents"].eps, straight.explorations["agents"].eps)
    assert len(resumed.replay_buffers()["agents"]) == 160
    if "standardise_rewards" in settings:  # the running moments came through the checkpoint: 4 x 4 steps x 16 rewards
        assert resumed.learners["agents"].reward_statistics.count.item() == pytest.approx(4 * 4 * 16 + 1e-4)
    if "sample_episodes" in settings:  # the episode numbers too: 4 iterations x 4 envs' 10-step episodes
        samplers = [run.replay_buffers()["agents"].sampler for run in (straight, resumed)]
        assert samplers[0].complete_episodes().tolist() == samplers[1].complete_episodes().tolist() == list(range(16))
    for key, value in straight.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[key]), key


def test_qmix_clips_the_q_network_and_the_mixer_by_their_joint_norm():
    """BenchMARL's QMIX optimises ``loss.parameters()`` (Q-network and mixer) as one group and clips their joint
    gradient norm; clipping each part alone to 5 left a joint norm of up to 7.07 (found by comparing with BenchMARL)."""
    model = QMIX(tiny_task(continuous_actions=False), **q_kwargs())
    optimizer = model.configure_optimizers()
    assert [g["name"] for g in optimizer.param_groups] == ["agents/actor", "agents/mixer"]
    parts = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            p.grad = torch.ones_like(p)
        parts[group["name"]] = group["params"]
        scale = 4.0 / torch.nn.utils.get_total_norm([p.grad for p in group["params"]])
        for p in group["params"]:
            p.grad.mul_(scale)  # each part's norm is 4: below 5 alone, 5.66 together
    model.configure_gradient_clipping(optimizer, gradient_clip_val=5.0, gradient_clip_algorithm="norm")
    every = [p.grad for g in optimizer.param_groups for p in g["params"]]
    assert torch.nn.utils.get_total_norm(every).item() == pytest.approx(5.0, rel=1e-5)
    for params in parts.values():  # scaled alike: the ratio of the parts is kept
        assert torch.nn.utils.get_total_norm([p.grad for p in params]).item() == pytest.approx(
            4.0 * 5.0 / (4.0 * 2 ** 0.5), rel=1e-5)
    assert "train/agents/loss/grad_norm" in model._epoch_metrics


def _sampled_minibatch(model, group="agents"):
    """One collected batch through the run's processing, and a replay-style minibatch of the group's part of it."""
    env = model.task.make_env(num_envs=4, seed=0)
    with torch.no_grad():
        batch = env.rollout(10, model.policy, break_when_any_done=False)
    batch = model.learners[group].process_batch(batch)
    return model.learners[group].replay_frames(batch)


@pytest.mark.parametrize("algorithm", [IQL, QMIX])
def test_standardise_rewards_trains_on_standardised_rewards_and_keeps_the_collected_ones(algorithm):
    """EPyMARL's standardise_rewards: the loss sees (r - mean) / std of the running moments, updated with the
    minibatch first; the minibatch holds the collected rewards again afterwards, with the loss's TD errors."""
    pl.seed_everything(0)
    plain = algorithm(tiny_task(continuous_actions=False), **q_kwargs())
    pl.seed_everything(0)
    standardised = algorithm(tiny_task(continuous_actions=False), **q_kwargs(standardise_rewards=True))
    learner = standardised.learners["agents"]
    reward_key = unravel_key(("next", learner.objective.tensor_keys.reward))
    minibatch = _sampled_minibatch(plain)
    minibatch.set(reward_key, torch.rand_like(minibatch.get(reward_key)) * 3 + 1)  # a mean and spread to remove
    collected = minibatch.get(reward_key).clone()

    terms = learner.loss(minibatch)

    assert torch.equal(minibatch.get(reward_key), collected)  # put back
    priority = ("agents_team", "td_error") if algorithm is QMIX else ("agents", "td_error")
    assert priority in minibatch.keys(True)  # the loss wrote into the minibatch it was given
    moments = learner.reward_statistics
    values = collected.double().reshape(-1)
    n, prior = values.numel(), 1e-4
    expected_mean = values.mean() * n / (n + prior)
    assert moments.mean.item() == pytest.approx(expected_mean.item(), rel=1e-9)
    assert moments.count.item() == pytest.approx(n + prior)
    by_hand = minibatch.clone()
    by_hand.set(reward_key, ((collected - moments.mean) / moments.var.sqrt()).float())
    expected = plain.learners["agents"].loss(by_hand)
    torch.testing.assert_close(terms["loss"], expected["loss"], rtol=1e-6, atol=1e-6)
    unstandardised = plain.learners["agents"].loss(minibatch.clone())
    assert not torch.allclose(terms["loss"], unstandardised["loss"])  # it did change what the loss trains on


def test_running_moments_merge_batches_as_one_and_live_in_the_state_dict():
    torch.manual_seed(0)
    moments = RunningMoments(prior_count=1e-12)
    batches = [torch.randn(n, 2) * 3 + 2 for n in (5, 50, 7)]
    for batch in batches:
        moments.update(batch)
    every = torch.cat([b.reshape(-1) for b in batches]).double()
    assert moments.mean.item() == pytest.approx(every.mean().item(), rel=1e-9)
    assert moments.var.item() == pytest.approx(every.var(unbiased=False).item(), rel=1e-9)
    assert moments.count.item() == pytest.approx(124)
    model = QMIX(tiny_task(continuous_actions=False), **q_kwargs(standardise_rewards=True))
    assert {"learners.agents.reward_statistics.mean", "learners.agents.reward_statistics.var",
            "learners.agents.reward_statistics.count"} <= set(model.state_dict())
    assert not any("reward_statistics" in k for k in QMIX(tiny_task(continuous_actions=False),
                                                          **q_kwargs()).state_dict())


def test_qmix_two_layer_hypernetworks_as_epymarl():
    from lit_marl.algorithms.q_learning import HypernetQMixer

    model = QMIX(tiny_task(continuous_actions=False), **q_kwargs(hypernet_layers=2, hypernet_embed=16))
    mixer = model.losses["agents"].mixer_network.module
    assert isinstance(mixer, HypernetQMixer)
    for hypernet, out in ((mixer.hyper_w_1, 32 * 3), (mixer.hyper_w_final, 32)):
        assert [type(m) for m in hypernet] == [torch.nn.Linear, torch.nn.ReLU, torch.nn.Linear]
        assert (hypernet[0].out_features, hypernet[2].in_features, hypernet[2].out_features) == (16, 16, out)
    # the mixer's weights are still what the optimizer steps, and the mixing stays monotonic
    optimizer = model.configure_optimizers()
    mixer_params = {id(p) for g in optimizer.param_groups if g["name"] == "agents/mixer" for p in g["params"]}
    assert {id(p) for p in mixer.hyper_w_1.parameters()} <= mixer_params
    torch.manual_seed(0)
    values, state = torch.randn(256, 3, 1), torch.randn(256, 3, mixer.state_dim // 3)
    base = mixer(values, state)
    for agent in range(3):
        raised = values.clone()
        raised[:, agent] += torch.rand(256, 1) + 1e-3
        assert (mixer(raised, state) >= base - 1e-6).all()
    # the default is torchrl's one-layer mixer, parameter for parameter
    default = QMIX(tiny_task(continuous_actions=False), **q_kwargs()).losses["agents"].mixer_network.module
    assert isinstance(default.hyper_w_1, torch.nn.Linear) and isinstance(default.hyper_w_final, torch.nn.Linear)
    assert [n for n, _ in default.named_parameters()] == [n for n, _ in QMixer((3, 1), 32, 3, "cpu").named_parameters()]


@pytest.mark.parametrize("algorithm", [IQL, VDN])
def test_hypernetwork_settings_are_refused_without_qmix(algorithm):
    with pytest.raises(ConfigError, match=r"hypernet_layers/hypernet_embed: QMIX's mixer settings.*"
                                          + ("None" if algorithm is IQL else "'vdn'")):
        algorithm(tiny_task(continuous_actions=False), **q_kwargs(hypernet_layers=2))
    with pytest.raises(ConfigError, match=r"hypernet_layers: 3 is not one of 1, 2"):
        QMIX(tiny_task(continuous_actions=False), **q_kwargs(hypernet_layers=3))


@pytest.mark.parametrize("algorithm", [VDN, QMIX])
def test_double_q_mixed_target_values_the_online_greedy_actions_with_the_target_networks(algorithm):
    """EPyMARL's double_q for the mixers: the TD target is r + gamma (1 - terminated) mix_target(Q_target(s', a*), s')
    with a* the online Q-network's greedy actions; torchrl's QMixerLoss alone takes the target network's own argmax."""
    pl.seed_everything(0)
    model = algorithm(tiny_task(continuous_actions=False), **q_kwargs(double_dqn=True, gamma=0.9))
    learner = model.learners["agents"]
    loss = learner.objective
    with torch.no_grad():  # targets apart from the online weights, so the two argmaxes differ
        for params in [loss.target_local_value_network_params] + (
                [loss.target_mixer_network_params] if algorithm is QMIX else []):
            for value in params.values(True, True):
                value.add_(torch.randn_like(value) * 0.5)
    minibatch = _sampled_minibatch(model)
    terms = learner.loss(minibatch.clone())

    def q_values(td, params=None):
        td = td.clone(False)
        if params is None:
            return model.policy(td).get(("agents", "action_value"))
        with params.to_module(loss.local_value_network):
            return loss.local_value_network(td).get(("agents", "action_value"))

    def mixed(values, td, params):
        td = td.clone(False).set(("agents", "chosen_action_value"), values)
        with params.to_module(loss.mixer_network):
            return loss.mixer_network(td).get(("agents_team", "global_value"))

    def one_value(q, action):
        return torch.gather(q, -1, action.unsqueeze(-1))

    nxt = minibatch.get("next")
    online_next, target_next = q_values(nxt), q_values(nxt, loss.target_local_value_network_params)
    greedy, own = online_next.argmax(-1), target_next.argmax(-1)
    assert (greedy != own).any()  # else this test could not tell double Q-learning from torchrl's plain target
    reward, terminated = nxt.get(("agents_team", "reward")), nxt.get(("agents_team", "terminated"))

    def td_target(action):
        next_value = mixed(one_value(target_next, action), nxt, loss.target_mixer_network_params)
        return reward + 0.9 * (~terminated) * next_value

    action = minibatch.get(("agents", "action"))
    assert action.shape == greedy.shape  # categorical: one action index per agent
    predicted = mixed(one_value(q_values(minibatch), action), minibatch, loss.mixer_network_params)
    expected = (predicted - td_target(greedy)).pow(2).mean()
    torchrls = (predicted - td_target(own)).pow(2).mean()
    torch.testing.assert_close(terms["loss"], expected, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(expected, torchrls)
    target = td_target(greedy)  # what the loss reports beside the loss: the values it trained on
    torch.testing.assert_close(terms["q_taken_mean"], predicted.mean(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(terms["target_mean"], target.mean(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(terms["td_error_abs"], (predicted - target).abs().mean(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("algorithm", [VDN, QMIX])
def test_mixers_report_the_team_value_its_target_and_their_gap_and_training_logs_them(tmp_path, algorithm):
    """EPyMARL's q_taken_mean, target_mean and td_error_abs: the team value of the taken actions, its TD(0) target and
    their mean absolute gap, in the loss's reward units (standardised ones here), checked against the priorities the
    same loss wrote ((prediction - target)^2 per transition) and a hand-computed prediction; then logged per iteration."""
    pl.seed_everything(0)
    model = algorithm(tiny_task(continuous_actions=False), **q_kwargs(standardise_rewards=True))
    learner = model.learners["agents"]
    loss = learner.objective
    minibatch = _sampled_minibatch(model)
    batch = minibatch.clone()
    terms = learner.loss(batch)
    gap = batch.get(("agents_team", "td_error")).sqrt()  # torchrl's priority: the squared TD error
    td = minibatch.clone(False)
    with torch.no_grad():
        q = model.policy(td.clone(False)).get(("agents", "action_value"))
        taken = torch.gather(q, -1, minibatch.get(("agents", "action")).unsqueeze(-1))
        td.set(("agents", "chosen_action_value"), taken)
        with loss.mixer_network_params.to_module(loss.mixer_network):
            predicted = loss.mixer_network(td).get(("agents_team", "global_value"))
    torch.testing.assert_close(terms["q_taken_mean"], predicted.mean(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(terms["td_error_abs"], gap.mean(), rtol=1e-4, atol=1e-6)
    assert terms["target_mean"] != terms["q_taken_mean"]
    assert terms["loss"].item() == pytest.approx(gap.square().mean().item(), rel=1e-4)
    for name in ("loss", "q_taken_mean", "target_mean", "td_error_abs"):  # only the loss is trained on
        assert terms[name].requires_grad == (name == "loss")
    trainer = tiny_trainer(tmp_path, max_epochs=2)
    trainer.fit(model)
    for name in ("q_taken_mean", "target_mean", "td_error_abs"):
        assert torch.isfinite(trainer.callback_metrics[f"train/agents/{name}"])


def test_double_q_needs_target_networks():
    with pytest.raises(ConfigError, match=r"double_dqn: True needs target networks.*delay_value is False"):
        QMIX(tiny_task(continuous_actions=False), **q_kwargs(double_dqn=True, delay_value=False))
