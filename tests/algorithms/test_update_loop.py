"""The Trainer's loop performs exactly the updates of the written-out update.

The BenchMARL harness (``benchmarks/vs_benchmarl/compare.py``) drives each algorithm's update by hand: the loss of
every group summed, backward, :meth:`configure_gradient_clipping`, the optimizer's step, the target updaters' step.
That BenchMARL computes the same only carries over to real runs if Lightning's loop does nothing more, less or in
another order: here each algorithm trains two iterations under a Trainer while every minibatch it sees (and the
random state its loss starts from) is recorded, then a copy of the untrained module replays those minibatches by
hand; the weights and target networks must come out equal."""

from __future__ import annotations

import copy

import lightning.pytorch as pl
import pytest
import torch

from lit_marl.algorithms import IQL, MADDPG, MAPPO, MASAC, QMIX
from lit_marl.models import Mlp
from tests.helpers.tiny import tiny_kwargs, tiny_task, tiny_trainer

OFF_POLICY = dict(n_optimizer_steps=6, train_batch_size=16, memory_size=1000)
CASES = {
    "mappo": (MAPPO, {}, {}),
    "maddpg": (MADDPG, OFF_POLICY, {}),
    "masac": (MASAC, OFF_POLICY, {}),  # its loss samples actions: the recorded random state is restored
    "qmix": (QMIX, OFF_POLICY, {"continuous_actions": False}),  # the Q-network and the mixer clipped together
    "iql": (IQL, OFF_POLICY, {"continuous_actions": False}),
}


def _build(name: str):
    algorithm, extra, task_kwargs = CASES[name]
    kwargs = tiny_kwargs(**extra)
    if algorithm.on_policy is False:
        for key in ("n_minibatch_iters", "minibatch_size"):
            kwargs.pop(key)
    if algorithm in (QMIX, IQL):
        kwargs.pop("critic_model")
        kwargs["actor_model"] = Mlp([32, 32])
    return algorithm(tiny_task(**task_kwargs), **kwargs)


def _replay(model, steps) -> None:
    """The update as the harness writes it out, once per recorded minibatch."""
    optimizer = model.configure_optimizers()
    for batch, rng in steps:
        optimizer.zero_grad()
        torch.set_rng_state(rng)
        total = 0
        for group in model.groups:
            terms = model.loss(group, model.group_batch(batch.clone(), group))
            total = total + sum(v for k, v in terms.items() if k == "loss" or k.startswith("loss_"))
        total.backward()
        model.configure_gradient_clipping(optimizer, gradient_clip_val=0.5, gradient_clip_algorithm="norm")
        optimizer.step()
        for learner in model.learners.values():  # off-policy learners move their target networks
            if not learner.on_policy:
                learner.target_updater.step()


def _network_part(key: str, parts=(".policy.", ".critic.", ".objective.")) -> bool:
    """A weight of a group's policy, critic or loss (not its exploration, which collection moves)."""
    return key.startswith("learners.") and any(part in key for part in parts)


@pytest.mark.parametrize("name", sorted(CASES))
def test_trainer_loop_equals_the_written_out_update(tmp_path, name):
    pl.seed_everything(0)
    model = _build(name)
    untrained = copy.deepcopy(model)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    steps = []
    trained_step = model.training_step

    def recording_step(batch, batch_idx):
        steps.append((batch.clone(), torch.get_rng_state()))
        return trained_step(batch, batch_idx)

    model.training_step = recording_step
    # clipping at 0.5 acts on nearly every step, so a loop that clipped otherwise (or not at all) shows
    tiny_trainer(tmp_path, max_epochs=2, gradient_clip_val=0.5, check_val_every_n_epoch=100).fit(model)
    assert len(steps) == 2 * (OFF_POLICY["n_optimizer_steps"] if not model.on_policy else 4)

    _replay(untrained, steps)
    compared = 0
    trained = model.state_dict()
    for key, value in untrained.state_dict().items():
        if _network_part(key) and value.is_floating_point():
            torch.testing.assert_close(trained[key], value, rtol=0, atol=1e-6, msg=f"{name}: {key} differs")
            compared += 1
    assert compared >= 6
    # and training moved them: an update that did nothing on both sides would also agree
    assert any(not torch.equal(initial[k], trained[k]) for k in initial if _network_part(k, (".policy.", ".objective.")))


@pytest.mark.parametrize("name", ["iql", "mappo"])
def test_a_deep_copy_trains_the_tensors_its_losses_read(name):
    """``copy.deepcopy``'s default duplicated each loss's parameters apart from the policy's (its optimizer then
    updated tensors no loss read): the copy keeps them shared, as the original and a pickled one do."""
    model = _build(name)
    copied = copy.deepcopy(model)
    for module in (model, copied):
        loss_tensors = {t.data_ptr() for t in module.losses["agents"].parameters()}
        assert {p.data_ptr() for p in module.policies["agents"].parameters()} <= loss_tensors
    assert not any(p.data_ptr() == q.data_ptr() for p, q in zip(model.parameters(), copied.parameters()))
    torch.testing.assert_close(dict(model.state_dict()), dict(copied.state_dict()))


def test_a_loop_subclass_that_forwards_kwargs_gets_its_base_sizes():
    """A loop subclass whose ``__init__`` takes ``**kwargs`` for its base receives the sizes the base declares (the
    run's signature offers them: before, ``minibatch_size`` was offered but never reached the loop, and a run of 40
    frames was refused for the default minibatch of 400)."""
    from lit_marl.algorithms import OnPolicyLoop
    from lit_marl.algorithms.loops import loop_sizes
    from lit_marl.algorithms.ppo import PPO

    class WarmLoop(OnPolicyLoop):
        def __init__(self, run, warm_epochs: int = 1, **kwargs) -> None:
            self.warm_epochs = warm_epochs
            super().__init__(run, **kwargs)

    assert loop_sizes(WarmLoop) == ["warm_epochs", "n_minibatch_iters", "minibatch_size"]

    class WarmPPO(PPO):
        loop = WarmLoop

    class WarmMAPPO(MAPPO):
        learner_class = WarmPPO

    model = WarmMAPPO(tiny_task(), **tiny_kwargs(minibatch_size=20, warm_epochs=2))
    assert (model.loop.minibatch_size, model.loop.warm_epochs) == (20, 2)
