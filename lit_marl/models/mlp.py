"""Multi-layer perceptron per group (BenchMARL's default model)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torchrl.modules import MLP, MultiAgentMLP
from typing_extensions import override

from lit_marl.models.base import ModelConfig
from lit_marl.errors import ConfigError, check_types


def activation_module(name: str, field: str = "activation_class") -> type[nn.Module]:
    cls = getattr(nn, name, None) if isinstance(name, str) else None
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        allowed = "Tanh, ReLU, ELU, LeakyReLU, GELU, SiLU, Mish, Softplus (any torch.nn module name)"
        raise ConfigError(f"{field}: {name!r} is not a torch.nn module; allowed e.g. {allowed}")
    return cls


def positive_ints(field: str, value: Sequence[int], allow_empty: bool = False) -> list[int]:
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
        agent_id: append each agent's one-hot index (among its group's agents) to its input, as EPyMARL does for
            parameter-shared agents (``obs_agent_id``): agents with one set of weights and alike observations can
            then act differently. Off by default (BenchMARL has no such input). Only where the network reads each
            agent's inputs: refused for a critic of the global state or one network per agent.
    """

    def __init__(self, num_cells: Sequence[int] = (256, 256), activation_class: str = "Tanh",
                 layer_norm: bool = False, agent_id: bool = False) -> None:
        check_types(Mlp.__init__, {"num_cells": num_cells, "activation_class": activation_class,
                                   "layer_norm": layer_norm, "agent_id": agent_id})
        self.num_cells = positive_ints("num_cells", num_cells)
        activation_module(activation_class)
        self.activation_class = activation_class
        self.layer_norm = bool(layer_norm)
        self.agent_id = bool(agent_id)

    def _layer_kwargs(self) -> dict:
        kwargs: dict = {"num_cells": list(self.num_cells), "activation_class": activation_module(self.activation_class)}
        if self.layer_norm:
            kwargs["norm_class"] = nn.LayerNorm
            kwargs["norm_kwargs"] = [{"normalized_shape": c} for c in self.num_cells]
        return kwargs

    @override
    def build_multi_agent(self, n_agent_inputs, n_agent_outputs, n_agents, centralised, share_params, device=None):
        return LeanMultiAgentMLP(
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
        if self.agent_id:
            raise ConfigError("agent_id: true, but this network reads no input per agent (a critic of the global "
                              "state, or one network per agent), so there is no agent to index; allowed: false")
        return MLP(in_features=in_features, out_features=out_features, device=device, **self._layer_kwargs())


class LeanMultiAgentMLP(MultiAgentMLP):
    """torchrl's ``MultiAgentMLP`` (same parameters, same ``state_dict``, same outputs), whose shared-parameter
    forward calls the layers' functions on the parameters directly.

    torchrl's shared-parameter forward moves the parameters into an empty copy of the network and out again
    (``TensorDictParams.to_module``) on every call: ~0.2 ms of Python per call, several calls per optimizer step
    (online and target networks). Reading each parameter at call time keeps torchrl losses' parameter swaps (target
    networks) working. Agents with their own parameters (``vmap``) keep torchrl's forward.
    """

    @override
    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        layers = self._lean_layers()
        if not self.share_params or layers is None:
            return super().forward(*inputs)
        x = torch.cat(inputs, -1) if len(inputs) > 1 else inputs[0]
        agent_dim = self.agent_dim if self.agent_dim >= 0 else x.ndim + self.agent_dim
        x = self._pre_forward_check(x)
        params = self.params
        for key, layer in layers:
            if isinstance(layer, nn.Linear):
                x = F.linear(x, params.get((key, "weight")), params.get((key, "bias"), None))
            elif isinstance(layer, nn.LayerNorm):
                x = F.layer_norm(x, layer.normalized_shape, params.get((key, "weight"), None),
                                 params.get((key, "bias"), None), layer.eps)
            else:
                x = layer(x)
        if self.centralized:  # one output for the whole group, the same for every agent (as torchrl's)
            x = x.unsqueeze(agent_dim)
            x = x.expand(*x.shape[:agent_dim], self.n_agents, *x.shape[agent_dim + 1:])
        return x

    def _lean_layers(self) -> list[tuple[str, nn.Module]] | None:
        """The empty network's layers by parameter key, or None where one is not a plain Linear, LayerNorm or
        parameter-free layer (then torchrl's forward runs)."""
        if not hasattr(self, "_lean"):
            layers = []
            for key, layer in self._empty_net.named_children():
                plain = isinstance(layer, (nn.Linear, nn.LayerNorm)) or not list(layer.named_parameters()) \
                    and key not in self.params.keys()
                if not plain or len(list(layer.children())):
                    layers = None
                    break
                layers.append((key, layer))
            self._lean = layers
        return self._lean
