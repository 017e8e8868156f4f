"""The trust-region step of TRPO (Schulman et al., 2015) as HATRPO takes it for one agent (Kuba et al., 2022): the
natural-gradient direction by conjugate gradient on Fisher-vector products, scaled to the KL threshold, then a
backtracking line search that keeps the first step whose KL stays within the threshold and whose surrogate improves
enough. torchrl has no such step; written here on plain tensors, tested on problems with known answers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn


def conjugate_gradient(product: Callable[[torch.Tensor], torch.Tensor], b: torch.Tensor, iterations: int = 10,
                       tolerance: float = 1e-10) -> torch.Tensor:
    """``x`` with ``A x ≈ b`` for a symmetric positive-definite ``A`` known only through ``product(v) = A v``."""
    x = torch.zeros_like(b)
    residual, direction = b.clone(), b.clone()
    rr = residual @ residual
    for _ in range(iterations):
        if rr <= tolerance:
            break
        a_direction = product(direction)
        alpha = rr / (direction @ a_direction)
        x += alpha * direction
        residual -= alpha * a_direction
        rr_new = residual @ residual
        direction = residual + (rr_new / rr) * direction
        rr = rr_new
    return x


def flat_grad(value: torch.Tensor, params: Sequence[nn.Parameter], create_graph: bool = False,
              retain_graph: bool | None = None) -> torch.Tensor:
    """The gradient of ``value`` with respect to ``params``, as one vector (zeros for an unused parameter)."""
    grads = torch.autograd.grad(value, list(params), create_graph=create_graph, retain_graph=retain_graph,
                                allow_unused=True)
    return torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(grads, params)])


@dataclass
class TrustRegionResult:
    """What one step did: the KL and surrogate improvement of the accepted parameters (0 where none was), the first-
    order improvement the full step promised, and the line search's fraction of the full step (0: rejected)."""

    kl: float
    improvement: float
    expected_improvement: float
    step_fraction: float


def trust_region_step(params: Sequence[nn.Parameter], surrogate: Callable[[], torch.Tensor],
                      kl: Callable[[], torch.Tensor], max_kl: float, cg_iterations: int = 10, damping: float = 0.1,
                      backtrack: float = 0.8, line_search_steps: int = 10,
                      accept_ratio: float = 0.5) -> TrustRegionResult:
    """Move ``params`` (in place) to maximise ``surrogate()`` within ``kl() <= max_kl``, where ``kl()`` is the KL from
    the parameters as they are now (0 there, its Hessian the Fisher matrix). The full step is ``sqrt(2 max_kl / xᵀFx)
    x`` with ``x ≈ F⁻¹ g`` (``F`` damped by ``damping``); the line search tries fractions ``backtrack^k`` and keeps the
    first whose KL is within ``max_kl``, whose surrogate rose, and whose rise is at least ``accept_ratio`` of the
    first-order one; if none, the parameters are left as they were."""
    params = list(params)
    start = nn.utils.parameters_to_vector(params).detach().clone()
    before = surrogate()
    gradient = flat_grad(before, params).detach()
    before = before.item()
    if not gradient.any():
        return TrustRegionResult(0.0, 0.0, 0.0, 0.0)
    kl_gradient = flat_grad(kl(), params, create_graph=True)

    def fisher_product(vector: torch.Tensor) -> torch.Tensor:
        return flat_grad(kl_gradient @ vector, params, retain_graph=True).detach() + damping * vector

    direction = conjugate_gradient(fisher_product, gradient, iterations=cg_iterations)
    curvature = direction @ fisher_product(direction)
    step = torch.sqrt(2 * max_kl / curvature.clamp_min(1e-12)) * direction
    expected = float(gradient @ step)
    fraction = 1.0
    with torch.no_grad():
        for _ in range(line_search_steps):
            nn.utils.vector_to_parameters(start + fraction * step, params)
            divergence, improvement = float(kl()), float(surrogate()) - before
            if divergence <= max_kl and improvement > 0 and improvement >= accept_ratio * fraction * expected:
                return TrustRegionResult(divergence, improvement, expected, fraction)
            fraction *= backtrack
        nn.utils.vector_to_parameters(start, params)
    return TrustRegionResult(0.0, 0.0, expected, 0.0)
