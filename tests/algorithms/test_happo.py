"""HAPPO: one policy per agent, agents updated one after another in a fresh seeded order each iteration, each with the
product of the earlier agents' ratios as a factor on its advantage, the critic last; resume continues bitwise."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lit_marl.algorithms import HAPPO
from lit_marl.algorithms.loops import FACTOR, Phase, phase_of
from lit_marl.errors import ConfigError
from lit_marl.models import Gru, Mlp
from tests.helpers.tiny import tiny_kwargs, tiny_task, tiny_trainer


def _happo(**overrides) -> HAPPO:
    return HAPPO(tiny_task("balance", scenario_kwargs={"n_agents": 3}), **tiny_kwargs(**overrides))


def fit_run(tmp_path, name, max_epochs, ckpt_path=None, model=None, build=None):
    """A run of ``build()`` (default: :func:`_happo`) checkpointing every iteration, from ``ckpt_path`` if given."""
    pl.seed_everything(0)
    model = model or (build or _happo)()
    checkpoint = ModelCheckpoint(dirpath=tmp_path / name, save_last=True, every_n_epochs=1, save_on_train_epoch_end=True)
    trainer = tiny_trainer(tmp_path / name, max_epochs=max_epochs, callbacks=[checkpoint], check_val_every_n_epoch=100)
    trainer.fit(model, ckpt_path=ckpt_path)
    return model, trainer


def test_every_agent_has_its_own_policy_parameters_and_optimizer_group():
    model = _happo()
    learner = model.learners["agents"]
    groups = learner.param_groups()
    assert list(groups) == ["actor/agent_0", "actor/agent_1", "actor/agent_2", "critic"]
    ids = [{id(p) for p in groups[f"actor/agent_{i}"]} for i in range(3)]
    assert not (ids[0] & ids[1] or ids[1] & ids[2] or ids[0] & ids[2])
    names = [g["name"] for g in model.configure_optimizers().param_groups]
    assert names == ["agents/actor/agent_0", "agents/actor/agent_1", "agents/actor/agent_2", "agents/critic"]


def test_each_agent_moves_only_in_its_turn_and_the_critic_last(tmp_path):
    model = _happo()
    learner = model.learners["agents"]
    snapshots = []
    original = learner.loss

    def watched(batch):  # the weights of every part when each phase's first minibatch arrives
        if not snapshots or snapshots[-1][0] != phase_of(batch):
            snapshots.append((phase_of(batch), {k: torch.cat([p.detach().flatten().clone() for p in v])
                                                for k, v in learner.param_groups().items()}))
        return original(batch)

    learner.loss = watched
    fit_run(tmp_path, "run", max_epochs=1, model=model)
    (order,) = model.agent_orders
    assert sorted(order) == ["agents/agent_0", "agents/agent_1", "agents/agent_2"]
    phases = [phase for phase, _ in snapshots]
    assert phases == [Phase("actor", "agents", int(a[-1])) for a in order] + [Phase("critic")]
    final = {k: torch.cat([p.detach().flatten() for p in v]) for k, v in learner.param_groups().items()}
    for (phase, before), (_, after) in zip(snapshots, snapshots[1:] + [(None, final)]):
        moved = {k for k in before if not torch.equal(before[k], after[k])}
        assert moved == ({f"actor/agent_{phase.agent}"} if phase.kind == "actor" else {"critic"}), phase


def test_an_agents_advantage_carries_the_earlier_agents_ratios(tmp_path):
    """The surrogate of the k-th agent in turn is fed factor × A with factor the product of the k-1 earlier agents'
    new/old probability ratios on the collected actions: dropping the factor fails here."""
    model = _happo()
    learner = model.learners["agents"]
    seen, ratios = [], []
    objective, log_prob = learner.objective_fn, learner.agent_log_prob

    def spy_objective():
        call = objective()

        def run(batch):
            if phase_of(batch).kind == "actor":
                seen.append((phase_of(batch).agent, batch.get(FACTOR).clone(),
                             batch.get(("agents", "advantage")).clone()))
            return call(batch)
        return run

    def spy_log_prob(batch, agent):
        new = log_prob(batch, agent)
        ratios.append((agent, (new - batch.get(("agents", "action_log_prob"))[:, agent]).exp()))
        return new

    learner.objective_fn, learner.agent_log_prob = spy_objective, spy_log_prob
    fit_run(tmp_path, "run", max_epochs=1, model=model)
    order = [int(a[-1]) for a in model.agent_orders[0]]
    first = [s for s in seen if s[0] == order[0]]
    assert all(torch.equal(f, torch.ones_like(f)) for _, f, _ in first)  # nobody before the first agent
    assert [a for a, _ in ratios] == order  # each agent's ratio is taken after its turn
    later = [s for s in seen if s[0] == order[-1]]
    assert all(not torch.allclose(f, torch.ones_like(f)) for _, f, _ in later)
    for agent, factor, advantage in seen:  # only the agent in turn carries an advantage: factor × A × n_agents
        others = [i for i in range(3) if i != agent]
        assert torch.equal(advantage[:, others], torch.zeros_like(advantage[:, others]))
    # the last agent's factor is the product of the earlier agents' ratios (each minibatch is a sample of the batch)
    product = ratios[0][1] * ratios[1][1]
    for _, factor, _ in later:
        assert all(torch.isclose(product, value, rtol=0, atol=1e-7).any() for value in factor.squeeze(-1))


def test_the_agent_order_changes_and_resume_continues_it_bitwise(tmp_path):
    straight, straight_trainer = fit_run(tmp_path, "straight", max_epochs=4)
    fit_run(tmp_path, "first", max_epochs=2)
    resumed, resumed_trainer = fit_run(tmp_path, "resumed", max_epochs=4, ckpt_path=tmp_path / "first" / "last.ckpt")
    assert len({tuple(o) for o in straight.agent_orders}) > 1  # a fresh order per iteration
    assert resumed.agent_orders == straight.agent_orders[2:]
    assert resumed.frames == straight.frames and resumed_trainer.global_step == straight_trainer.global_step
    for key, value in straight.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[key]), key


@pytest.mark.parametrize("overrides, fragments", [
    ({"share_policy_params": True}, ["share_policy_params: True", "allowed: false"]),
    ({"minibatch_advantage": True}, ["minibatch_advantage: True", "allowed: false"]),
    ({"actor_model": Gru()}, ["actor_model: Gru", "allowed: Mlp"]),
])
def test_bad_settings_are_refused_by_name(overrides, fragments, monkeypatch):
    from lit_marl.envs.base import Task

    monkeypatch.setattr(Task, "_make_env", lambda *a, **k: pytest.fail("an environment was built before the check"))
    with pytest.raises(ConfigError) as refused:
        _happo(**overrides)
    for fragment in fragments:
        assert fragment in str(refused.value)


def test_a_non_mlp_actor_is_refused_by_name():
    from lit_marl.models import DeepSets

    with pytest.raises(ConfigError, match="actor_model: DeepSets; HAPPO builds one network per agent"):
        _happo(actor_model=DeepSets())
    assert isinstance(_happo(actor_model=Mlp(num_cells=[8])).learners["agents"].actor_model, Mlp)
