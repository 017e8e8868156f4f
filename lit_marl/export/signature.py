"""What an exported policy reads and writes: the deterministic policy of one group as a plain ``nn.Module`` over
tensors, its inputs and outputs (names, shapes, dtypes, action bounds) and example inputs to trace and check it."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModuleBase, TensorDictSequential
from tensordict.utils import NestedKey
from torch import nn
from torchrl.data import Binary, Composite, TensorSpec
from torchrl.envs.utils import ExplorationType, set_exploration_type
from typing_extensions import override

from lit_marl.algorithms.common import MaskGuard
from lit_marl.errors import ConfigError
from lit_marl.models.recurrent import recurrent_state_specs

@dataclass(frozen=True)
class TensorInfo:
    """One input or output of an exported policy: its name, the TensorDict key it stands for, and the shape of one
    environment's entry (the leading ``batch`` dimension excluded)."""

    name: str
    key: NestedKey
    shape: tuple[int, ...]
    dtype: torch.dtype

    def to_json(self) -> dict[str, Any]:
        key = list(self.key) if isinstance(self.key, tuple) else [self.key]
        return {"name": self.name, "key": key, "shape": ["batch", *self.shape],
                "dtype": str(self.dtype).removeprefix("torch.")}


class DeterministicPolicy(nn.Module):
    """One group's policy as a function of plain tensors: ``forward(*inputs) -> action`` (or ``(action,
    *next_hidden_states)`` for recurrent policies), each ``[batch, n_agents, …]``, under
    ``set_exploration_type(DETERMINISTIC)``.

    Args:
        policy: the group's TensorDict policy (a copy of it is kept: exporting traces and may cache state).
        input_keys: the TensorDict entries ``forward``'s arguments stand for, in order.
        output_keys: the entries returned, the action first.
    """

    def __init__(self, policy: TensorDictModuleBase, input_keys: list[NestedKey], output_keys: list[NestedKey]) -> None:
        super().__init__()
        self.policy = _without_mask_guards(copy.deepcopy(policy)).cpu().eval()
        self.input_keys = list(input_keys)
        self.output_keys = list(output_keys)

    @override
    def forward(self, *inputs: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        data = TensorDict(dict(zip(self.input_keys, inputs)), batch_size=inputs[0].shape[:1])
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            out = self.policy(data)
        outputs = tuple(out.get(key) for key in self.output_keys)
        return outputs[0] if len(outputs) == 1 else outputs


class _PassThrough(TensorDictModuleBase):
    """Stands in for the mask check in an exported graph."""

    def __init__(self) -> None:
        super().__init__()
        self.in_keys, self.out_keys = [], []

    @override
    def forward(self, tensordict):
        return tensordict


def _without_mask_guards(policy: nn.Module) -> nn.Module:
    """Drop :class:`~lit_marl.algorithms.common.MaskGuard` from a (copied) policy: its check that every agent has a
    legal action branches on the data, which no traced graph can hold (``torch.export`` refuses it). An exported
    policy given a mask without any legal action returns action 0 for that agent."""
    for module in policy.modules():
        if isinstance(module, TensorDictSequential):
            for i, sub in enumerate(module.module):
                if isinstance(sub, MaskGuard):
                    module.module[i] = _PassThrough()
    return policy


# ------------------------------------------------------------------------------------------ signatures
def _name(key: NestedKey, group: str) -> str:
    parts = list(key) if isinstance(key, tuple) else [key]
    if parts[0] == group:
        parts = parts[1:]
    elif parts[0] == "next" and len(parts) > 1 and parts[1] == group:
        parts = ["next", *parts[2:]]
    return ".".join(parts)


def _entry_spec(module, group: str, key: NestedKey) -> TensorSpec:
    """The spec of one environment's ``key`` (observations from the task, hidden states from the networks)."""
    observation_spec: Composite = module.task.specs.observation_spec
    if key in observation_spec.keys(include_nested=True):
        return observation_spec[key]
    states = recurrent_state_specs(module.policies[group])
    plain = key[1:] if isinstance(key, tuple) and key[0] == "next" else key
    if plain in states:
        return states[plain]
    if key == "is_init":
        return Binary(n=1, shape=(1,), dtype=torch.bool)
    raise ConfigError(f"export: the policy of group {group!r} reads {key!r}, which is neither an observation of the "
                      f"task nor a recurrent state; allowed: policies over the task's observations")


def policy_signature(module, group: str) -> tuple[list[TensorInfo], list[TensorInfo]]:
    """Inputs and outputs of ``group``'s exported policy: what the policy reads (and does not write itself), then the
    action and, for recurrent networks, the next hidden states."""
    policy = module.policies[group]
    produced = set(policy.out_keys)
    input_keys = [k for k in dict.fromkeys(policy.in_keys) if k not in produced]
    action_key = (group, "action")
    if action_key not in produced:
        raise ConfigError(f"export: the policy of group {group!r} writes no {action_key!r}; allowed: lit-marl policies")
    output_keys = [action_key, *(k for k in policy.out_keys if isinstance(k, tuple) and k[0] == "next")]
    inputs = [TensorInfo(_name(k, group), k, tuple(_entry_spec(module, group, k).shape),
                         _entry_spec(module, group, k).dtype) for k in input_keys]
    action_spec = module.task.specs.group_action_spec(group)
    outputs = [TensorInfo("action", action_key, tuple(action_spec.shape), action_spec.dtype)]
    outputs += [TensorInfo(_name(k, group), k, tuple(_entry_spec(module, group, k).shape),
                           _entry_spec(module, group, k).dtype) for k in output_keys[1:]]
    return inputs, outputs


def action_bounds(module, group: str) -> dict[str, Any]:
    """``{"type": "continuous", "low": …, "high": …}`` (per agent and dim) or ``{"type": "discrete", "n": …,
    "encoding": "index"|"one_hot"}``."""
    spec = module.task.specs.group_action_spec(group)
    if module.task.continuous_actions:
        return {"type": "continuous", "low": spec.space.low.tolist(), "high": spec.space.high.tolist()}
    one_hot = tuple(spec.shape) == (module.task.specs.n_agents(group), spec.space.n)
    return {"type": "discrete", "n": int(spec.space.n), "encoding": "one_hot" if one_hot else "index"}


def example_inputs(module, group: str, inputs: list[TensorInfo], batch: int, seed: int = 0) -> list[torch.Tensor]:
    """Random entries ``[batch, *shape]`` drawn from the specs (masks with at least one legal action per agent)."""
    mask_key = module.task.action_mask_key(group)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        tensors = []
        for info in inputs:
            value = _entry_spec(module, group, info.key).rand((batch,)).to(info.dtype)
            if info.key == mask_key:
                legal = torch.randint(value.shape[-1], value.shape[:-1])
                value = value.scatter(-1, legal.unsqueeze(-1), True)
            tensors.append(value)
    return tensors
