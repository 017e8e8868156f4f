"""Models applied one after the other (e.g. a Gnn that mixes the agents' information, then an Mlp)."""

from __future__ import annotations

import torch
from tensordict.nn import TensorDictModuleBase, TensorDictSequential
from typing_extensions import override

from lit_marl.errors import ConfigError, check_types
from lit_marl.models.base import ModelConfig, ModelInputs
from lit_marl.utils import instantiate


class Sequence(ModelConfig):
    """``layers[0]`` reads the group's inputs, each next layer reads the previous one's output, the last writes the
    network's output. Intermediate outputs are ``[*B, n_agents, intermediate_sizes[i]]`` entries of the group
    (named after the output, e.g. ``(group, "state_value_0")``). Every layer gets the same ``centralised`` and
    ``share_params`` as the whole.

    Args:
        layers: model configs (two or more).
        intermediate_sizes: width between consecutive layers (one fewer than ``layers``; default 64 each).
    """

    def __init__(self, layers: list[ModelConfig], intermediate_sizes: list[int] | None = None) -> None:
        check_types(Sequence.__init__, {"layers": layers, "intermediate_sizes": intermediate_sizes})
        if intermediate_sizes is not None and any(s <= 0 for s in intermediate_sizes):
            raise ConfigError(f"intermediate_sizes: must be positive integers, got {intermediate_sizes!r}")
        if len(layers) < 2:
            raise ConfigError(f"layers: a Sequence needs a list of two or more model configs, got {layers!r}")
        self.layers = [instantiate(layer, ModelConfig, f"layers[{i}]") for i, layer in enumerate(layers)]
        sizes = [64] * (len(self.layers) - 1) if intermediate_sizes is None else list(intermediate_sizes)
        if len(sizes) != len(self.layers) - 1:
            raise ConfigError(f"intermediate_sizes: needs {len(self.layers) - 1} positive integers (one between each "
                              f"pair of layers), got {intermediate_sizes!r}")
        self.intermediate_sizes = sizes

    @override
    def build_module(self, inputs: ModelInputs, out_keys, n_agent_outputs, centralised, share_params, head=None,
                     device=None) -> TensorDictModuleBase:
        modules = []
        stem = out_keys[0][-1] if isinstance(out_keys[0], tuple) else out_keys[0]
        layer_inputs = inputs
        for i, layer in enumerate(self.layers):
            last = i == len(self.layers) - 1
            keys = list(out_keys) if last else [(inputs.group, f"{stem}_{i}")]
            size = n_agent_outputs if last else self.intermediate_sizes[i]
            modules.append(layer.build_module(layer_inputs, keys, size, centralised, share_params,
                                              head=head if last else None, device=device))
            layer_inputs = ModelInputs(group=inputs.group, n_agents=inputs.n_agents, keys=keys,
                                       shapes=[torch.Size([size])], spec=inputs.spec, field=inputs.field)
        return TensorDictSequential(*modules)

    @property
    @override
    def is_recurrent(self) -> bool:
        return any(layer.is_recurrent for layer in self.layers)
