"""Heterogeneous-agent PPO: HAPPO (Kuba et al., 2022, "Trust Region Policy Optimisation in Multi-Agent Reinforcement
Learning", ICLR; the HARL code is the reference for details).

Every agent has a policy of its own and the agents update one after another in a fresh random order each iteration:
agent *m* maximises PPO's clipped surrogate with the advantage multiplied by the product of the probability ratios of
the agents updated before it in this iteration (``new / old`` on the collected actions), which makes the sequence of
updates a monotonic-improvement scheme for the joint policy; the centralised critic trains once after the actors. As
in HARL, the advantage is normalised over the batch before the product.

On lit-marl's learners that is a small learner and a loop: :class:`SequentialPPO` is the PPO learner with one network
per agent (parameter tensors of its own, so one agent's optimizer step moves no other agent's weights) whose loss is
the part of torchrl's ``ClipPPOLoss`` of the phase its minibatch carries (the surrogate fed ``factor × A`` for the
agent in turn, or the value loss); it names the sequential-agents loop
(:class:`~lit_marl.algorithms.loops.SequentialAgents` over the on-policy loop), which draws the order, keeps the factor
and keeps only the gradients of the phase's parameters. :class:`HAPPO` is a run like any other.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, ClassVar

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn
from torchrl.modules import ProbabilisticActor
from typing_extensions import override

from lit_marl.algorithms.base import MarlAlgorithm
from lit_marl.algorithms.common import per_agent_parameters, stochastic_policy
from lit_marl.algorithms.loops import FACTOR, Phase, phase_of
from lit_marl.algorithms.ppo import PPO
from lit_marl.errors import ConfigError
from lit_marl.models import Mlp

#: the root key of a batch holding each transition's factor: the product of the ratios of the agents updated before
class SequentialPPO(PPO):
    """What one group learns with HAPPO: PPO with one policy network per agent, trained one agent at a time.

    Each minibatch carries its phase (:func:`~lit_marl.algorithms.loops.phase_of`): an agent's turn (this group's or
    another's: then nothing of this group trains) or the critics'.

    Args:
        share_policy_params: must be false: every agent has a policy of its own.
    """

    supports_recurrent: ClassVar[bool] = False
    algorithm_label: ClassVar[str] = "HAPPO"
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
        super().__init__(task, group, run, share_policy_params=False, **kwargs)

    @override
    def validate(self) -> None:
        super().validate()
        if type(self.actor_model) is not Mlp:
            raise ConfigError(f"actor_model: {type(self.actor_model).__name__}; {self.algorithm_label} builds one "
                              f"network per agent from the observation, for now from Mlp only; allowed: Mlp")


    @property
    def n_agents(self) -> int:
        """Agents in this group, each of which takes a turn of its own."""
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
        return per_agent_parameters(self.policy)

    def actor_parameters(self, agent: int) -> list[nn.Parameter]:
        """The parameters of agent ``agent``'s policy network."""
        return self._agent_parameters[agent]

    @override
    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        agents = self.task.group_map[self.group]
        groups = {f"actor/{agent}": self.actor_parameters(i) for i, agent in enumerate(agents)}
        groups["critic"] = list(self.critic.parameters())
        return groups

    def active_parameters(self, phase: Phase | None) -> list[nn.Parameter]:
        """What ``phase`` trains of this group (the loop drops every other parameter's gradient before the step)."""
        if phase is None:
            return []
        if phase.kind == "critic":
            return list(self.critic.parameters())
        return self.actor_parameters(phase.agent) if phase.group == self.group else []

    @override
    def process_batch(self, batch: TensorDictBase) -> TensorDictBase:
        """GAE (PPO's), then the advantage normalised over the whole batch, before any factor multiplies it."""
        batch = super().process_batch(batch)
        advantage = batch.get((self.group, "advantage"))
        batch.set((self.group, "advantage"), (advantage - advantage.mean()) / (advantage.std() + 1e-5))
        return batch

    def turn(self, batch: TensorDictBase) -> Phase:
        """The phase ``batch`` carries (refused where it carries none: this learner trains under its loop only)."""
        phase = phase_of(batch)
        if phase is None:
            raise RuntimeError(f"{self.algorithm_label}: a minibatch without a phase; {self.algorithm_label} trains "
                               f"under the sequential-agents loop (lit_marl.algorithms.loops.SequentialAgents)")
        return phase

    @override
    def loss(self, batch: TensorDictBase) -> TensorDictBase:
        phase = self.turn(batch)
        if phase.kind == "critic":
            return self.objective_fn()(batch).select("loss_critic", "explained_variance", strict=False)
        if phase.group != self.group:  # another group's agent in turn: nothing of this group trains
            return TensorDict({}, batch_size=[])
        agent = phase.agent
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


class HAPPO(MarlAlgorithm):
    """Heterogeneous-agent PPO (see the module docstring): one policy per agent, updated one agent after another in a
    random order each iteration with the previous agents' ratios as a factor, and a centralised critic.

    Examples:
        One iteration on VMAS *balance*, two agents, toy sizes (BenchMARL's: ``configs/happo_vmas_balance.yaml``):

        >>> import lightning.pytorch as pl
        >>> from lit_marl.algorithms import HAPPO
        >>> from lit_marl.envs import VmasTask
        >>> model = HAPPO(VmasTask("balance", max_steps=10, n_agents=2), num_envs=2, frames_per_batch=20,
        ...              max_frames=20, minibatch_size=10, n_minibatch_iters=2, evaluation_episodes=1)
        >>> pl.Trainer(max_epochs=-1, logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(model)
        >>> model.agent_orders  # the iteration's random order of the agents
        [['agents/agent_...', 'agents/agent_...']]
    """

    algorithm_name: ClassVar[str] = "happo"
    learner_class = SequentialPPO
    learner_settings: ClassVar[dict[str, Any]] = {"centralised_critic": True}

    agent_orders = property(lambda self: self.loop.agent_orders,
                            doc="Each iteration's order of the agents (``group/agent``), as the loop drew them.")
