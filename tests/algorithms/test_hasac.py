"""HASAC: one stochastic policy per agent, the agents updated one after another in a fresh random order each update,
each conditioned on the actions its predecessors have just re-sampled, under twin centralised soft Q-functions of the
joint action; the critics first, target networks moving once per update; n-step returns; resume continues bitwise."""

from __future__ import annotations

import math

import lightning.pytorch as pl
import pytest
import torch
from tensordict import TensorDict

from lit_marl.algorithms import HASAC
from lit_marl.algorithms.hasac import DISCOUNT, JOINT_ACTION
from lit_marl.algorithms.loops import CRITIC, Phase, phase_of
from lit_marl.errors import ConfigError
from lit_marl.models import DeepSets, Mlp
from tests.algorithms.test_happo import fit_run
from tests.helpers.tiny import ddpg_kwargs, tiny_task

AGENTS = ["agents/agent_0", "agents/agent_1", "agents/agent_2"]


def _hasac(**overrides) -> HASAC:
    kwargs = ddpg_kwargs(n_optimizer_steps=2, max_frames=10_000, critic_lr=2e-3, alpha_lr=3e-4)
    kwargs.update(overrides)
    return HASAC(tiny_task("balance", scenario_kwargs={"n_agents": 3}), **kwargs)


def _weights(learner) -> dict[str, torch.Tensor]:
    return {k: torch.cat([p.detach().flatten().clone() for p in v]) for k, v in learner.param_groups().items()}


def test_every_agent_has_its_own_policy_temperature_and_learning_rates():
    model = _hasac()
    learner = model.learners["agents"]
    groups = learner.param_groups()
    assert list(groups) == ["actor/agent_0", "actor/agent_1", "actor/agent_2", "critic", "alpha/agent_0",
                            "alpha/agent_1", "alpha/agent_2", "alpha/critic"]
    ids = [{id(p) for p in groups[f"actor/agent_{i}"]} for i in range(3)]
    assert not (ids[0] & ids[1] or ids[1] & ids[2] or ids[0] & ids[2])
    rates = {g["name"]: g["lr"] for g in model.configure_optimizers().param_groups}
    assert rates == {"agents/actor/agent_0": 1e-3, "agents/actor/agent_1": 1e-3, "agents/actor/agent_2": 1e-3,
                     "agents/critic": 2e-3, "agents/alpha/agent_0": 3e-4, "agents/alpha/agent_1": 3e-4,
                     "agents/alpha/agent_2": 3e-4, "agents/alpha/critic": 3e-4}
    twins = learner.objective.qvalue_network_params.values(True, True)
    weights = [p for p in twins if p.dim() > 2]
    assert weights and all(p.shape[0] == 2 and not torch.equal(p[0], p[1]) for p in weights)  # two critics


def test_each_update_trains_the_critics_then_each_agent_alone_and_moves_the_targets_once(tmp_path):
    model = _hasac()
    learner = model.learners["agents"]
    seen = []
    original = learner.loss

    def watched(batch):
        target = torch.cat([p.detach().flatten().clone()
                            for p in learner.objective.target_qvalue_network_params.values(True, True)])
        seen.append((phase_of(batch), _weights(learner), target))
        return original(batch)

    learner.loss = watched
    fit_run(tmp_path, "run", max_epochs=1, model=model)
    assert len(model.agent_orders) == 2  # one order per update (n_optimizer_steps=2)
    expected = []
    for order in model.agent_orders:
        agents = [int(name[-1]) for name in order]
        expected += [CRITIC] + [Phase("actor", "agents", a, closes=k == 2) for k, a in enumerate(agents)]
    assert [phase for phase, _, _ in seen] == expected
    final = (None, _weights(learner), torch.cat([p.detach().flatten()
                                                 for p in learner.objective.target_qvalue_network_params.values(True, True)]))
    for (phase, before, target), (_, after, next_target) in zip(seen, seen[1:] + [final]):
        moved = {k for k in before if not torch.equal(before[k], after[k])}
        if phase.kind == "critic":
            assert moved == {"critic"}, phase
        else:  # the agent in turn and its temperature; the critics' temperature with the update's last turn
            mine = {f"actor/agent_{phase.agent}", f"alpha/agent_{phase.agent}"}
            assert moved == (mine | {"alpha/critic"} if phase.closes else mine), phase
        assert torch.equal(target, next_target) != phase.closes, phase  # the targets move after the last turn only


def test_an_agents_turn_sees_the_actions_its_predecessors_just_resampled(tmp_path):
    """At the k-th turn of an update the joint action holds, for the agents before it, the actions re-sampled from
    their updated policies after their turns, and for the agents after it the draw of the update's start: a loop
    that did not re-sample (or a loss that ignored the others' actions) fails here."""
    model = _hasac()
    learner = model.learners["agents"]
    turns, resampled = [], []
    loss, after_turn = learner.objective.actor_loss, learner.after_turn

    def spy_loss(batch, agent):
        turns.append((agent, batch.get(("agents", JOINT_ACTION)).clone()))
        return loss(batch, agent)

    def spy_after_turn(sample, agent):
        after_turn(sample, agent)
        resampled.append((agent, sample.get(("agents", JOINT_ACTION))[:, agent].clone()))

    learner.objective.actor_loss, learner.after_turn = spy_loss, spy_after_turn
    fit_run(tmp_path, "run", max_epochs=1, model=model)
    for update, order in enumerate(model.agent_orders):
        agents = [int(name[-1]) for name in order]
        mine, fresh = turns[3 * update: 3 * update + 3], resampled[2 * update: 2 * update + 2]
        assert [a for a, _ in mine] == agents and [a for a, _ in fresh] == agents[:-1]  # the last one's is not needed
        start = mine[0][1]
        for k, (agent, joint) in enumerate(mine):
            for j, earlier in enumerate(agents[:k]):
                assert torch.equal(joint[:, earlier], fresh[j][1])
                assert not torch.equal(joint[:, earlier], start[:, earlier])
            for later in agents[k:]:
                assert torch.equal(joint[:, later], start[:, later])


def test_after_a_turn_the_agents_action_comes_from_its_updated_policy():
    model = _hasac()
    learner = model.learners["agents"]
    sample = learner.task.specs.observation_spec.rand([64]).select(*learner.policy.in_keys)
    with torch.no_grad():
        learner.before_turns(sample)
        start = sample.get(("agents", JOINT_ACTION)).clone()
        bias = learner._agent_parameters[1][-1]  # agent 1's last layer: [loc (2 dims), scale (2 dims)]
        bias.add_(torch.tensor([8.0, 8.0, 0.0, 0.0]))  # its policy now acts near the top of the range
        learner.after_turn(sample, 1)
    now = sample.get(("agents", JOINT_ACTION))
    assert torch.equal(now[:, [0, 2]], start[:, [0, 2]])  # the others keep theirs
    high = learner.task.specs.group_action_spec("agents").space.high[..., 0].max()
    assert bool((now[:, 1] > 0.9 * high).all()) and not bool((start[:, 1] > 0.9 * high).all())


def test_a_saturated_policy_scores_its_own_draws():
    """Scoring a drawn action apart from the draw inverts the tanh: once the policy saturates, that gives another
    pre-image and log-probabilities off by thousands, which the soft targets multiply into the critics (a HalfCheetah
    run diverged at 195k frames on it). Drawn and scored together, they stay what the normal's density says."""
    model = _hasac()
    learner = model.learners["agents"]
    sample = learner.task.specs.observation_spec.rand([256]).select(*learner.policy.in_keys)
    with torch.no_grad():
        bias = learner._agent_parameters[0][-1]
        bias.copy_(torch.tensor([20.0, -20.0, -3.0, -3.0]))  # agent 0's loc far into the tanh's flat ends
        action, log_prob = learner.objective.sample(sample)
    assert bool(log_prob.isfinite().all()) and bool((log_prob[:, 0] > 0).all())  # a narrow density: positive
    assert bool((action[:, 0, 0] > 0.99).all()) and bool((action[:, 0, 1] < -0.99).all())


def test_the_critics_target_is_the_soft_n_step_value_and_stops_at_termination():
    model = _hasac()
    loss = model.learners["agents"].objective
    torch.manual_seed(0)
    n = 5
    sample = TensorDict({
        ("agents", "observation"): torch.randn(n, 3, 16), ("agents", "action"): torch.rand(n, 3, 2) * 2 - 1,
        ("next", "agents", "observation"): torch.randn(n, 3, 16),
        ("next", "agents", "reward"): torch.arange(n * 3, dtype=torch.float32).reshape(n, 3, 1),
        ("next", "agents", "terminated"): torch.tensor([0, 1, 0, 0, 0], dtype=torch.bool).reshape(n, 1, 1).expand(n, 3, 1),
        ("next", "agents", "done"): torch.zeros(n, 3, 1, dtype=torch.bool),
        DISCOUNT: torch.tensor([0.99, 0.99, 0.99 ** 3, 0.99 ** 3, 0.99 ** 10]),
    }, batch_size=[n])
    torch.manual_seed(1)
    terms = loss.critic_loss(sample.clone())
    torch.manual_seed(1)
    with torch.no_grad():
        action, log_prob = loss.sample(sample.get("next"))
        q = loss._q(loss.target_qvalue_network_params, sample.get(("next", "agents", "observation")), action).amin(0)
        soft = q - loss.alpha() * log_prob.sum(-1)
        reward = sample.get(("next", "agents", "reward")).squeeze(-1).mean(-1)
        expected = reward + sample.get(DISCOUNT) * torch.tensor([1.0, 0.0, 1.0, 1.0, 1.0]) * soft
    assert torch.allclose(terms["target_value"], expected.mean())
    assert math.isclose(float(expected[1]), float(reward[1]))  # terminated: the reward alone


def test_n_step_transitions_enter_the_buffer_once_their_windows_are_complete():
    model = _hasac(n_step=3, gamma=0.5)
    learner = model.learners["agents"]
    envs, steps = 2, 6
    reward = torch.arange(envs * steps, dtype=torch.float32).reshape(envs, steps, 1, 1).expand(envs, steps, 3, 1)
    done = torch.zeros(envs, steps, 3, 1, dtype=torch.bool)
    done[0, 3] = True  # env 0's episode ends at step 3
    obs = torch.arange(envs * steps, dtype=torch.float32).reshape(envs, steps, 1, 1).expand(envs, steps, 3, 16)

    def batch(offset):
        return TensorDict({("agents", "observation"): obs + offset, ("agents", "action"): torch.zeros(envs, steps, 3, 2),
                           ("next", "agents", "observation"): obs + offset + 0.5,
                           ("next", "agents", "reward"): reward.clone(), ("next", "agents", "done"): done.clone(),
                           ("next", "agents", "terminated"): done.clone()}, batch_size=[envs, steps])

    first = learner.replay_frames(batch(0.0)).reshape(envs, -1)
    assert first.shape == (envs, steps - 3)  # each env's last 3 wait for the steps after them
    r = reward[..., 0, 0]
    # env 1, step 0: r0 + r1/2 + r2/4, bootstrapped from step 2's next observation with 0.5**3
    assert float(first[1, 0]["next", "agents", "reward"][0, 0]) == pytest.approx(float(r[1, 0] + r[1, 1] / 2 + r[1, 2] / 4))
    assert float(first[1, 0][DISCOUNT]) == pytest.approx(0.125)
    assert float(first[1, 0]["next", "agents", "observation"][0, 0]) == pytest.approx(float(obs[1, 2, 0, 0] + 0.5))
    # env 0, step 2: the episode ends at step 3, so the window stops there (two rewards, 0.5**2) and is terminal
    assert float(first[0, 2]["next", "agents", "reward"][0, 0]) == pytest.approx(float(r[0, 2] + r[0, 3] / 2))
    assert float(first[0, 2][DISCOUNT]) == pytest.approx(0.25)
    assert bool(first[0, 2]["next", "agents", "terminated"].all())
    second = learner.replay_frames(batch(100.0)).reshape(envs, -1)
    assert second.shape == (envs, steps)  # the held transitions first, completed by the new steps
    held = second[1, 0]  # env 1's step 3 of the first batch: rewards of steps 3, 4, 5
    assert float(held["next", "agents", "reward"][0, 0]) == pytest.approx(float(r[1, 3] + r[1, 4] / 2 + r[1, 5] / 4))


def test_the_agent_order_changes_and_resume_continues_it_bitwise(tmp_path):
    build = lambda: _hasac(n_step=2)  # noqa: E731 - the held n-step window travels in the checkpoint too
    straight, straight_trainer = fit_run(tmp_path, "straight", max_epochs=4, build=build)
    fit_run(tmp_path, "first", max_epochs=2, build=build)
    resumed, resumed_trainer = fit_run(tmp_path, "resumed", max_epochs=4, ckpt_path=tmp_path / "first" / "last.ckpt",
                                       build=build)
    assert len({tuple(o) for o in straight.agent_orders}) > 1  # a fresh order per update
    assert resumed.agent_orders == straight.agent_orders[4:]
    assert resumed.frames == straight.frames and resumed_trainer.global_step == straight_trainer.global_step
    for key, value in straight.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[key]), key


@pytest.mark.parametrize("overrides, fragments", [
    ({"share_policy_params": True}, ["share_policy_params: True", "allowed: false"]),
    ({"actor_model": DeepSets()}, ["actor_model: DeepSets", "allowed: Mlp"]),
    ({"n_step": 0}, ["n_step"]),
    ({"critic_lr": -1.0}, ["critic_lr"]),
    ({"use_prioritized_replay_buffer": True, "n_step": 3}, ["use_prioritized_replay_buffer", "n_step=3"]),
    ({"sample_episodes": True, "n_step": 2}, ["sample_episodes: true with n_step=2", "allowed: false, or n_step: 1"]),
    ({"compile": True}, ["compile: true", "allowed: false"]),
])
def test_bad_settings_are_refused_by_name(overrides, fragments, monkeypatch):
    from lit_marl.envs.base import Task

    monkeypatch.setattr(Task, "_make_env", lambda *a, **k: pytest.fail("an environment was built before the check"))
    with pytest.raises(ConfigError) as refused:
        _hasac(**overrides)
    for fragment in fragments:
        assert fragment in str(refused.value)


def test_several_groups_are_refused_by_name():
    with pytest.raises(ConfigError, match="task.agent_groups: 3 groups \\(agent_0, agent_1, agent_2\\); HASAC's "
                                          "critics value the joint action of every agent"):
        HASAC(tiny_task("balance", scenario_kwargs={"n_agents": 3}, agent_groups="one_group_per_agent"),
              **ddpg_kwargs())


def test_discrete_actions_are_refused_by_name():
    with pytest.raises(ConfigError, match="needs continuous actions"):
        HASAC(tiny_task("balance", continuous_actions=False), **ddpg_kwargs())


def test_prioritized_replay_takes_the_critics_td_errors_once_per_update(tmp_path, monkeypatch):
    from torchrl.data import TensorDictReplayBuffer

    updates = []
    original = TensorDictReplayBuffer.update_priority
    monkeypatch.setattr(TensorDictReplayBuffer, "update_priority",
                        lambda self, index, priority: updates.append(priority.clone()) or original(self, index, priority))
    model = _hasac(use_prioritized_replay_buffer=True)
    fit_run(tmp_path, "run", max_epochs=2, model=model)
    assert len(updates) == 4  # two updates per iteration, each of four optimizer steps
    assert all(bool((u > 0).all()) and u.shape == (16,) for u in updates)


def test_with_one_agent_the_losses_are_torchrls_soft_actor_critic():
    """HASAC generalises SAC (Liu et al., 2024): with one agent its critics' loss and its agent's loss are torchrl's
    ``SACLoss``'s on the same networks, batch and random draws (the critics' temperature is then the agent's)."""
    from torchrl.objectives import SACLoss, ValueEstimators

    pl.seed_everything(0)
    model = HASAC(tiny_task("navigation", scenario_kwargs={"n_agents": 1}), **ddpg_kwargs(alpha_init=0.3))
    learner = model.learners["agents"]
    hasac = learner.objective
    sac = SACLoss(learner.policy, hasac.qvalue_network, num_qvalue_nets=2, loss_function="l2", alpha_init=0.3,
                  delay_qvalue=True, action_spec=learner.task.specs.action_spec)
    sac.set_keys(action=("agents", "action"), reward=("agents", "reward"), done=("agents", "done"),
                 terminated=("agents", "terminated"), state_action_value=("agents", "joint_q"),
                 log_prob=("agents", "action_log_prob"))
    sac.make_value_estimator(ValueEstimators.TD0, gamma=learner.gamma)
    sac.qvalue_network_params.data.update_(hasac.qvalue_network_params.data)
    sac.target_qvalue_network_params.data.update_(hasac.target_qvalue_network_params.data)
    specs = learner.task.specs
    n = 32
    sample = TensorDict({("agents", "observation"): specs.observation_spec["agents", "observation"].rand([n]),
                         ("agents", "action"): torch.rand(n, 1, 2) * 2 - 1,
                         ("next", "agents", "observation"): specs.observation_spec["agents", "observation"].rand([n]),
                         ("next", "agents", "reward"): torch.randn(n, 1, 1),
                         ("next", "agents", "terminated"): torch.rand(n, 1, 1) < 0.2}, batch_size=[n])
    sample.set(("next", "agents", "done"), sample.get(("next", "agents", "terminated")).clone())

    torch.manual_seed(3)
    theirs = sac.qvalue_v2_loss(sample.clone())[0]
    torch.manual_seed(3)
    ours = hasac.critic_loss(sample.clone())["loss_critic"]
    assert torch.allclose(ours, theirs, rtol=1e-5, atol=1e-6), (ours, theirs)

    torch.manual_seed(4)
    theirs = sac.actor_loss(sample.clone())[0]
    mine = sample.clone()
    learner.before_turns(mine)  # the joint action: only the agent's own, which its turn replaces
    torch.manual_seed(4)
    ours = hasac.actor_loss(mine, 0)["loss_actor"]
    assert torch.allclose(ours, theirs, rtol=1e-5, atol=1e-6), (ours, theirs)
