"""Gradient clipping per loss, as BenchMARL clips: the parameters of each loss by their own norm."""

from __future__ import annotations

from collections.abc import Callable

import torch


def clip_per_loss(optimizer: torch.optim.Optimizer, clip_val: float | None, algorithm: str | None,
                  skip_non_finite: Callable[[str], bool]) -> dict[str, torch.Tensor]:
    """Clip the gradients of each clip group (the ``clip`` name of the optimizer's parameter groups: a learner's
    ``clip_group``) by that group's own total norm, by ``clip_val`` (None or 0: no clipping, as in Lightning;
    ``algorithm`` ``"value"`` clips each gradient's values instead). Returns each group's norm before clipping, in
    order. A norm that is not finite is reported to ``skip_non_finite`` (the NaN policy: it raises, or returns whether
    to skip the step); to skip, every gradient is dropped (Adam leaves a parameter without one alone) and the norms so
    far are returned."""
    clip_groups: dict[str, list[torch.Tensor]] = {}
    for param_group in optimizer.param_groups:
        name = param_group.get("clip", param_group.get("name"))
        clip_groups.setdefault(name, []).extend(p for p in param_group["params"] if p.grad is not None)
    norms: dict[str, torch.Tensor] = {}
    for name, params in clip_groups.items():
        if not params:
            continue
        norm = torch.nn.utils.get_total_norm([p.grad for p in params])  # once: checked, clipped with, reported
        if not torch.isfinite(norm) and skip_non_finite(f"gradient of {name} is {norm.item()} (norm)"):
            for group in optimizer.param_groups:
                for p in group["params"]:
                    p.grad = None
            return norms
        if clip_val and algorithm == "value":
            torch.nn.utils.clip_grad_value_(params, clip_val)
        elif clip_val:
            torch.nn.utils.clip_grads_with_norm_(params, float(clip_val), norm)
        norms[name] = norm
    return norms
