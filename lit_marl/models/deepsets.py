"""Deep Sets (Zaheer et al., 2017): a network of a set that does not depend on the order of its elements.

``rho(aggregate_i phi(x_i))``: ``phi`` (the local network) maps every element, an order-free aggregation (sum,
mean or max) pools them, ``rho`` (the global network) maps the pooled vector.

- In a **centralised** network (MAPPO/MADDPG critics) the set is the group's agents: each element is one
  agent's inputs, and every agent's output is ``rho`` of the pooled agents, so permuting the agents leaves
  every output unchanged (with ``share_params=False`` each agent has its own ``rho``).
- In a **decentralised** network (policies, independent critics) the set lies inside each agent's
  observation: entries of shape ``[n_elements, features]`` per agent (e.g. the entities an agent sees); flat
  entries such as a Q-function's action join every element.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict.nn import TensorDictModule, TensorDictModuleBase
from torch import nn
from torchrl.modules import MLP, MultiAgentMLP
from typing_extensions import override

from lit_marl.errors import ConfigError, check_types, one_of
from lit_marl.models.base import ModelConfig, ModelInputs
from lit_marl.models.mlp import activation_module, positive_ints

AGGREGATIONS = ("sum", "mean", "max")


def _aggregate(x: torch.Tensor, how: str, dim: int) -> torch.Tensor:
    if how == "sum":
        return x.sum(dim)
    if how == "mean":
        return x.mean(dim)
    return x.amax(dim)


class _CentralisedSet(nn.Module):
    """Agents as the set: ``[*B, n_agents, F] -> [*B, n_agents, out]``."""

    def __init__(self, phi: nn.Module, rho: nn.Module, aggregation: str, n_agents: int, feature_ndims: list[int],
                 head: nn.Module | None) -> None:
        super().__init__()
        self.phi, self.rho, self.head = phi, rho, head
        self.aggregation, self.n_agents, self.feature_ndims = aggregation, n_agents, feature_ndims

    @override
    def forward(self, *inputs: torch.Tensor):
        parts = [x if nd == 1 else x.flatten(x.dim() - nd) for x, nd in zip(inputs, self.feature_ndims)]
        x = parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
        pooled = _aggregate(self.phi(x), self.aggregation, dim=-2)  # [*B, local_out]
        pooled = pooled.unsqueeze(-2).expand(*pooled.shape[:-1], self.n_agents, pooled.shape[-1])
        out = self.rho(pooled)
        return out if self.head is None else self.head(out)


class _PerAgentSet(nn.Module):
    """Each agent's elements as its set: ``[*B, n_agents, n_elements, F] -> [*B, n_agents, out]``."""

    def __init__(self, phi: nn.Module, rho: nn.Module, aggregation: str, set_slots: list[int],
                 head: nn.Module | None) -> None:
        super().__init__()
        self.phi, self.rho, self.head = phi, rho, head
        self.aggregation, self.set_slots = aggregation, set_slots

    @override
    def forward(self, *inputs: torch.Tensor):
        sets = [inputs[i] for i in self.set_slots]
        n_elements = sets[0].shape[-2]
        # flat entries (e.g. the agent's action) join every element of its set
        flat = [x.unsqueeze(-2).expand(*x.shape[:-1], n_elements, x.shape[-1])
                for i, x in enumerate(inputs) if i not in self.set_slots]
        elements = torch.cat([*sets, *flat], dim=-1) if len(sets) + len(flat) > 1 else sets[0]
        # phi maps [*B, n_agents, n_elements, F]; the agent dim stays at -3 for per-agent weights
        pooled = _aggregate(self.phi(elements), self.aggregation, dim=-2)  # [*B, n_agents, local_out]
        out = self.rho(pooled)
        return out if self.head is None else self.head(out)


class _PerAgentElements(nn.Module):
    """``MultiAgentMLP`` applied to every element: moves the element dim out of the agent dim's way."""

    def __init__(self, net: MultiAgentMLP) -> None:
        super().__init__()
        self.net = net

    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [*B, n_agents, n_elements, F]
        return self.net(x.transpose(-3, -2)).transpose(-3, -2)


class DeepSets(ModelConfig):
    """Permutation-invariant network (see the module docstring for what the set is).

    Defaults follow BenchMARL's DeepSets: local network 128-128 with a 128-wide output, global network 256-256,
    sum aggregation.

    Args:
        local_nn_num_cells: hidden widths of ``phi``.
        local_nn_out_features: width of ``phi``'s output (what is pooled).
        global_nn_num_cells: hidden widths of ``rho``.
        aggregation: ``sum``, ``mean`` or ``max``.
        activation_class: ``torch.nn`` activation of both networks.
    """

    def __init__(
        self,
        local_nn_num_cells: Sequence[int] = (128, 128),
        local_nn_out_features: int = 128,
        global_nn_num_cells: Sequence[int] = (256, 256),
        aggregation: str = "sum",
        activation_class: str = "Tanh",
    ) -> None:
        check_types(DeepSets.__init__, {k: v for k, v in locals().items() if k != "self"})
        self.local_nn_num_cells = positive_ints("local_nn_num_cells", local_nn_num_cells, allow_empty=True)
        self.local_nn_out_features = positive_ints("local_nn_out_features", [local_nn_out_features])[0]
        self.global_nn_num_cells = positive_ints("global_nn_num_cells", global_nn_num_cells, allow_empty=True)
        self.aggregation = one_of("aggregation", aggregation, AGGREGATIONS)
        activation_module(activation_class)
        self.activation_class = activation_class

    def _mlp(self, n_in: int, n_out: int, cells: list[int], device) -> MLP:
        return MLP(in_features=n_in, out_features=n_out, num_cells=list(cells), device=device,
                   activation_class=activation_module(self.activation_class))

    def _multi_agent_mlp(self, n_in: int, n_out: int, n_agents: int, share_params: bool, cells: list[int],
                         device) -> MultiAgentMLP:
        return MultiAgentMLP(n_agent_inputs=n_in, n_agent_outputs=n_out, n_agents=n_agents, centralized=False,
                             share_params=share_params, num_cells=list(cells), device=device,
                             activation_class=activation_module(self.activation_class))

    @override
    def build_module(self, inputs: ModelInputs, out_keys, n_agent_outputs, centralised, share_params, head=None,
                     device=None) -> TensorDictModuleBase:
        width = self.local_nn_out_features
        if centralised:
            # phi must be one network for every agent: that is what makes the output order-free
            phi = self._mlp(inputs.flat_features, width, self.local_nn_num_cells, device)
            rho = self._multi_agent_mlp(width, n_agent_outputs, inputs.n_agents, share_params,
                                        self.global_nn_num_cells, device)
            module = _CentralisedSet(phi, rho, self.aggregation, inputs.n_agents,
                                     [len(s) for s in inputs.shapes], head)
            return TensorDictModule(module, in_keys=list(inputs.keys), out_keys=list(out_keys))
        set_slots = [i for i, shape in enumerate(inputs.shapes) if len(shape) == 2]
        others = [i for i in range(len(inputs.shapes)) if i not in set_slots]
        if not set_slots or any(len(inputs.shapes[i]) != 1 for i in others) or \
                len({inputs.shapes[i][0] for i in set_slots}) > 1:
            raise ConfigError(
                f"{inputs.field}: a decentralised DeepSets needs per-agent sets [n_elements, features] (all with the "
                f"same n_elements; other entries flat); group {inputs.group!r} reads {inputs.describe()}; allowed: "
                f"DeepSets as a centralised critic (the agents are the set), or Mlp"
            )
        n_features = sum(inputs.shapes[i][-1] for i in set_slots) + sum(inputs.shapes[i][0] for i in others)
        phi = _PerAgentElements(self._multi_agent_mlp(n_features, width, inputs.n_agents, share_params,
                                                      self.local_nn_num_cells, device))
        rho = self._multi_agent_mlp(width, n_agent_outputs, inputs.n_agents, share_params, self.global_nn_num_cells,
                                    device)
        module = _PerAgentSet(phi, rho, self.aggregation, set_slots, head)
        return TensorDictModule(module, in_keys=list(inputs.keys), out_keys=list(out_keys))

    @override
    def build_multi_agent(self, n_agent_inputs, n_agent_outputs, n_agents, centralised, share_params, device=None):
        if not centralised:
            raise ConfigError("DeepSets over flat per-agent features needs centralised=True (the agents are the set)")
        inputs = ModelInputs(group="", n_agents=n_agents, keys=["x"], shapes=[torch.Size([n_agent_inputs])])
        return self.build_module(inputs, ["y"], n_agent_outputs, True, share_params, device=device).module
