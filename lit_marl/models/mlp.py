"""Multi-layer perceptron per group (BenchMARL's default model)."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn
from torchrl.modules import MLP, MultiAgentMLP
from typing_extensions import override

from lit_marl.models.activations import activation
from lit_marl.models.base import ModelConfig
from lit_marl.errors import ConfigError, check_types


def _activation(name: str, field: str = "activation_class") -> type[nn.Module]:
    cls = activation(name)
    if cls is None:
        allowed = "Tanh, ReLU, ELU, LeakyReLU, GELU, SiLU, Mish, Softplus (any torch.nn module name)"
        raise ConfigError(f"{field}: {name!r} is not a torch.nn module; allowed e.g. {allowed}")
    return cls


def _positive_ints(field: str, value: Sequence[int], allow_empty: bool = False) -> list[int]:
    """A list of layer widths, checked."""
    cells = list(value) if isinstance(value, (list, tuple)) else None
    if cells is None or (not cells and not allow_empty) or any(
            not isinstance(c, int) or isinstance(c, bool) or c <= 0 for c in cells):
        empty = "" if allow_empty else "non-empty "
        raise ConfigError(f"{field}: must be a {empty}list of positive integers, got {value!r}")
    return cells


class Mlp(ModelConfig):
    """Fully connected network.

    Args:
        num_cells: hidden layer widths, e.g. ``[256, 256]`` (BenchMARL's default).
        activation_class: name of a ``torch.nn`` activation, e.g. ``"Tanh"`` (default), ``"ReLU"``.
        layer_norm: apply LayerNorm after every hidden layer.
    """

    def __init__(self, num_cells: Sequence[int] = (256, 256), activation_class: str = "Tanh",
                 layer_norm: bool = False) -> None:
        check_types(Mlp.__init__, {"num_cells": num_cells, "activation_class": activation_class,
                                   "layer_norm": layer_norm})
        self.num_cells = _positive_ints("num_cells", num_cells)
        _activation(activation_class)
        self.activation_class = activation_class
        self.layer_norm = bool(layer_norm)

    def _layer_kwargs(self) -> dict:
        kwargs: dict = {"num_cells": list(self.num_cells), "activation_class": _activation(self.activation_class)}
        if self.layer_norm:
            kwargs["norm_class"] = nn.LayerNorm
            kwargs["norm_kwargs"] = [{"normalized_shape": c} for c in self.num_cells]
        return kwargs

    @override
    def build_multi_agent(self, n_agent_inputs, n_agent_outputs, n_agents, centralised, share_params, device=None):
        return MultiAgentMLP(
            n_agent_inputs=n_agent_inputs,
            n_agent_outputs=n_agent_outputs,
            n_agents=n_agents,
            centralized=centralised,
            share_params=share_params,
            device=device,
            **self._layer_kwargs(),
        )

    @override
    def build_single(self, in_features, out_features, device=None):
        return MLP(in_features=in_features, out_features=out_features, device=device, **self._layer_kwargs())
