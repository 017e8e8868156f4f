"""Heterogeneous-agent PPO: HAPPO (Kuba et al., 2022, "Trust Region Policy Optimisation in Multi-Agent Reinforcement
Learning", ICLR; the HARL code is the reference for details).

Every agent has a policy of its own and the agents update one after another in a fresh random order each iteration:
agent *m* maximises PPO's clipped surrogate with the advantage multiplied by the product of the probability ratios of
the agents updated before it in this iteration (``new / old`` on the collected actions), which makes the sequence of
updates a monotonic-improvement scheme for the joint policy; the centralised critic trains once after the actors. As
in HARL, the advantage is normalised over the batch before the product.

On lit-marl's learners that is a small learner and a small change of the run: :class:`SequentialPPO` is the PPO
learner with one network per agent (parameter tensors of its own, so one agent's optimizer step moves no other
agent's weights) whose loss is the phase's part of torchrl's ``ClipPPOLoss`` (the surrogate fed ``factor × A`` for the
agent in turn, or the value loss); :class:`HAPPO` is the on-policy run with a training loop of phases
(:class:`SequentialUpdates`) that keeps only the gradients of the phase's parameters.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property
from typing import Any, ClassVar

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn
from torchrl.modules import ProbabilisticActor
from typing_extensions import override

from lit_marl.algorithms.common import PerAgent, stochastic_policy
from lit_marl.algorithms.on_policy import OnPolicyAlgorithm
from lit_marl.algorithms.ppo import PPO
from lit_marl.data.on_policy import OnPolicyData, shuffled_minibatches
from lit_marl.errors import ConfigError
from lit_marl.models import Mlp

#: the root key of a batch holding each transition's factor: the product of the ratios of the agents updated before
FACTOR = "happo_factor"


class SequentialPPO(PPO):
    """What one group learns with HAPPO: PPO with one policy network per agent, trained one agent at a time.

    ``phase`` (set by the run) says what a minibatch trains: ``("actor", i)`` agent *i* of this group, ``("critic",
    None)`` the critic, ``("idle", None)`` nothing of this group.

    Args:
        share_policy_params: must be false: every agent has a policy of its own.
    """

    supports_recurrent: ClassVar[bool] = False
    #: the algorithm refusals name
    algorithm_label: ClassVar[str] = "HAPPO"
    #: trains its group's agents one after another (the run's order): an Ensemble's loop and DDP refuse it for now
    sequential_agents: ClassVar[bool] = True

    def __init__(self, task, group, run, share_policy_params: bool = False, **kwargs: Any) -> None:
        name = self.algorithm_label
        if share_policy_params is not False:
            raise ConfigError(f"share_policy_params: {share_policy_params!r}; {name} gives every agent a policy of its "
                              f"own and updates them one after another; allowed: false")
        if kwargs.get("minibatch_advantage", False) is not False:
            raise ConfigError(f"minibatch_advantage: {kwargs['minibatch_advantage']!r} would normalise factor × "
                              f"advantage again in every minibatch; {name} normalises the advantage over the batch "
                              f"before the product (as HARL); allowed: false")
        self.phase: tuple[str, int | None] = ("idle", None)
        super().__init__(task, group, run, share_policy_params=False, **kwargs)

    @override
    def validate(self) -> None:
        super().validate()
        if type(self.actor_model) is not Mlp:
            raise ConfigError(f"actor_model: {type(self.actor_model).__name__}; {self.algorithm_label} builds one "
                              f"network per agent from the observation, for now from Mlp only; allowed: Mlp")


    @property
    def n_agents(self) -> int:
        return len(self.task.group_map[self.group])

    @property
    @override
    def entropy_weight(self) -> float:
        # torchrl's loss averages the entropy over all the group's agents, and only the agent in turn keeps its gradient
        return self.entropy_coef * self.n_agents

    @override
    def build_policy(self) -> ProbabilisticActor:
        return stochastic_policy(self.task, self.group, self.actor_model, False, self.scale_mapping,
                                 self.use_tanh_normal, per_agent=True)

    @cached_property
    def _agent_parameters(self) -> list[list[nn.Parameter]]:
        """Each agent's policy parameters, found once (the run asks for the phase's at every optimizer step)."""
        nets = next(module.nets for module in self.policy.modules() if isinstance(module, PerAgent))
        return [list(net.parameters()) for net in nets]

    def actor_parameters(self, agent: int) -> list[nn.Parameter]:
        """The parameters of agent ``agent``'s policy network."""
        return self._agent_parameters[agent]

    @override
    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        agents = self.task.group_map[self.group]
        groups = {f"actor/{agent}": self.actor_parameters(i) for i, agent in enumerate(agents)}
        groups["critic"] = list(self.critic.parameters())
        return groups

    def active_parameters(self) -> list[nn.Parameter]:
        """What the current phase trains (the run drops every other parameter's gradient before the step)."""
        kind, agent = self.phase
        if kind == "actor":
            return self.actor_parameters(agent)
        return list(self.critic.parameters()) if kind == "critic" else []

    @override
    def process_batch(self, batch: TensorDictBase) -> TensorDictBase:
        """GAE (PPO's), then the advantage normalised over the whole batch, before any factor multiplies it."""
        batch = super().process_batch(batch)
        advantage = batch.get((self.group, "advantage"))
        batch.set((self.group, "advantage"), (advantage - advantage.mean()) / (advantage.std() + 1e-5))
        return batch

    @override
    def loss(self, batch: TensorDictBase) -> TensorDictBase:
        kind, agent = self.phase
        if kind == "idle":
            return TensorDict({}, batch_size=[])
        if kind == "critic":
            return self.objective_fn()(batch).select("loss_critic", "explained_variance", strict=False)
        # the agent in turn: the surrogate with factor × A for its actions, 0 for the others' (their terms vanish);
        # × n_agents because torchrl's loss averages over every agent of the group
        mask = torch.zeros(self.n_agents, 1, device=batch.device)
        mask[agent] = self.n_agents
        advantage = batch.get((self.group, "advantage")) * batch.get(FACTOR).unsqueeze(-2) * mask
        batch = batch.clone(recurse=False).set((self.group, "advantage"), advantage)
        return self.objective_fn()(batch).select("loss_objective", "loss_entropy", strict=False)

    def agent_log_prob(self, batch: TensorDictBase, agent: int) -> torch.Tensor:
        """``log π_agent(a | o)`` of the collected actions under the current policy, ``[N]``."""
        dist = self.policy.get_dist(batch.select(*self.policy.in_keys, strict=False))
        log_prob = dist.log_prob(batch.get((self.group, "action")))
        return log_prob.reshape(batch.shape[0], self.n_agents)[:, agent]


class SequentialUpdates(OnPolicyData):
    """HAPPO's training loop for one iteration (one Lightning epoch): the batch as PPO trains on it, the agents' order
    (torch's generator: restored with a checkpoint's RNG state, so a resumed run draws the same orders), then for each
    agent ``n_minibatch_iters`` epochs of minibatches with the current factor, after which the factor takes the agent's
    ratio; last the critic, the same number of minibatches. Sized, so Lightning never fetches ahead of a step."""

    @override
    def __iter__(self) -> Iterator[TensorDictBase]:
        run = self.algorithm
        batch, size = self.training_batch()
        batch.set(FACTOR, torch.ones(batch.shape[0], 1, device=batch.device))
        agents = [(group, i) for group in run.groups for i in range(len(run.task.group_map[group]))]
        order = [agents[k] for k in torch.randperm(len(agents)).tolist()]
        run.agent_orders.append([f"{group}/{run.task.group_map[group][i]}" for group, i in order])
        for group, agent in order:
            for name, learner in run.learners.items():
                learner.phase = ("actor", agent) if name == group else ("idle", None)
            yield from run.actor_minibatches(batch, size)
            learner = run.learners[group]
            with torch.no_grad():
                ratio = (learner.agent_log_prob(batch, agent)
                         - batch.get((group, "action_log_prob")).reshape(batch.shape[0], -1)[:, agent]).exp()
            batch.set(FACTOR, batch.get(FACTOR) * ratio.unsqueeze(-1))
        for learner in run.learners.values():
            learner.phase = ("critic", None)
        yield from shuffled_minibatches(batch, run.n_minibatch_iters, size)


class HAPPO(OnPolicyAlgorithm):
    """Heterogeneous-agent PPO (see the module docstring): one policy per agent, updated one agent after another in a
    random order each iteration with the previous agents' ratios as a factor, and a centralised critic."""

    algorithm_name: ClassVar[str] = "happo"
    learner_class = SequentialPPO
    learner_settings: ClassVar[dict[str, Any]] = {"centralised_critic": True}

    def __init__(self, task, **kwargs: Any) -> None:
        #: each iteration's agent order (``group/agent``), in the order trained, since this module was built
        self.agent_orders: list[list[str]] = []
        super().__init__(task, **kwargs)

    @property
    @override
    def minibatches_per_iteration(self) -> int:
        agents = sum(len(self.task.group_map[g]) for g in self.groups)
        return (agents + 1) * self.n_minibatch_iters * (self.frames_per_batch // self.minibatch_size)

    @override
    def train_dataloader(self) -> SequentialUpdates:
        return SequentialUpdates(self)

    def actor_minibatches(self, batch: TensorDictBase, size: int) -> Iterator[TensorDictBase]:
        """What one agent's turn trains on: ``n_minibatch_iters`` epochs of shuffled minibatches (HATRPO: the batch)."""
        return shuffled_minibatches(batch, self.n_minibatch_iters, size)

    @override
    def on_after_backward(self) -> None:
        """Keep only the gradients of what this phase trains: a parameter without a gradient is left alone by Adam (no
        step from its moments), so each agent's weights move only in its own turn."""
        active = {id(p) for learner in self.learners.values() for p in learner.active_parameters()}
        for p in self.parameters():
            if id(p) not in active:
                p.grad = None
