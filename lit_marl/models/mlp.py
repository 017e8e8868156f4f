"""Multi-layer perceptron per group (BenchMARL's default model)."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn
from torchrl.modules import MLP, MultiAgentMLP

from lit_marl.models.base import ModelConfig
from lit_marl.errors import ConfigError


def _activation(name: str) -> type[nn.Module]:
    cls = getattr(nn, name, None)
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        allowed = "Tanh, ReLU, ELU, LeakyReLU, GELU, SiLU, Mish, Softplus (any torch.nn module name)"
        raise ConfigError(f"activation_class: {name!r} is not a torch.nn module; allowed e.g. {allowed}")
    return cls


class Mlp(ModelConfig):
    """Fully connected network.

    Args:
        num_cells: hidden layer widths, e.g. ``[256, 256]`` (BenchMARL's default).
        activation_class: name of a ``torch.nn`` activation, e.g. ``"Tanh"`` (default), ``"ReLU"``.
        layer_norm: apply LayerNorm after every hidden layer.
    """

    def __init__(self, num_cells: Sequence[int] = (256, 256), activation_class: str = "Tanh", layer_norm: bool = False) -> None:
        cells = list(num_cells)
        if not cells or any(not isinstance(c, int) or isinstance(c, bool) or c <= 0 for c in cells):
            raise ConfigError(f"num_cells: must be a non-empty list of positive integers, got {num_cells!r}")
        _activation(activation_class)
        self.num_cells = cells
        self.activation_class = activation_class
        self.layer_norm = bool(layer_norm)

    def _layer_kwargs(self) -> dict:
        kwargs: dict = {"num_cells": list(self.num_cells), "activation_class": _activation(self.activation_class)}
        if self.layer_norm:
            kwargs["norm_class"] = nn.LayerNorm
            kwargs["norm_kwargs"] = [{"normalized_shape": c} for c in self.num_cells]
        return kwargs

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

    def build_single(self, in_features, out_features, device=None):
        return MLP(in_features=in_features, out_features=out_features, device=device, **self._layer_kwargs())
