"""Graph neural network over the agents of a group (``torch_geometric``, an optional extra).

Every agent is a node whose features are its inputs (and, optionally, its position and velocity). Edges say
which agents exchange messages in the one graph-convolution layer:

- ``full``: every pair of agents (the network is then centralised: each output depends on every agent);
- ``empty``: none (each agent on its own; with ``self_loops`` a node still sees itself);
- ``from_pos``: agents closer than ``edge_radius`` (positions read from the TensorDict, see
  ``position_key``).

Where positions are known and the convolution takes edge features (``edge_dim``: e.g. ``GATv2Conv``,
``GINEConv``, ``TransformerConv``), each edge carries the relative position, the distance and, with
velocities, the relative velocity. The convolution is shared by all nodes, so the output is equivariant:
permuting the agents permutes the outputs. Stack it with other models through ``Sequence``.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Sequence
from typing import Any

import torch
from tensordict.nn import TensorDictModule, TensorDictModuleBase
from torch import nn
from typing_extensions import override

from lit_marl.errors import ConfigError, check_types, one_of
from lit_marl.models.base import ModelConfig, ModelInputs

TOPOLOGIES = ("full", "empty", "from_pos")
INSTALL = 'pip install -e ".[gnn]"  (or: pip install torch-geometric)'


def _geometric_conv(name: str) -> type[nn.Module]:
    try:
        conv = importlib.import_module("torch_geometric.nn.conv")
    except ImportError as error:
        raise ConfigError(f"Gnn needs torch_geometric, which is not installed; fix: {INSTALL}") from error
    cls = getattr(conv, name, None)
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise ConfigError(f"gnn_class: {name!r} is not in torch_geometric.nn.conv; allowed e.g. GraphConv, GATv2Conv, "
                          f"GINEConv, TransformerConv, GCNConv, SAGEConv")
    return cls


class _GraphOverAgents(nn.Module):
    """``[*B, n_agents, F]`` node features (plus positions/velocities) → ``[*B, n_agents, out]``."""

    def __init__(self, conv: nn.Module, n_agents: int, topology: str, self_loops: bool, edge_radius: float | None,
                 feature_ndims: list[int], n_features: int, pos_slice: slice | None, vel_slice: slice | None,
                 pos_in_nodes: bool, edge_features: bool, head: nn.Module | None) -> None:
        super().__init__()
        self.conv, self.head = conv, head
        self.n_agents, self.topology, self.self_loops, self.edge_radius = n_agents, topology, self_loops, edge_radius
        self.feature_ndims, self.n_features = feature_ndims, n_features
        self.pos_slice, self.vel_slice = pos_slice, vel_slice
        self.pos_in_nodes, self.edge_features = pos_in_nodes, edge_features
        pairs = torch.ones(n_agents, n_agents, dtype=torch.bool)
        if topology == "empty":
            pairs = torch.zeros_like(pairs)
        pairs.fill_diagonal_(self_loops)
        self.register_buffer("fixed_pairs", pairs, persistent=False)

    @override
    def forward(self, *inputs: torch.Tensor):
        n = self.n_agents
        features = inputs[:len(self.feature_ndims)]
        extra = list(inputs[len(self.feature_ndims):])
        parts = [x if nd == 1 else x.flatten(x.dim() - nd) for x, nd in zip(features, self.feature_ndims)]
        x = parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
        batch_shape = x.shape[:-2]
        x = x.reshape(-1, n, x.shape[-1])  # [B', n, F]
        pos = extra.pop(0)[..., self.pos_slice].reshape(x.shape[0], n, -1) if self.pos_slice is not None else None
        vel = extra.pop(0)[..., self.vel_slice].reshape(x.shape[0], n, -1) if self.vel_slice is not None else None
        nodes = [x]
        if self.pos_in_nodes:
            nodes += [t for t in (pos, vel) if t is not None]
        nodes = torch.cat(nodes, dim=-1) if len(nodes) > 1 else x
        if self.topology == "from_pos":
            pairs = torch.cdist(pos, pos) <= self.edge_radius  # [B', n, n]
            eye = torch.eye(n, dtype=torch.bool, device=pairs.device)
            pairs = pairs & ~eye if not self.self_loops else pairs | eye
        else:
            pairs = self.fixed_pairs.expand(x.shape[0], n, n)
        b, target, source = pairs.nonzero(as_tuple=True)  # message source -> target
        edge_index = torch.stack([b * n + source, b * n + target])
        flat_nodes = nodes.reshape(-1, nodes.shape[-1])
        if self.edge_features:
            flat_pos = pos.reshape(-1, pos.shape[-1])
            relative = flat_pos[edge_index[0]] - flat_pos[edge_index[1]]
            attrs = [relative, relative.norm(dim=-1, keepdim=True)]
            if vel is not None:
                flat_vel = vel.reshape(-1, vel.shape[-1])
                attrs.append(flat_vel[edge_index[0]] - flat_vel[edge_index[1]])
            out = self.conv(flat_nodes, edge_index, torch.cat(attrs, dim=-1))
        else:
            out = self.conv(flat_nodes, edge_index)
        out = out.reshape(*batch_shape, n, out.shape[-1])
        return out if self.head is None else self.head(out)


class Gnn(ModelConfig):
    """One graph-convolution layer over the agents of a group (see the module docstring).

    Args:
        topology: ``full``, ``empty`` or ``from_pos``.
        edge_radius: with ``from_pos``, agents within this distance are connected.
        self_loops: connect every agent to itself too.
        gnn_class: a class of ``torch_geometric.nn.conv`` (default ``GraphConv``, as BenchMARL).
        gnn_kwargs: further arguments of that class (e.g. ``{heads: 2}``; ``in_channels``/``out_channels`` and,
            where it applies, ``edge_dim`` are set by lit-marl).
        position_key: entry under the group holding each agent's position (``[n_agents, d]``), e.g. ``pos``, or
            ``observation`` together with ``position_slice``.
        position_slice: ``[start, stop]`` of that entry's last dim (default: all of it).
        velocity_key: entry under the group holding each agent's velocity (edge features only), as
            ``position_key``.
        velocity_slice: ``[start, stop]`` of that entry's last dim (default: all of it).
        exclude_pos_from_node_features: keep positions and velocities out of the node features (they then
            reach the network only through edges, which makes it translation invariant).
    """

    def __init__(
        self,
        topology: str = "full",
        edge_radius: float | None = None,
        self_loops: bool = False,
        gnn_class: str = "GraphConv",
        gnn_kwargs: dict[str, Any] | None = None,
        position_key: str | None = None,
        position_slice: Sequence[int] | None = None,
        velocity_key: str | None = None,
        velocity_slice: Sequence[int] | None = None,
        exclude_pos_from_node_features: bool = False,
    ) -> None:
        check_types(Gnn.__init__, {k: v for k, v in locals().items() if k != "self"})
        self.topology = one_of("topology", topology, TOPOLOGIES)
        if topology == "from_pos":
            if isinstance(edge_radius, bool) or not isinstance(edge_radius, (int, float)) or edge_radius <= 0:
                raise ConfigError(f"edge_radius: topology 'from_pos' needs a positive edge_radius, got {edge_radius!r}")
            if position_key is None:
                raise ConfigError("position_key: topology 'from_pos' needs the entry holding agent positions (e.g. "
                                  "'pos', or 'observation' with position_slice: [0, 2]), got None")
        elif edge_radius is not None:
            raise ConfigError(f"edge_radius: only used with topology 'from_pos', got {edge_radius!r} with {topology!r}")
        self.edge_radius = None if edge_radius is None else float(edge_radius)
        self.self_loops = bool(self_loops)
        self.gnn_class = gnn_class
        self.gnn_kwargs = dict(gnn_kwargs or {})
        for reserved in ("in_channels", "out_channels", "edge_dim"):
            if reserved in self.gnn_kwargs:
                raise ConfigError(f"gnn_kwargs: {reserved!r} is set by lit-marl from the task; remove it")
        self.position_key, self.velocity_key = position_key, velocity_key
        self.position_slice = _check_slice("position_slice", position_slice)
        self.velocity_slice = _check_slice("velocity_slice", velocity_slice)
        if velocity_key is not None and position_key is None:
            raise ConfigError("velocity_key: velocities are used with positions only; set position_key too")
        self.exclude_pos_from_node_features = bool(exclude_pos_from_node_features)

    @override
    def build_module(self, inputs: ModelInputs, out_keys, n_agent_outputs, centralised, share_params, head=None,
                     device=None) -> TensorDictModuleBase:
        field = inputs.field
        conv_class = _geometric_conv(self.gnn_class)
        if not share_params:
            raise ConfigError(f"{field}: Gnn shares one convolution between all agents (that is what makes it "
                              f"permutation equivariant); set share_params (share_policy_params/share_param_critic) "
                              f"to true, or use Mlp")
        if centralised and self.topology != "full":
            raise ConfigError(f"{field}: a centralised network must see every agent, but Gnn topology is "
                              f"{self.topology!r}; allowed: topology 'full', or a decentralised critic")
        extra_keys, widths = [], {}
        for name, key, cut in (("position", self.position_key, self.position_slice),
                               ("velocity", self.velocity_key, self.velocity_slice)):
            if key is None:
                continue
            full_key = (inputs.group, key)
            group_spec = inputs.spec[inputs.group] if inputs.spec is not None else None
            if group_spec is None or key not in group_spec.keys():
                available = sorted(group_spec.keys()) if group_spec is not None else []
                raise ConfigError(f"{name}_key: {key!r} is not an entry of group {inputs.group!r}; allowed: "
                                  f"{', '.join(map(str, available)) or 'none'}")
            shape = group_spec[key].shape
            width = len(range(shape[-1])[_as_slice(cut)]) if len(shape) == 2 else 0
            if width == 0:
                raise ConfigError(f"{name}_slice: {cut!r} of {full_key} (per-agent shape {list(shape[1:])}) selects "
                                  f"nothing; allowed: [start, stop] within 0..{shape[-1]}")
            extra_keys.append(full_key)
            widths[name] = width
        n_features = inputs.flat_features
        pos_in_nodes = not self.exclude_pos_from_node_features
        node_features = n_features + (sum(widths.values()) if pos_in_nodes else 0)
        edge_features = "position" in widths and "edge_dim" in inspect.signature(conv_class.__init__).parameters
        kwargs = dict(self.gnn_kwargs)
        if edge_features:
            kwargs["edge_dim"] = widths["position"] + 1 + widths.get("velocity", 0)
        try:
            conv = conv_class(node_features, n_agent_outputs, **kwargs)
        except TypeError as error:
            raise ConfigError(f"gnn_kwargs: {self.gnn_class} does not take {sorted(self.gnn_kwargs)}: {error}") from error
        if "heads" in kwargs and kwargs.get("concat", True) and kwargs["heads"] > 1:
            raise ConfigError("gnn_kwargs: multi-head attention must not concatenate heads here (the layer's output is "
                              "the model's output); add concat: false")
        module = _GraphOverAgents(
            conv.to(device) if device is not None else conv, inputs.n_agents, self.topology, self.self_loops,
            self.edge_radius, [len(s) for s in inputs.shapes], n_features,
            _as_slice(self.position_slice) if "position" in widths else None,
            _as_slice(self.velocity_slice) if "velocity" in widths else None,
            pos_in_nodes, edge_features, head,
        )
        return TensorDictModule(module, in_keys=[*inputs.keys, *extra_keys], out_keys=list(out_keys))

    @override
    def build_multi_agent(self, n_agent_inputs, n_agent_outputs, n_agents, centralised, share_params, device=None):
        if self.position_key is not None:
            raise ConfigError("Gnn with positions reads them from the task's TensorDict; it cannot be built over "
                              "flat features alone")
        inputs = ModelInputs(group="", n_agents=n_agents, keys=["x"], shapes=[torch.Size([n_agent_inputs])])
        return self.build_module(inputs, ["y"], n_agent_outputs, centralised, share_params, device=device).module


def _check_slice(name: str, value: Sequence[int] | None) -> list[int] | None:
    if value is None:
        return None
    items = list(value) if isinstance(value, (list, tuple)) else None
    if items is None or len(items) != 2 or any(not isinstance(v, int) or isinstance(v, bool) or v < 0 for v in items) \
            or items[0] >= items[1]:
        raise ConfigError(f"{name}: must be [start, stop] with 0 <= start < stop, got {value!r}")
    return items


def _as_slice(value: list[int] | None) -> slice:
    return slice(None) if value is None else slice(value[0], value[1])
