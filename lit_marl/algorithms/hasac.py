"""Heterogeneous-agent soft actor-critic: HASAC (Liu et al., 2024, "Maximum Entropy Heterogeneous-Agent Reinforcement
Learning", ICLR; HARL's code is the reference for details).

Every agent has a stochastic policy of its own; a centralised pair of soft Q-functions values the group's joint action
(of the global state where the task has one, else of all the group's observations). Each update, on one sampled
minibatch:

1. the critics: ``y = r + γⁿ (1 − terminated) (min_k Q'_k(s', a') − α_c Σ_i log π_i(a'_i | o'_i))`` with ``a'`` drawn
   from the current policies, each ``Q_k`` regressed on ``y`` (``r`` the group's reward averaged over its agents, the
   ``n``-step sum where ``n_step`` > 1);
2. every agent's action drawn from its current policy (no gradient);
3. in a fresh random order of all agents, each agent ``m`` in turn maximises
   ``min_k Q_k(s, a_{1:m-1}, ã_m, a_{m+1:n}) − α_m log π_m(ã_m | o_m)`` with ``ã_m`` re-parameterised, where the agents
   before it hold the actions they have just re-sampled from their updated policies; ``α_m`` steps towards the
   agent's target entropy in the same turn; after the turn the agent's action is re-sampled from its new policy;
4. with the last turn the critics' temperature ``α_c`` steps towards the summed target entropy on the joint
   log-probabilities of the turns, and the target critics move (Polyak).

On lit-marl's learners that is a learner and a loop: :class:`SequentialSAC` holds the policies, the critics and the
temperatures, and computes the loss of the phase its minibatch carries; the sequential-agents loop over the off-policy
loop (:class:`~lit_marl.algorithms.loops.SequentialAgents`) draws the order, calls :meth:`SequentialSAC.before_turns`
and :meth:`SequentialSAC.after_turn` between the steps, keeps only the phase's gradients and tells the run which step
closes an update. ``n_step`` returns are torchrl's ``MultiStepTransform`` on the way into the replay buffer (it holds
each env's last ``n_step`` transitions back until the steps after them are collected).

What differs from HARL: one Adam over every role, as for every lit-marl algorithm (HARL has one per network: the same
steps, Adam being per parameter); the critics' loss is torchrl's ``distance_loss`` (``l2``: the squared error; HARL
halves it: Adam's steps are the same); HARL's replay samples an env's newest transitions with shorter n-step windows,
lit-marl's waits for their full windows.
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import Any, ClassVar, Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictParams
from torch import nn
from torchrl.envs.transforms import MultiStepTransform
from torchrl.modules import ProbabilisticActor
from torchrl.modules.distributions.utils import rsample_and_log_prob
from torchrl.objectives import LossModule
from torchrl.objectives.utils import distance_loss
from typing_extensions import override

from lit_marl.algorithms.base import MarlAlgorithm
from lit_marl.algorithms.common import FromState, per_agent_parameters, stochastic_policy
from lit_marl.algorithms.loops import PHASE, Phase, phase_of
from lit_marl.algorithms.off_policy import OffPolicyLearner
from lit_marl.algorithms.sac import temperature_settings
from lit_marl.errors import ConfigError, one_of, positive_float, positive_int
from lit_marl.models import Mlp

#: the group's entry holding each agent's current action during an update ([*B, n_agents, action_dim])
JOINT_ACTION = "hasac_joint_action"
#: the group's entry holding each agent's log-probability in its turn ([*B, n_agents]), for the critics' temperature
TURN_LOG_PROB = "hasac_turn_log_prob"
#: where an episode ends, for the n-step windows (the group's ``done`` of any agent; the group's own flags are taken
#: from each window's last step)
WINDOW_DONE = "hasac_window_done"
#: the entry torchrl's multi-step transform writes: each transition's discount ``γ^steps``
DISCOUNT = "gamma"


class HASACLoss(LossModule):
    """HASAC's losses for one group (see the module docstring): the critics' (:meth:`critic_loss`), one agent's
    turn (:meth:`actor_loss`) and the critics' temperature (:meth:`critic_alpha_loss`). The twin Q-functions are
    torchrl functional parameters with target copies (``SoftUpdate``/``HardUpdate`` move them)."""

    qvalue_network: TensorDictModule
    qvalue_network_params: TensorDictParams
    target_qvalue_network_params: TensorDictParams

    def __init__(self, policy: ProbabilisticActor, qvalue: TensorDictModule, group: str, n_agents: int,
                 target_entropy: float, gamma: float, num_qvalue_nets: int = 2, loss_function: str = "l2",
                 alpha_init: float = 1.0, min_alpha: float | None = None, max_alpha: float | None = None,
                 fixed_alpha: bool = False) -> None:
        super().__init__()
        self.policy = policy
        self.convert_to_functional(qvalue, "qvalue_network", num_qvalue_nets, create_target_params=True,
                                   compare_against=list(policy.parameters()))
        self.group, self.n_agents, self.gamma = group, n_agents, gamma
        self.loss_function = loss_function
        self.target_entropy = float(target_entropy)  # each agent's; the critics' is the sum
        self.min_log_alpha = -math.inf if not min_alpha else math.log(min_alpha)
        self.max_log_alpha = math.inf if max_alpha is None else math.log(max_alpha)
        start = math.log(alpha_init)
        #: each agent's temperature (a parameter of its own: an agent's turn steps its own alone)
        self.log_alphas = nn.ParameterList(nn.Parameter(torch.tensor(start), requires_grad=not fixed_alpha)
                                           for _ in range(n_agents))
        #: the critics' temperature, of the joint log-probability
        self.log_alpha_critic = nn.Parameter(torch.tensor(start), requires_grad=not fixed_alpha)
        obs_key, action_key = qvalue.in_keys
        self._keys = {"observation": obs_key, "action": action_key}

    @property
    @override
    def in_keys(self) -> list:
        group, obs = self.group, self._keys["observation"]
        return list(dict.fromkeys([
            *self.policy.in_keys, obs, (group, "action"), ("next", obs), *(("next", k) for k in self.policy.in_keys),
            ("next", group, "reward"), ("next", group, "terminated"), ("next", group, "done")]))

    def alpha(self, agent: int | None = None) -> torch.Tensor:
        """Agent ``agent``'s temperature, or the critics' (None), clamped to [min_alpha, max_alpha]."""
        log_alpha = self.log_alpha_critic if agent is None else self.log_alphas[agent]
        return log_alpha.detach().clamp(self.min_log_alpha, self.max_log_alpha).exp()

    def _q(self, params: TensorDictBase, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Every Q-function's value of the joint ``action``, ``[num_qvalue_nets, *B]``."""
        values = []
        for net in params.unbind(0):
            with net.to_module(self.qvalue_network):
                values.append(self.qvalue_network.module(observation, action).reshape(action.shape[:-2]))
        return torch.stack(values)

    def sample(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        """Every agent's re-parameterised action and its log-probability, ``[*B, n_agents, dim]`` and
        ``[*B, n_agents]``."""
        dist = self.policy.get_dist(tensordict.select(*self.policy.in_keys, strict=False))
        # drawn and scored together (torchrl's, as its SACLoss): scoring the drawn action apart inverts the tanh, which
        # once it saturates returns another pre-image and a log-probability off by thousands (a run diverged on it)
        action, log_prob = rsample_and_log_prob(dist)
        return action, log_prob.reshape(action.shape[:-1])

    @override
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self.critic_loss(tensordict)

    def critic_loss(self, tensordict: TensorDictBase) -> TensorDictBase:
        """The critics' soft TD loss; writes each transition's TD error to ``(group, "td_error")`` (priorities)."""
        group, obs_key = self.group, self._keys["observation"]
        nxt = tensordict.get("next")
        with torch.no_grad():
            next_action, next_log_prob = self.sample(nxt)
            next_q = self._q(self.target_qvalue_network_params, nxt.get(obs_key), next_action).amin(0)
            reward = nxt.get((group, "reward")).reshape(*next_q.shape, -1).mean(-1)
            terminated = nxt.get((group, "terminated")).reshape(*next_q.shape, -1).any(-1)
            discount = tensordict.get(DISCOUNT, None)
            discount = self.gamma if discount is None else discount.reshape(next_q.shape)
            soft_value = next_q - self.alpha() * next_log_prob.sum(-1)
            target = reward + discount * (~terminated).float() * soft_value
        q = self._q(self.qvalue_network_params, tensordict.get(obs_key), tensordict.get((group, "action")))
        loss = distance_loss(q, target.expand_as(q), self.loss_function).sum(0).mean()
        td_error = (q - target).abs().amax(0)
        tensordict.set((group, "td_error"), td_error.detach().unsqueeze(-1).expand(*td_error.shape, self.n_agents))
        return TensorDict({"loss_critic": loss, "q_value": q.detach().mean(), "target_value": target.mean()},
                          batch_size=[])

    def actor_loss(self, tensordict: TensorDictBase, agent: int) -> TensorDictBase:
        """Agent ``agent``'s turn: its policy's soft objective under the critics with the others' current actions
        (``(group, JOINT_ACTION)``), and its temperature's loss; records its log-probability for the critics'
        temperature."""
        group = self.group
        action, log_prob = self.sample(tensordict)
        others = tensordict.get((group, JOINT_ACTION))
        mine = torch.zeros(self.n_agents, 1, dtype=torch.bool, device=others.device)
        mine[agent] = True
        joint = torch.where(mine, action, others)
        q = self._q(self.qvalue_network_params.detach(), tensordict.get(self._keys["observation"]), joint).amin(0)
        agent_log_prob = log_prob[..., agent]
        terms = {"loss_actor": (self.alpha(agent) * agent_log_prob - q).mean(), "alpha": self.alpha(agent),
                 "entropy": -agent_log_prob.detach().mean()}
        if self.log_alphas[agent].requires_grad:
            terms["loss_alpha"] = -(self.log_alphas[agent] * (agent_log_prob.detach() + self.target_entropy)).mean()
        tensordict.get((group, TURN_LOG_PROB))[..., agent] = agent_log_prob.detach()
        return TensorDict(terms, batch_size=[])

    def critic_alpha_loss(self, tensordict: TensorDictBase) -> TensorDictBase:
        """The critics' temperature towards the summed target entropy, on the joint log-probability of the turns."""
        joint = tensordict.get((self.group, TURN_LOG_PROB)).sum(-1)
        terms = {"alpha_critic": self.alpha()}
        if self.log_alpha_critic.requires_grad:
            target = self.target_entropy * self.n_agents
            terms["loss_alpha_critic"] = -(self.log_alpha_critic * (joint + target)).mean()
        return TensorDict(terms, batch_size=[])


class SequentialSAC(OffPolicyLearner):
    """What one group learns with HASAC: one stochastic policy per agent, twin centralised soft Q-functions of the
    joint action, a temperature per agent and one for the critics (see the module docstring). Trains under the
    sequential-agents loop over the off-policy loop: each minibatch carries its phase.

    Args:
        share_policy_params: must be false: every agent has a policy of its own.
        num_qvalue_nets: Q-functions whose minimum gives the targets and the actors' objective (2: HARL's twin).
        loss_function: ``l2``, ``l1`` or ``smooth_l1`` distance of the TD error.
        target_entropy: each agent's target entropy: ``"auto"`` (minus its action dimension, as HARL) or a number;
            the critics' is the sum over the group's agents.
        alpha_init: initial temperature (each agent's and the critics').
        min_alpha: lower clamp of the temperatures (None: none).
        max_alpha: upper clamp of the temperatures (None: none).
        fixed_alpha: keep the temperatures at ``alpha_init`` (HARL's ``auto_alpha: false``).
        n_step: transitions summed into each return before bootstrapping (HARL's ``n_step``; 1: one-step TD).
        critic_lr: learning rate of the Q-functions (None: ``lr``; HARL's ``critic_lr``).
        alpha_lr: learning rate of the temperatures (None: ``lr``; HARL's ``alpha_lr``).
        scale_mapping: how each policy's raw scale output becomes a standard deviation.
    """

    supports_recurrent: ClassVar[bool] = False
    supports_discrete_actions: ClassVar[bool] = False
    sequential_agents: ClassVar[bool] = True
    algorithm_label: ClassVar[str] = "HASAC"

    def __init__(
        self,
        task,
        group,
        run,
        share_policy_params: bool = False,
        num_qvalue_nets: int = 2,
        loss_function: Literal["l2", "l1", "smooth_l1"] = "l2",
        target_entropy: float | Literal["auto"] = "auto",
        alpha_init: float = 1.0,
        min_alpha: float | None = None,
        max_alpha: float | None = None,
        fixed_alpha: bool = False,
        n_step: int = 1,
        critic_lr: float | None = None,
        alpha_lr: float | None = None,
        scale_mapping: str = "biased_softplus_1.0",
        **kwargs: Any,
    ) -> None:
        if share_policy_params is not False:
            raise ConfigError(f"share_policy_params: {share_policy_params!r}; HASAC gives every agent a policy of its "
                              f"own and updates them one after another; allowed: false")
        self.num_qvalue_nets = positive_int("num_qvalue_nets", num_qvalue_nets)
        self.loss_function = one_of("loss_function", loss_function, ("l2", "l1", "smooth_l1"))
        self.target_entropy, self.alpha_init, self.min_alpha, self.max_alpha = temperature_settings(
            target_entropy, alpha_init, min_alpha, max_alpha)
        self.fixed_alpha = bool(fixed_alpha)
        self.n_step = positive_int("n_step", n_step)
        steps = run.frames_per_batch // run.num_envs  # each env's steps per iteration (DDP: each process's too)
        if self.n_step >= steps:
            # the window holds each env's last n_step transitions back: none of the first iteration's would reach the
            # replay buffer, and the first update would fail after a whole iteration's collection
            raise ConfigError(f"n_step: {n_step} reaches the {steps} steps each environment collects per iteration "
                              f"(frames_per_batch {run.frames_per_batch} / num_envs {run.num_envs}); allowed: "
                              f"1..{steps - 1}, or a larger frames_per_batch per environment")
        self.critic_lr = None if critic_lr is None else positive_float("critic_lr", critic_lr)
        self.alpha_lr = None if alpha_lr is None else positive_float("alpha_lr", alpha_lr)
        self.scale_mapping = scale_mapping
        super().__init__(task, group, run, share_policy_params=False, **kwargs)
        if group is None:
            return
        #: each env's last transitions, held until their n-step windows are complete (None for one-step returns)
        self.n_step_window = None if self.n_step == 1 else MultiStepTransform(
            self.n_step, self.gamma, reward_keys=[(group, "reward")], done_key=WINDOW_DONE, done_keys=[WINDOW_DONE])

    @override
    def validate(self) -> None:
        super().validate()
        groups = list(self.task.group_map) if self.group is not None else []  # (the groups are known once built)
        if len(groups) > 1:
            raise ConfigError(
                f"task.agent_groups: {len(groups)} groups ({', '.join(groups)}); HASAC's critics value the joint action "
                f"of every agent, and a group's critics would see its own group's actions only; allowed: a task whose "
                f"agents form one group (agent_groups: all_in_one_group, where their observation and action sizes "
                f"agree), or MASAC/ISAC for several groups")
        for field in ("actor_model", "critic_model"):
            model = getattr(self, field)
            if type(model) is not Mlp:
                raise ConfigError(f"{field}: {type(model).__name__}; HASAC builds one network per agent from the "
                                  f"observation and one critic of the joint action, for now from Mlp only; allowed: Mlp")
        if self.use_prioritized_replay_buffer and self.n_step > 1:
            raise ConfigError(f"use_prioritized_replay_buffer: true with n_step={self.n_step}; priorities of n-step "
                              f"transitions are not supported yet; allowed: false, or n_step: 1")
        if self.sample_episodes and self.n_step > 1:
            raise ConfigError(f"sample_episodes: true with n_step={self.n_step}; n-step transitions reach the buffer "
                              f"late and each marks the episode's end where its window does; allowed: false, or n_step: 1")

    @property
    def n_agents(self) -> int:
        """Agents in this group, each of which takes a turn of its own."""
        return len(self.task.group_map[self.group])

    # ------------------------------------------------------------------ networks
    @override
    def build_policy(self) -> ProbabilisticActor:
        return stochastic_policy(self.task, self.group, self.actor_model, False, self.scale_mapping, True,
                                 per_agent=True)

    def _joint_q(self) -> TensorDictModule:
        """One Q-function of the group's joint action: of the global state (where the task has one) or of all the
        group's observations, and every agent's action; one value per transition."""
        specs, group = self.task.specs, self.group
        action_dim = specs.group_action_spec(group).shape[-1]
        if self.task.has_state:
            key, shape = self.task.state_key, specs.state_spec.shape
        else:
            key, shape = (group, "observation"), specs.observation_spec[group, "observation"].shape
        net = self.critic_model.build_single(shape.numel() + self.n_agents * action_dim, 1)
        return TensorDictModule(FromState(net, len(shape)), in_keys=[key, (group, "action")],
                                out_keys=[(group, "joint_q")])

    @override
    def build_objective(self) -> HASACLoss:
        entropy = (-float(self.task.specs.group_action_spec(self.group).shape[-1]) if self.target_entropy == "auto"
                   else float(self.target_entropy))
        return HASACLoss(self.policy, self._joint_q(), self.group, self.n_agents, entropy, self.gamma,
                         self.num_qvalue_nets, self.loss_function, self.alpha_init, self.min_alpha, self.max_alpha,
                         self.fixed_alpha)

    @cached_property
    def _agent_parameters(self) -> list[list[nn.Parameter]]:
        """Each agent's policy parameters, found once (the loop asks for the phase's at every optimizer step)."""
        return per_agent_parameters(self.policy)

    def _critic_parameters(self) -> list[nn.Parameter]:
        return list(self.objective.qvalue_network_params.values(True, True))

    @override
    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        agents = self.task.group_map[self.group]
        loss = self.objective
        groups = {f"actor/{agent}": self._agent_parameters[i] for i, agent in enumerate(agents)}
        groups["critic"] = self._critic_parameters()
        groups.update({f"alpha/{agent}": [loss.log_alphas[i]] for i, agent in enumerate(agents)})
        groups["alpha/critic"] = [loss.log_alpha_critic]
        return groups

    @override
    def lr_of(self, role: str) -> float:
        if role == "critic" and self.critic_lr is not None:
            return self.critic_lr
        if role.startswith("alpha/") and self.alpha_lr is not None:
            return self.alpha_lr
        return self.lr

    def active_parameters(self, phase: Phase | None) -> list[nn.Parameter]:
        """What ``phase`` trains of this group (the loop drops every other parameter's gradient before the step)."""
        if phase is None:
            return []
        if phase.kind == "critic":
            return self._critic_parameters()
        mine = self._agent_parameters[phase.agent] + [self.objective.log_alphas[phase.agent]] \
            if phase.group == self.group else []
        return mine + [self.objective.log_alpha_critic] if phase.closes else mine

    # ------------------------------------------------------------------ replay
    @override
    def replay_frames(self, batch: TensorDictBase) -> TensorDictBase:
        """The group's transitions, as ``n_step``-step transitions where ``n_step`` > 1 (each env's newest
        ``n_step`` wait for the next collection)."""
        keys = self.training_keys()
        frames = batch.select(*keys, strict=False)
        if self.n_step_window is not None:
            frames = frames.reshape(-1, frames.shape[-1])  # [envs, time]
            done = frames.get(("next", self.group, "done"))
            frames.set(("next", WINDOW_DONE), done.reshape(*frames.shape, -1).any(-1, keepdim=True))
            frames = self.n_step_window.inv(frames)
            frames = frames.select(*keys, DISCOUNT, strict=False)
        return frames.reshape(-1)

    @override
    def checkpoint_state(self) -> dict[str, Any]:
        state = super().checkpoint_state()
        held = None if self.n_step_window is None else self.n_step_window._buffer
        if held is not None:  # the transitions waiting for their windows: a resumed run inserts them as this one would
            state["n_step_window"] = {"data": held.to_dict(), "batch_size": list(held.batch_size)}
        return state

    @override
    def load_checkpoint_state(self, state: dict[str, Any]) -> None:
        super().load_checkpoint_state(state)
        if "n_step_window" in state and self.n_step_window is not None:
            held = state["n_step_window"]
            self.n_step_window._buffer = TensorDict.from_dict(held["data"], batch_size=held["batch_size"])

    # ------------------------------------------------------------------ training: the phases of an update
    def before_turns(self, sample: TensorDictBase) -> None:
        """Before the agents' turns of an update: every agent's action drawn from its current policy."""
        action, _ = self.objective.sample(sample)
        sample.set((self.group, JOINT_ACTION), action)
        sample.set((self.group, TURN_LOG_PROB), action.new_zeros(action.shape[:-1]))  # each turn writes its agent's

    def after_turn(self, sample: TensorDictBase, agent: int) -> None:
        """After agent ``agent``'s turn: its action re-sampled from its updated policy (the agents after it see it)."""
        action, _ = self.objective.sample(sample)
        sample.get((self.group, JOINT_ACTION))[..., agent, :] = action[..., agent, :]

    @override
    def loss(self, batch: TensorDictBase) -> TensorDictBase:
        phase = phase_of(batch)
        if phase is None:
            raise RuntimeError("HASAC: a minibatch without a phase; HASAC trains under the sequential-agents loop "
                               "(lit_marl.algorithms.loops.SequentialAgents over OffPolicyLoop)")
        loss = self.objective
        if phase.kind == "critic":
            return loss.critic_loss(batch)
        terms = TensorDict({}, batch_size=[])
        if phase.group == self.group:  # this group's agent in turn (its temperature logged by the agent's name)
            terms = loss.actor_loss(batch, phase.agent)
            terms.rename_key_("alpha", f"alpha/{self.task.group_map[self.group][phase.agent]}")
        if phase.closes:
            terms.update(loss.critic_alpha_loss(batch))
        return terms

    @override
    def group_batch(self, batch: TensorDictBase) -> TensorDictBase:
        sample = super().group_batch(batch)
        phase = phase_of(batch)
        if phase is not None:  # the phase travels with the group's part too (the loop's own sample, marked in place)
            sample.set_non_tensor(PHASE, phase)
        return sample


class HASAC(MarlAlgorithm):
    """Heterogeneous-agent SAC (see the module docstring): one stochastic policy per agent, updated one agent after
    another in a fresh random order each update, each conditioned on the actions its predecessors have just
    re-sampled, under centralised twin soft Q-functions of the joint action, with automatic temperatures.

    Examples:
        One iteration on VMAS *balance*, two agents, toy sizes (BenchMARL's: ``configs/hasac_vmas_balance.yaml``):

        >>> import lightning.pytorch as pl
        >>> from lit_marl.algorithms import HASAC
        >>> from lit_marl.envs import VmasTask
        >>> model = HASAC(VmasTask("balance", max_steps=10, n_agents=2), num_envs=2, frames_per_batch=20,
        ...              max_frames=20, memory_size=1_000, n_optimizer_steps=2, train_batch_size=16,
        ...              evaluation_episodes=1)
        >>> pl.Trainer(max_epochs=-1, logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(model)
        >>> len(model.agent_orders)  # a fresh order of the agents for each of the two updates
        2
    """

    algorithm_name: ClassVar[str] = "hasac"
    learner_class = SequentialSAC

    agent_orders = property(lambda self: self.loop.agent_orders,
                            doc="Each update's order of the agents (``group/agent``), as the loop drew them.")

    @override
    def _validate_args(self) -> None:
        super()._validate_args()
        if self.compile_losses:
            raise ConfigError("compile: true; HASAC's losses are per phase (the critics', each agent's turn), not one "
                              "torchrl objective to compile; allowed: false")
