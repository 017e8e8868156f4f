"""Recurrent networks (GRU, LSTM) per agent, with their hidden state carried in the TensorDict.

A recurrent module reads its inputs, its hidden state ``(group, "<out>_hidden")`` (LSTM: also
``(group, "<out>_cell")``), each ``[*B, n_agents, n_layers, hidden_size]``, and ``"is_init"`` (``[*B, 1]``,
True on the first step of an episode, written by torchrl's :class:`~torchrl.envs.InitTracker`), and writes its
output and the next hidden state ``("next", group, "<out>_hidden")``. The hidden state is zeroed wherever
``is_init`` is set, so it never leaks from one episode into the next.

Two modes:

- **step** (default; collection, evaluation, and anywhere each step carries its stored hidden state): every batch
  element is one step, whatever the batch's shape;
- **sequence** (inside :func:`sequence_mode`; training on trajectory chunks): the last batch dim is time; the
  network starts from the hidden state stored at each chunk's first step and runs through the chunk, resetting
  where ``is_init`` is set, so gradients flow through time (truncated back-propagation through the chunk).

The environments need the hidden-state entries to exist from their first step: :func:`recurrent_state_specs`
collects them from a module, for a :class:`~torchrl.envs.TensorDictPrimer`.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import nn
from torchrl.data import Unbounded
from typing_extensions import override

from lit_marl.errors import ConfigError, check_types
from lit_marl.models.base import ModelConfig, ModelInputs, agent_ids, joint_input, joint_with_ids
from lit_marl.models.mlp import positive_ints

_MODE = threading.local()


@contextlib.contextmanager
def sequence_mode(enabled: bool = True) -> Iterator[None]:
    """Within this context, recurrent modules read the last batch dim as time (see the module docstring)."""
    previous = getattr(_MODE, "sequence", False)
    _MODE.sequence = enabled
    try:
        yield
    finally:
        _MODE.sequence = previous


def in_sequence_mode() -> bool:
    return getattr(_MODE, "sequence", False)


class MultiAgentRecurrent(TensorDictModuleBase):
    """GRU or LSTM layers then a linear output, per agent (one network shared by the group's agents, or one each)."""

    def __init__(self, kind: str, inputs: ModelInputs, out_keys: list[NestedKey], n_agent_outputs: int,
                 hidden_size: int, n_layers: int, centralised: bool, share_params: bool, head: nn.Module | None,
                 device=None, agent_ids: bool = False) -> None:
        super().__init__()
        self.agent_ids = agent_ids
        self.kind = kind
        self.n_agents, self.hidden_size, self.n_layers = inputs.n_agents, hidden_size, n_layers
        self.centralised, self.share_params = centralised, share_params
        self.feature_ndims = [len(shape) for shape in inputs.shapes]
        stem = out_keys[0][-1] if isinstance(out_keys[0], tuple) else out_keys[0]
        self.state_keys = [(inputs.group, f"{stem}_hidden")] + ([(inputs.group, f"{stem}_cell")] if kind == "lstm"
                                                                 else [])
        self.n_inputs = len(inputs.keys)
        self.in_keys = [*inputs.keys, *self.state_keys, "is_init"]
        self.out_keys = [*out_keys, *(("next", *key) for key in self.state_keys)]
        self.value_keys = list(out_keys)
        # a centralised network reads all agents' inputs; with ids, shared, it reads them and the agent's own index
        # (joint_with_ids, EPyMARL's critic): one output per agent, where the ids of all agents would be a constant
        self.joint = agent_ids and centralised and share_params
        n_in = (inputs.flat_features * inputs.n_agents + inputs.n_agents if self.joint else
                (inputs.flat_features + (inputs.n_agents if agent_ids else 0)) * (inputs.n_agents if centralised else 1))
        rnn_class = nn.GRU if kind == "gru" else nn.LSTM
        n_nets = 1 if share_params else inputs.n_agents
        self.rnns = nn.ModuleList(rnn_class(n_in, hidden_size, num_layers=n_layers, device=device)
                                  for _ in range(n_nets))
        self.outputs = nn.ModuleList(nn.Linear(hidden_size, n_agent_outputs, device=device) for _ in range(n_nets))
        self.head = head
        self.state_specs = {key: Unbounded((inputs.n_agents, n_layers, hidden_size), device=device)
                            for key in self.state_keys}

    def _features(self, tensordict: TensorDictBase) -> torch.Tensor:
        parts = []
        for key, nd in zip(self.in_keys[: self.n_inputs], self.feature_ndims):
            x = tensordict.get(key)
            parts.append(x if nd == 1 else x.flatten(x.dim() - nd))
        if self.joint:
            return joint_with_ids(parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1))
        if self.agent_ids:
            parts.append(agent_ids(parts[0], self.n_agents))
        x = parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)  # [*B, n_agents, F]
        return joint_input(x) if self.centralised else x  # centralised: every agent reads all agents' inputs

    def _step(self, x: torch.Tensor, states: list[torch.Tensor], reset: torch.Tensor | None):
        """One step. ``x`` ``[N, n_agents, F]``, states ``[N, n_agents, L, H]``, reset ``[N]``."""
        if reset is not None:
            keep = (~reset).to(x.dtype).view(-1, 1, 1, 1)
            states = [s * keep for s in states]
        outs, new_states = [], []
        agents = [slice(None)] if self.share_params else [slice(i, i + 1) for i in range(self.n_agents)]
        for rnn, linear, agent in zip(self.rnns, self.outputs, agents):
            xa = x[:, agent]  # [N, a, F]
            n, a = xa.shape[:2]
            # nn.GRU/LSTM: input [seq=1, batch, F], state [L, batch, H]
            rnn_states = [s[:, agent].reshape(n * a, self.n_layers, self.hidden_size).transpose(0, 1).contiguous()
                          for s in states]
            out, state = rnn(xa.reshape(1, n * a, -1), rnn_states[0] if self.kind == "gru" else tuple(rnn_states))
            state = [state] if self.kind == "gru" else list(state)
            outs.append(linear(out[0]).reshape(n, a, -1))
            new_states.append([s.transpose(0, 1).reshape(n, a, self.n_layers, self.hidden_size) for s in state])
        out = torch.cat(outs, dim=1) if len(outs) > 1 else outs[0]
        states = [torch.cat(parts, dim=1) if len(parts) > 1 else parts[0] for parts in zip(*new_states)]
        return out, states

    @override
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        x = self._features(tensordict)
        states = [tensordict.get(key) for key in self.state_keys]
        is_init = tensordict.get("is_init", None)
        batch = x.shape[:-2]
        if in_sequence_mode() and len(batch) >= 1:
            time = batch[-1]
            lead = batch[:-1].numel()
            xs = x.reshape(lead, time, self.n_agents, -1)
            resets = None if is_init is None else is_init.reshape(lead, time)
            # start from the state stored at each chunk's first step
            current = [s.reshape(lead, time, self.n_agents, self.n_layers, self.hidden_size)[:, 0] for s in states]
            outs, stored = [], []
            for t in range(time):
                out, current = self._step(xs[:, t], current, None if resets is None else resets[:, t])
                outs.append(out)
                stored.append(current)
            out = torch.stack(outs, dim=1).reshape(*batch, self.n_agents, -1)
            next_states = [torch.stack(parts, dim=1).reshape(*batch, self.n_agents, self.n_layers, self.hidden_size)
                           for parts in zip(*stored)]
        else:
            n = math.prod(batch)  # not batch.numel(): that fixes a symbolic batch size when exporting the policy
            out, next_states = self._step(
                x.reshape(n, self.n_agents, -1),
                [s.reshape(n, self.n_agents, self.n_layers, self.hidden_size) for s in states],
                None if is_init is None else is_init.reshape(n),
            )
            out = out.reshape(*batch, self.n_agents, -1)
            next_states = [s.reshape(*batch, self.n_agents, self.n_layers, self.hidden_size) for s in next_states]
        values = self.head(out) if self.head is not None else out
        values = values if isinstance(values, tuple) else (values,)
        for key, value in zip(self.value_keys, values):
            tensordict.set(key, value)
        for key, state in zip(self.state_keys, next_states):
            tensordict.set(("next", *key), state)
        return tensordict


class _Recurrent(ModelConfig):
    kind = ""

    def __init__(self, hidden_size: int = 128, n_layers: int = 1, agent_id: bool = False) -> None:
        check_types(_Recurrent.__init__, {"hidden_size": hidden_size, "n_layers": n_layers, "agent_id": agent_id})
        self.hidden_size = positive_ints("hidden_size", [hidden_size])[0]
        self.n_layers = positive_ints("n_layers", [n_layers])[0]
        self.agent_id = bool(agent_id)

    @override
    def build_module(self, inputs: ModelInputs, out_keys, n_agent_outputs, centralised, share_params, head=None,
                     device=None) -> TensorDictModuleBase:
        return MultiAgentRecurrent(self.kind, inputs, list(out_keys), n_agent_outputs, self.hidden_size, self.n_layers,
                                   centralised, share_params, head, device, agent_ids=self.agent_id)

    @override
    def build_single(self, in_features, out_features, device=None):
        raise ConfigError(f"critic_model: {type(self).__name__} reads the agents' observations step by step, not "
                          f"the global state; allowed: Mlp for a critic of the state")

    @property
    @override
    def is_recurrent(self) -> bool:
        return True


class Gru(_Recurrent):
    """GRU layers (hidden state carried across steps, reset at episode starts), then a linear output.

    Args:
        hidden_size: width of the hidden state (BenchMARL's default 128).
        n_layers: stacked GRU layers.
        agent_id: append each agent's one-hot index to its input (EPyMARL's ``obs_agent_id``, as :class:`Mlp`'s).
    """

    kind = "gru"


class Lstm(_Recurrent):
    """LSTM layers (hidden and cell state carried across steps, reset at episode starts), then a linear output.

    Args:
        hidden_size: width of the hidden and cell states (BenchMARL's default 128).
        n_layers: stacked LSTM layers.
        agent_id: append each agent's one-hot index to its input (EPyMARL's ``obs_agent_id``, as :class:`Mlp`'s).
    """

    kind = "lstm"


def recurrent_state_specs(module: nn.Module) -> dict[NestedKey, Unbounded]:
    """Hidden-state entries of every recurrent network inside ``module`` (per env, batch dims excluded)."""
    specs: dict[NestedKey, Unbounded] = {}
    for sub in module.modules():
        if isinstance(sub, MultiAgentRecurrent):
            specs.update(sub.state_specs)
    return specs
