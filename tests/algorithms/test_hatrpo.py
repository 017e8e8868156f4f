"""HATRPO: the trust-region step's maths on problems with known answers, and the algorithm: HAPPO's agent order and
factor with one trust-region step per agent whose KL stays within the threshold; resume bitwise; bad settings
refused by name."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lit_marl.algorithms import HATRPO
from lit_marl.algorithms.trust_region import conjugate_gradient, trust_region_step
from lit_marl.errors import ConfigError
from tests.helpers.tiny import tiny_kwargs, tiny_task
from tests.algorithms.test_happo import fit_run


def _spd(n: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    m = torch.randn(n, n, generator=generator, dtype=torch.float64)
    return m @ m.T + n * torch.eye(n, dtype=torch.float64)


def test_conjugate_gradient_solves_a_symmetric_positive_definite_system():
    a, b = _spd(8), torch.arange(1.0, 9.0, dtype=torch.float64)
    x = conjugate_gradient(lambda v: a @ v, b, iterations=8)
    torch.testing.assert_close(x, torch.linalg.solve(a, b), rtol=1e-8, atol=1e-8)


def test_the_step_is_the_natural_gradient_scaled_to_the_kl_threshold():
    """Linear surrogate gᵀθ and quadratic KL ½(θ-θ0)ᵀF(θ-θ0): the step is sqrt(2δ / gᵀF⁻¹g) F⁻¹g, whose KL is δ; the
    accepted one (after rounding, the full step or the first backtracked one) lies along F⁻¹g with KL ≤ δ."""
    fisher, g = _spd(5, seed=1), torch.tensor([1.0, -2.0, 0.5, 0.0, 3.0], dtype=torch.float64)
    theta = nn.Parameter(torch.zeros(5, dtype=torch.float64))
    start = theta.detach().clone()
    max_kl = 0.01
    result = trust_region_step([theta], lambda: g @ theta, lambda: 0.5 * (theta - start) @ fisher @ (theta - start),
                               max_kl, cg_iterations=5, damping=0.0)
    natural = torch.linalg.solve(fisher, g)
    full = torch.sqrt(2 * max_kl / (g @ natural)) * natural
    moved = theta.detach() - start
    assert 0 < result.step_fraction <= 1 and result.kl <= max_kl
    torch.testing.assert_close(moved, result.step_fraction * full, rtol=1e-6, atol=1e-9)
    assert result.kl == pytest.approx(0.5 * float(moved @ fisher @ moved), rel=1e-9)
    assert result.kl == pytest.approx(max_kl * result.step_fraction ** 2, rel=1e-6)


def test_a_step_that_would_not_improve_is_refused_and_nothing_moves():
    """A surrogate whose first-order promise is swamped by curvature at every fraction tried: no step is taken."""
    theta = nn.Parameter(torch.zeros(3, dtype=torch.float64))
    g = torch.tensor([1e-3, 0.0, 0.0], dtype=torch.float64)
    result = trust_region_step([theta], lambda: g @ theta - 1e6 * (theta @ theta), lambda: 0.5 * theta @ theta,
                               0.01, damping=0.0)
    assert result.step_fraction == 0.0 and torch.equal(theta.detach(), torch.zeros(3, dtype=torch.float64))


def _hatrpo(**overrides) -> HATRPO:
    return HATRPO(tiny_task("balance", scenario_kwargs={"n_agents": 3}), **tiny_kwargs(**overrides))


def _fit(tmp_path, name, max_epochs, ckpt_path=None, model=None):
    return fit_run(tmp_path, name, max_epochs, ckpt_path, model, build=_hatrpo)


def test_each_agent_takes_one_step_within_the_kl_threshold_with_the_factor(tmp_path):
    model = _hatrpo(kl_threshold=0.005)
    learner = model.learners["agents"]
    steps, update = [], learner.trust_region_update

    def watched(batch, agent):
        before = {i: torch.cat([p.detach().flatten().clone() for p in learner.actor_parameters(i)]) for i in range(3)}
        result = update(batch, agent)
        moved = [i for i in range(3)
                 if not torch.equal(before[i], torch.cat([p.detach().flatten() for p in learner.actor_parameters(i)]))]
        steps.append((agent, batch.get("happo_factor").clone(), result, moved))
        return result

    learner.trust_region_update = watched
    _fit(tmp_path, "run", max_epochs=1, model=model)
    order = [int(a[-1]) for a in model.agent_orders[0]]
    assert [agent for agent, *_ in steps] == order  # one step per agent, whole batch, in the iteration's order
    assert any(moved for *_, moved in steps), "no agent's step was accepted: the checks below would hold vacuously"
    for k, (agent, factor, result, moved) in enumerate(steps):
        assert float(result["kl"]) <= 0.005
        assert moved == ([agent] if float(result["step_fraction"]) > 0 else [])
        assert factor.shape[0] == 40  # the whole batch
        assert torch.equal(factor, torch.ones_like(factor)) == (k == 0 or not any(s[3] for s in steps[:k]))


def test_hatrpo_resumes_bitwise_with_the_same_orders(tmp_path):
    straight, _ = _fit(tmp_path, "straight", max_epochs=4)
    _fit(tmp_path, "first", max_epochs=2)
    resumed, _ = _fit(tmp_path, "resumed", max_epochs=4, ckpt_path=tmp_path / "first" / "last.ckpt")
    assert resumed.agent_orders == straight.agent_orders[2:]
    for key, value in straight.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[key]), key


@pytest.mark.parametrize("overrides, field", [
    ({"kl_threshold": 0.0}, "kl_threshold"), ({"cg_iterations": 0}, "cg_iterations"),
    ({"backtrack_coef": 1.5}, "backtrack_coef"), ({"accept_ratio": -0.1}, "accept_ratio"),
    ({"share_policy_params": True}, "share_policy_params"),
])
def test_bad_trust_region_settings_are_refused_by_name(overrides, field):
    with pytest.raises(ConfigError, match=f"^{field}: "):
        _hatrpo(**overrides)


def test_a_refusal_names_hatrpo_not_happo():
    with pytest.raises(ConfigError, match="HATRPO gives every agent a policy") as err:
        _hatrpo(share_policy_params=True)
    assert "HAPPO" not in str(err.value)
