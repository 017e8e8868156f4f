"""Differentiable collection (``collect_with_grad``): the collected batch keeps the graph from the policies'
parameters through VMAS's physics, training still works on a detached copy, and tasks or settings where it
cannot work are refused by name before any environment is built."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lit_marl.algorithms import IDDPG, MAPPO
from lit_marl.cli import main
from lit_marl.envs import GymnasiumTask
from lit_marl.errors import ConfigError
from tests.helpers.tiny import CONFIGS, tiny_kwargs, tiny_task, tiny_trainer


def _captured_batch(collect_with_grad: bool):
    model = MAPPO(tiny_task(), **tiny_kwargs(collect_with_grad=collect_with_grad))
    seen = []
    model.on_batch_collected = seen.append  # the hook every callback's on_batch_collected follows
    trained_on = model.collection.collect()
    model.teardown("fit")
    return model, seen[0], trained_on


def test_gradients_reach_the_policy_through_the_simulator():
    model, batch, trained_on = _captured_batch(collect_with_grad=True)
    assert batch.batch_size == (4, 10)
    # agent positions at step 3 depend on the actions of steps 0..3 only through VMAS's physics
    observation = batch.get(("next", "agents", "observation"))[:, 3]
    observation.square().sum().backward(retain_graph=True)  # the reward below shares the graph
    grads = [p.grad for p in model.policies["agents"].parameters()]
    assert all(g is not None for g in grads)
    assert sum(float(g.abs().sum()) for g in grads) > 0
    # the same through the rewards of a later step
    model.zero_grad()
    batch.get(("next", "agents", "reward"))[:, 5].sum().backward()
    assert any(p.grad is not None and float(p.grad.abs().sum()) > 0 for p in model.policies["agents"].parameters())
    # training reads a copy without the graph
    assert not trained_on.get(("next", "agents", "observation")).requires_grad


def test_without_collect_with_grad_the_batch_has_no_graph():
    _, batch, _ = _captured_batch(collect_with_grad=False)
    assert not batch.get(("next", "agents", "observation")).requires_grad
    assert not batch.get(("next", "agents", "reward")).requires_grad


@pytest.mark.parametrize("algorithm, extra, steps_per_iteration", [
    (MAPPO, {}, 4),  # 2 epochs × 2 minibatches
    (IDDPG, {"n_optimizer_steps": 2, "train_batch_size": 16, "memory_size": 200}, 2),
])
def test_training_with_collect_with_grad(tmp_path, algorithm, extra, steps_per_iteration):
    kwargs = tiny_kwargs(collect_with_grad=True, **extra)
    if algorithm is IDDPG:
        kwargs = {k: v for k, v in kwargs.items() if k not in ("n_minibatch_iters", "minibatch_size")}
    model = algorithm(tiny_task(), **kwargs)
    before = [p.detach().clone() for p in model.policies["agents"].parameters()]
    trainer = tiny_trainer(tmp_path, max_epochs=2)
    trainer.fit(model)
    assert model.frames == 80 and model.iteration == 2
    assert trainer.global_step == 2 * steps_per_iteration
    after = list(model.policies["agents"].parameters())
    assert any(not torch.equal(b, a) for b, a in zip(before, after))


def test_refused_on_a_task_that_is_not_differentiable(monkeypatch):
    task = GymnasiumTask("CartPole-v1")
    monkeypatch.setattr(type(task), "_make_env", lambda *a, **k: pytest.fail("an environment was built"))
    with pytest.raises(ConfigError) as err:
        MAPPO(task, **tiny_kwargs(collect_with_grad=True))
    message = str(err.value)
    assert message.startswith("collect_with_grad: true")
    assert "GymnasiumTask" in message and "allowed: false, or a VmasTask" in message


def test_refused_with_random_warm_up_frames():
    with pytest.raises(ConfigError, match=r"^init_random_frames: 40 .*collect_with_grad.*allowed: 0"):
        IDDPG(tiny_task(), frames_per_batch=40, num_envs=4, init_random_frames=40, collect_with_grad=True)


def test_cli_refuses_it_on_pettingzoo_before_anything_runs(capsys):
    pytest.importorskip("mpe2")
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(CONFIGS / "mappo_mpe_simple_tag.yaml"), "--model.init_args.collect_with_grad",
              "true"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "collect_with_grad: true needs a differentiable simulator" in err and "PettingZooTask" in err
    assert not list(Path("runs").glob("*/version_*"))
