"""Activations lit-marl's models resolve by name (``activation_class: Tanh``), and the faster CPU kernel of tanh.

On the project's CPU (AMD EPYC, AVX-512; torch 2.13) ``torch.tanh`` of a ``[1600, 256]`` float32 activation takes
~1.5–2 ms, ``torch.sigmoid`` ~0.2 ms: tanh(x) = 2·sigmoid(2x) − 1 computed that way is the same function to within
2e-7 (one float rounding of the sigmoid), forward and backward 2× faster at MAPPO's minibatch (see
``benchmarks/README.md``). :class:`Tanh` uses it on CPU tensors only (on GPUs ``torch.tanh`` is one fused kernel and
faster than three), with tanh's own backward ``(1 − y²)·g`` from the saved output.
"""

from __future__ import annotations

import torch
from torch import nn
from typing_extensions import override


class _SigmoidTanh(torch.autograd.Function):
    """tanh through sigmoid; the backward is tanh's, from the output (also under ``vmap``: multi-agent networks
    without shared parameters run their agents' networks through it)."""

    generate_vmap_rule = True

    @staticmethod
    @override
    def forward(x: torch.Tensor) -> torch.Tensor:
        return _sigmoid_tanh(x)

    @staticmethod
    @override
    def setup_context(ctx, inputs: tuple[torch.Tensor], output: torch.Tensor) -> None:
        ctx.save_for_backward(output)

    @staticmethod
    @override
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)


def _sigmoid_tanh(x: torch.Tensor) -> torch.Tensor:
    if torch.is_grad_enabled():  # autograd may save the sigmoid's output: no in-place ops on it
        return torch.sigmoid(x * 2).mul(2).sub(1)
    y = x * 2  # the one new tensor: every further step in place (fewer allocations, lower peak memory)
    return y.sigmoid_().mul_(2).sub_(1)


class Tanh(nn.Tanh):
    """``nn.Tanh`` with the faster CPU kernel; the same module everywhere else (no parameters, same state_dict).

    Without gradients (collection, evaluation) and while a graph is traced or compiled (``lit-marl export``,
    ``compile: true``) it computes the same three ops without the autograd function, so exported policies compute
    exactly what the module does.
    """

    @override
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if input.device.type != "cpu":
            return torch.tanh(input)
        if (input.requires_grad and torch.is_grad_enabled() and not torch.compiler.is_compiling()
                and not torch.jit.is_tracing()):
            return _SigmoidTanh.apply(input)
        return _sigmoid_tanh(input)


#: activation names resolved to lit-marl's own module instead of ``torch.nn``'s
OWN = {"Tanh": Tanh}


def activation(name: str) -> type[nn.Module] | None:
    """The activation module class called ``name`` (lit-marl's where it has one, else ``torch.nn``'s), or None."""
    cls = OWN.get(name) if isinstance(name, str) else None
    if cls is None:
        cls = getattr(nn, name, None) if isinstance(name, str) else None
    return cls if isinstance(cls, type) and issubclass(cls, nn.Module) else None
