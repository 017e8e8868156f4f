"""Network pieces that several algorithm families share (stochastic policies, Q-functions)."""

from __future__ import annotations

import functools

import torch
from tensordict import TensorDictBase
from tensordict.nn import NormalParamExtractor, TensorDictModule, TensorDictModuleBase, TensorDictSequential
from torch import nn
from torchrl.modules import IndependentNormal, MaskedCategorical, ProbabilisticActor, TanhNormal
from typing_extensions import override

from lit_marl.envs.base import Task
from lit_marl.errors import ConfigError
from lit_marl.models import ModelConfig, ModelInputs


#: logit given to illegal actions (finite, so 0 * log p stays 0)
MASKED_LOGIT = -1e9


class TanhBounded(nn.Module):
    """``tanh`` mapped onto ``[low, high]`` (per action dim): what torchrl's ``TanhModule`` computes, as a head."""

    def __init__(self, low: torch.Tensor, high: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("low", torch.as_tensor(low, dtype=torch.float32).clone())
        self.register_buffer("high", torch.as_tensor(high, dtype=torch.float32).clone())

    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.low + (self.high - self.low) * (x.tanh() + 1) / 2


class FromState(nn.Module):
    """A value per agent from the global state (and optionally all agents' actions): ``-> [*B, n_agents, 1]``."""

    def __init__(self, net: nn.Module, state_ndim: int) -> None:
        super().__init__()
        self.net = net
        self.state_ndim = state_ndim

    @override
    def forward(self, state: torch.Tensor, *actions: torch.Tensor) -> torch.Tensor:
        inputs = [state.flatten(start_dim=state.dim() - self.state_ndim), *(a.flatten(-2) for a in actions)]
        return self.net(torch.cat(inputs, dim=-1)).unsqueeze(-1)


def stochastic_policy(task: Task, group: str, model: ModelConfig, share_params: bool, scale_mapping: str,
                      use_tanh_normal: bool, per_agent: bool = False) -> ProbabilisticActor:
    """Decentralised stochastic policy of ``group`` writing ``(group, "action")`` and its log-probability
    ``(group, "action_log_prob")``: tanh-normal (or normal) for continuous actions, categorical for discrete.
    ``per_agent``: one network per agent with parameter tensors of its own (:class:`PerAgent`)."""
    inputs = ModelInputs.of(task, group)
    action_spec = task.specs.group_action_spec(group)
    build = model.build_module if not per_agent else functools.partial(PerAgent.module, task, group, model)
    if task.continuous_actions:
        module = build(inputs, [(group, "loc"), (group, "scale")], 2 * action_spec.shape[-1],
                       centralised=False, share_params=share_params,
                       head=NormalParamExtractor(scale_mapping=scale_mapping))
        if use_tanh_normal:
            dist_class, dist_kwargs = TanhNormal, {"low": action_spec.space.low, "high": action_spec.space.high}
        else:
            dist_class, dist_kwargs = IndependentNormal, {}
        return ProbabilisticActor(
            module, spec=action_spec, in_keys=[(group, "loc"), (group, "scale")], out_keys=[(group, "action")],
            distribution_class=dist_class, distribution_kwargs=dist_kwargs, return_log_prob=True,
        )
    module = build(inputs, [(group, "logits")], action_spec.space.n, centralised=False, share_params=share_params)
    mask_key = task.action_mask_key(group)
    if mask_key is None:
        in_keys, dist_class, dist_kwargs = {"logits": (group, "logits")}, torch.distributions.Categorical, {}
    else:
        # Illegal actions get probability 0 (never sampled, never the mode). Their logit is a large finite
        # negative number rather than -inf: losses that take expectations over all actions (discrete SAC)
        # multiply probability by log-probability, and 0 * -inf would be NaN.
        in_keys, dist_class = {"logits": (group, "logits"), "mask": mask_key}, MaskedCategorical
        dist_kwargs = {"neg_inf": MASKED_LOGIT}
        module = TensorDictSequential(MaskGuard(task, group), module)
    return ProbabilisticActor(module, spec=action_spec, in_keys=in_keys, out_keys=[(group, "action")],
                              distribution_class=dist_class, distribution_kwargs=dist_kwargs, return_log_prob=True)


class PerAgent(nn.Module):
    """One network per agent, each with parameter tensors of its own (an optimizer step can move one agent's alone,
    which a multi-agent network's stacked parameters cannot): ``[*B, n_agents, *obs] -> [*B, n_agents, out]``."""

    def __init__(self, nets: list[nn.Module], obs_ndim: int, head: nn.Module | None = None) -> None:
        super().__init__()
        self.nets = nn.ModuleList(nets)
        self.obs_ndim = obs_ndim
        self.head = head

    @override
    def forward(self, observation: torch.Tensor):
        flat = observation.flatten(start_dim=observation.dim() - self.obs_ndim)  # [*B, n_agents, D]
        out = torch.stack([net(flat[..., i, :]) for i, net in enumerate(self.nets)], dim=-2)
        return out if self.head is None else self.head(out)

    @classmethod
    def module(cls, task: Task, group: str, model: ModelConfig, inputs: ModelInputs, out_keys: list,
               n_agent_outputs: int, centralised: bool, share_params: bool,
               head: nn.Module | None = None) -> TensorDictModule:
        """As ``model.build_module`` (decentralised, unshared), with one ``model.build_single`` network per agent."""
        if len(inputs.keys) != 1:
            raise ConfigError(f"actor_model: one network per agent reads the observation only, got {inputs.keys}")
        shape = task.specs.observation_spec[inputs.keys[0]].shape[1:]  # one agent's
        nets = [model.build_single(shape.numel(), n_agent_outputs) for _ in task.group_map[group]]
        return TensorDictModule(cls(nets, len(shape), head), in_keys=list(inputs.keys), out_keys=out_keys)


def per_agent_parameters(policy: nn.Module) -> list[list[nn.Parameter]]:
    """Each agent's parameter tensors of a policy built with ``per_agent=True`` (its :class:`PerAgent` networks)."""
    nets = next(module.nets for module in policy.modules() if isinstance(module, PerAgent))
    return [list(net.parameters()) for net in nets]


class MaskGuard(TensorDictModuleBase):
    """Stops with a clear error when an agent has no legal action (instead of a NaN deep in a distribution)."""

    def __init__(self, task: Task, group: str) -> None:
        super().__init__()
        self.group = group
        self.agents = list(task.group_map[group])
        self.in_keys = [task.action_mask_key(group)]
        self.out_keys = []

    @override
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        mask = tensordict.get(self.in_keys[0])
        legal = mask.any(-1)
        if not bool(legal.all()):
            where = (~legal).nonzero()[0].tolist()
            agent = self.agents[where[-1]]
            raise ValueError(
                f"action mask: agent {agent!r} of group {self.group!r} has no legal action "
                f"(batch index {tuple(where[:-1])}); every agent needs at least one True in its action_mask"
            )
        return tensordict


def q_critic(task: Task, group: str, model: ModelConfig, centralised: bool, share_params: bool) -> TensorDictModule:
    """Q-function of ``group`` for continuous actions, writing ``(group, "state_action_value")``
    ``[*B, n_agents, 1]``: of each agent's observation and action, of all agents' (``centralised``), or of
    the global state and all actions where the task has a state and the critic is centralised."""
    specs = task.specs
    n_agents = specs.n_agents(group)
    action_dim = specs.group_action_spec(group).shape[-1]
    out = [(group, "state_action_value")]
    if centralised and task.has_state:
        state_shape = specs.state_spec.shape
        net = FromState(model.build_single(state_shape.numel() + n_agents * action_dim, n_agents), len(state_shape))
        return TensorDictModule(net, in_keys=[task.state_key, (group, "action")], out_keys=out)
    # one module over observation and action (not a concatenating module, then the network): a module call
    # costs tens of microseconds of key handling, and a Q-function runs several times per optimizer step
    inputs = ModelInputs.of(task, group, (group, "observation"), (group, "action"), field="critic_model")
    return model.build_module(inputs, out, 1, centralised=centralised, share_params=share_params)
