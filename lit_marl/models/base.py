"""Model configurations: what network to build for a group, given the task's specs.

A model config is chosen in YAML (``actor_model``, ``critic_model``) and built per group by the algorithm.
The algorithm says which TensorDict entries the network reads (:class:`ModelInputs`: each
``[*B, n_agents, *feature_shape]``), where it writes its output ``[*B, n_agents, n_agent_outputs]``, and
whether the network is centralised (every agent's output may depend on every agent's inputs) or shares its
parameters between agents. :meth:`ModelConfig.build_module` returns the TensorDict module that does it.

Models over flat features (Mlp, DeepSets, Gnn) implement :meth:`ModelConfig.build_multi_agent`; the default
:meth:`ModelConfig.build_module` flattens and concatenates the inputs for them. Models that need the shape of
their inputs (Cnn) or entries of their own (Gnn positions) override :meth:`ModelConfig.build_module`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict.nn import TensorDictModule, TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import nn
from torchrl.data import Composite
from typing_extensions import override

from lit_marl.errors import ConfigError
from lit_marl.utils import Configurable


@dataclass(frozen=True)
class ModelInputs:
    """What a group's network reads.

    Attributes:
        group: the agent group.
        n_agents: agents in the group.
        keys: TensorDict entries read, each ``[*B, n_agents, *shape]``.
        shapes: the per-agent feature shape of each entry (agent dim excluded).
        spec: the task's whole observation spec (batch dims stripped), for models that read further
            entries (e.g. agent positions).
        field: the algorithm argument the model came from (``actor_model`` or ``critic_model``), for errors.
    """

    group: str
    n_agents: int
    keys: list[NestedKey]
    shapes: list[torch.Size]
    spec: Composite | None = field(default=None, compare=False)
    field: str = "actor_model"

    @classmethod
    def of(cls, task: Any, group: str, *keys: NestedKey, field: str = "actor_model") -> "ModelInputs":
        """Inputs read from ``task``'s specs (keys default to ``(group, "observation")``)."""
        specs = task.specs
        keys = keys or ((group, "observation"),)
        shapes = []
        for key in keys:
            if key == (group, "action"):
                shape = specs.group_action_spec(group).shape
            else:
                shape = specs.observation_spec[key].shape
            shapes.append(torch.Size(shape[1:]))  # drop the agent dim
        return cls(group=group, n_agents=specs.n_agents(group), keys=list(keys), shapes=shapes,
                   spec=specs.observation_spec, field=field)

    @property
    def flat_features(self) -> int:
        """Per-agent input width once every entry is flattened and concatenated (what an Mlp reads)."""
        return sum(shape.numel() for shape in self.shapes)

    def describe(self) -> str:
        """The entries and their per-agent shapes, e.g. ``"('agents', 'observation'): [18]"`` (for error messages)."""
        return ", ".join(f"{key}: {list(shape)}" for key, shape in zip(self.keys, self.shapes))


def as_features(x: torch.Tensor) -> torch.Tensor:
    """A network's float input: uint8 entries are pixels (Melting Pot's images), read as intensities in [0, 1];
    other dtypes are cast to float as they are."""
    if x.dtype == torch.uint8:
        return x.to(torch.float32) / 255
    return x if x.is_floating_point() else x.float()


def agent_ids(like: torch.Tensor, n_agents: int) -> torch.Tensor:
    """Each agent's one-hot index among the group's ``n_agents`` (EPyMARL's ``obs_agent_id``), shaped as ``like``'s
    ``[*B, n_agents, F]`` with ``n_agents`` features: row i of the identity for agent i."""
    ids = torch.eye(n_agents, dtype=like.dtype, device=like.device)
    return ids.expand(*like.shape[:-2], n_agents, n_agents)


def joint_input(x: torch.Tensor) -> torch.Tensor:
    """Every agent's ``[*B, n_agents, F]`` features joined, the same for each agent: ``[*B, n_agents, n_agents * F]``."""
    n = x.shape[-2]
    return x.flatten(-2).unsqueeze(-2).expand(*x.shape[:-2], n, n * x.shape[-1])


def joint_with_ids(x: torch.Tensor) -> torch.Tensor:
    """EPyMARL's centralised critic input (its ``centralV``): :func:`joint_input` followed by each agent's one-hot
    index, ``[*B, n_agents, n_agents * F + n_agents]``. A network shared by the agents then gives each its own output
    from the joint input."""
    return torch.cat([joint_input(x), agent_ids(x, x.shape[-2])], dim=-1)


class FlattenConcat(nn.Module):
    """Flattens each input's feature dims (after the agent dim), concatenates them (and, with ``agent_ids`` = the
    group's number of agents, each agent's one-hot index, EPyMARL's ``obs_agent_id``; with ``joint`` as well, all
    agents' features followed by the agent's index: :func:`joint_with_ids`) and applies ``net``, then ``head`` where
    given (e.g. splitting the output into a normal's location and scale)."""

    def __init__(self, net: nn.Module, feature_ndims: list[int], head: nn.Module | None = None,
                 agent_ids: int = 0, joint: bool = False) -> None:
        super().__init__()
        self.net = net
        self.head = head
        self.feature_ndims = list(feature_ndims)
        self.agent_ids = agent_ids
        self.joint = joint

    @override
    def forward(self, *inputs: torch.Tensor) -> Any:
        parts = [as_features(x if nd == 1 else x.flatten(x.dim() - nd)) for x, nd in zip(inputs, self.feature_ndims)]
        x = parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
        if self.joint:
            x = joint_with_ids(x)
        elif self.agent_ids:
            x = torch.cat([x, agent_ids(x, self.agent_ids)], dim=-1)
        out = self.net(x)
        return out if self.head is None else self.head(out)


class ModelConfig(Configurable):
    """Builds the networks of one group."""

    def build_multi_agent(
        self,
        n_agent_inputs: int,
        n_agent_outputs: int,
        n_agents: int,
        centralised: bool,
        share_params: bool,
        device: torch.device | str | None = None,
    ) -> nn.Module:
        """Maps ``[*B, n_agents, n_agent_inputs]`` to ``[*B, n_agents, n_agent_outputs]``.

        ``centralised``: every agent's output sees all agents' inputs (MAPPO/MADDPG critics);
        ``share_params``: one set of weights for all agents of the group.
        """
        raise ConfigError(f"{type(self).__name__} cannot be built over flat features; allowed: Mlp, DeepSets, Gnn")

    def build_single(self, in_features: int, out_features: int, device: torch.device | str | None = None) -> nn.Module:
        """Maps ``[*B, in_features]`` to ``[*B, out_features]`` (a critic of the global state, which has no agent
        dim)."""
        raise ConfigError(
            f"critic_model: {type(self).__name__} cannot read the global state (it has no agent dimension); "
            f"allowed: Mlp, or centralised_critic with the agents' observations"
        )

    def build_module(
        self,
        inputs: ModelInputs,
        out_keys: list[NestedKey],
        n_agent_outputs: int,
        centralised: bool,
        share_params: bool,
        head: nn.Module | None = None,
        device: torch.device | str | None = None,
    ) -> TensorDictModuleBase:
        """The module that reads ``inputs`` and writes ``out_keys`` (``head`` maps the network's
        ``[*B, n_agents, n_agent_outputs]`` to what ``out_keys`` name, e.g. a normal's loc and scale); with the
        model's ``agent_id``, each agent's input ends with its one-hot index; a centralised network shared by the
        agents then reads the joint input and the agent's index (:func:`joint_with_ids`, EPyMARL's critic) and gives
        each agent its own output, where without ids it gives them all the group's one."""
        ids = inputs.n_agents if getattr(self, "agent_id", False) else 0
        joint = bool(ids) and centralised and share_params  # the joint input is built here, per agent
        n_in = (inputs.n_agents if joint else 1) * inputs.flat_features + ids
        net = self.build_multi_agent(n_in, n_agent_outputs, inputs.n_agents, centralised=centralised and not joint,
                                     share_params=share_params, device=device)
        ndims = [len(shape) for shape in inputs.shapes]
        if len(inputs.keys) == 1 and ndims == [1] and not ids:
            # the common case: one flat entry; no wrapper (each module call costs microseconds per step)
            module = net if head is None else nn.Sequential(net, head)
        else:
            module = FlattenConcat(net, ndims, head, agent_ids=ids, joint=joint)
        return TensorDictModule(module, in_keys=list(inputs.keys), out_keys=list(out_keys))

    @property
    def is_recurrent(self) -> bool:
        """Whether the network carries a hidden state from step to step."""
        return False
