"""Soft actor-critic for multi-agent groups: MASAC and ISAC, continuous and discrete actions.

SAC (Haarnoja et al., 2018) with twin Q-functions and a learned temperature; discrete actions use the
categorical variant (Christodoulou, 2019). MASAC's Q-functions are centralised over the group (or use
the global state); ISAC's see one agent. The maths is torchrl's ``SACLoss`` / ``DiscreteSACLoss``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.modules import ProbabilisticActor
from torchrl.objectives import DiscreteSACLoss, SACLoss, ValueEstimators
from typing_extensions import override

from lit_marl.algorithms.common import FromState, q_critic, stochastic_policy
from lit_marl.algorithms.base import MarlAlgorithm
from lit_marl.algorithms.off_policy import OffPolicyLearner
from lit_marl.errors import ConfigError, non_negative_float, one_of, positive_float, positive_int, unit_interval
from lit_marl.models import Mlp, ModelInputs


def temperature_settings(target_entropy: Any, alpha_init: Any, min_alpha: Any, max_alpha: Any) -> tuple:
    """A soft actor-critic's temperature settings, checked by name: ``(target_entropy, alpha_init, min_alpha,
    max_alpha)`` (``target_entropy`` "auto" or a number; the clamps optional, ordered)."""
    if target_entropy != "auto" and (isinstance(target_entropy, bool) or not isinstance(target_entropy, (int, float))):
        raise ConfigError(f"target_entropy: must be 'auto' or a number, got {target_entropy!r}")
    low = None if min_alpha is None else non_negative_float("min_alpha", min_alpha)
    high = None if max_alpha is None else positive_float("max_alpha", max_alpha)
    if low is not None and high is not None and low > high:
        raise ConfigError(f"min_alpha: {min_alpha} is larger than max_alpha={max_alpha}")
    return target_entropy, positive_float("alpha_init", alpha_init), low, high


class SAC(OffPolicyLearner):
    """What one group learns with soft actor-critic: the learner of :class:`MASAC` and :class:`ISAC`. It explores by
    sampling its policy.

    Args:
        share_param_critic: one Q-network shared by all agents of a group.
        num_qvalue_nets: Q-functions whose minimum gives the targets (2: clipped double Q).
        loss_function: ``l2``, ``l1`` or ``smooth_l1`` distance of the TD error.
        delay_qvalue: use target Q-networks for the TD targets.
        target_entropy: ``"auto"`` (minus the action dimension per agent; for discrete actions
            ``discrete_target_entropy_weight`` × the maximum entropy) or a number.
        discrete_target_entropy_weight: fraction of the maximum entropy targeted with discrete actions.
        alpha_init: initial temperature.
        min_alpha: lower clamp of the temperature (None: none).
        max_alpha: upper clamp of the temperature (None: none).
        fixed_alpha: keep the temperature at ``alpha_init``.
        scale_mapping: how the policy's raw scale output becomes a standard deviation (continuous actions).
        use_tanh_normal: tanh-squashed normal bounded to the action range (True) or a plain independent normal.
    """

    def __init__(
        self,
        task,
        group,
        run,
        centralised_critic: bool = True,
        share_param_critic: bool = True,
        num_qvalue_nets: int = 2,
        loss_function: Literal["l2", "l1", "smooth_l1"] = "l2",
        delay_qvalue: bool = True,
        target_entropy: float | Literal["auto"] = "auto",
        discrete_target_entropy_weight: float = 0.2,
        alpha_init: float = 1.0,
        min_alpha: float | None = None,
        max_alpha: float | None = None,
        fixed_alpha: bool = False,
        scale_mapping: str = "biased_softplus_1.0",
        use_tanh_normal: bool = True,
        **kwargs: Any,
    ) -> None:
        self.centralised_critic = bool(centralised_critic)
        self.share_param_critic = bool(share_param_critic)
        self.num_qvalue_nets = positive_int("num_qvalue_nets", num_qvalue_nets)
        self.loss_function = one_of("loss_function", loss_function, ("l2", "l1", "smooth_l1"))
        self.delay_qvalue = bool(delay_qvalue)
        self.target_entropy, self.alpha_init, self.min_alpha, self.max_alpha = temperature_settings(
            target_entropy, alpha_init, min_alpha, max_alpha)
        self.discrete_target_entropy_weight = unit_interval("discrete_target_entropy_weight",
                                                            discrete_target_entropy_weight)
        self.fixed_alpha = bool(fixed_alpha)
        self.scale_mapping = scale_mapping
        self.use_tanh_normal = bool(use_tanh_normal)
        super().__init__(task, group, run, **kwargs)

    # ------------------------------------------------------------------ networks
    @override
    def build_policy(self) -> ProbabilisticActor:
        return stochastic_policy(self.task, self.group, self.actor_model, self.share_policy_params,
                                 self.scale_mapping, self.use_tanh_normal)

    def _q_network(self) -> nn.Module:
        """One Q-network of the group; the loss holds ``num_qvalue_nets`` independently initialised copies
        of its parameters (so it is not a separate submodule: only the loss's copies are trained)."""
        group = self.group
        if self.task.continuous_actions:
            return q_critic(self.task, group, self.critic_model, self.centralised_critic, self.share_param_critic)
        # discrete: Q of every action per agent, (group, "action_value") [*B, n_agents, n_actions]
        specs = self.task.specs
        n_agents, n_actions = specs.n_agents(group), specs.group_action_spec(group).space.n
        out = [(group, "action_value")]
        if self.centralised_critic and (self.task.has_state or type(self.critic_model) is Mlp):
            # one network reads the global state (or all the group's observations) and values every agent's every
            # action, n_agents × n_actions outputs: BenchMARL's coupled discrete critic. A centralised
            # MultiAgentMLP with shared parameters would give every agent the same values (same input, same net).
            if self.task.has_state:
                key, shape = self.task.state_key, specs.state_spec.shape
            else:
                key, shape = (group, "observation"), specs.observation_spec[group, "observation"].shape
            net = FromState(self.critic_model.build_single(shape.numel(), n_agents * n_actions), len(shape))
            return TensorDictModule(_Unflatten(net, n_agents, n_actions), in_keys=[key], out_keys=out)
        return self.critic_model.build_module(ModelInputs.of(self.task, group, field="critic_model"), out, n_actions,
                                              centralised=self.centralised_critic,
                                              share_params=self.share_param_critic)

    @override
    def build_objective(self) -> SACLoss | DiscreteSACLoss:
        group = self.group
        common = dict(num_qvalue_nets=self.num_qvalue_nets, loss_function=self.loss_function,
                      alpha_init=self.alpha_init, min_alpha=self.min_alpha, max_alpha=self.max_alpha,
                      fixed_alpha=self.fixed_alpha, target_entropy=self.target_entropy,
                      delay_qvalue=self.delay_qvalue)
        keys = dict(action=(group, "action"), reward=(group, "reward"), done=(group, "done"),
                    terminated=(group, "terminated"), priority=(group, "td_error"),
                    log_prob=(group, "action_log_prob"))
        if self.task.continuous_actions:
            loss = SACLoss(self.policy, self._q_network(), action_spec=self.task.specs.action_spec,
                           **common)
            loss.set_keys(state_action_value=(group, "state_action_value"), **keys)
        else:
            action_spec = self.task.specs.group_action_spec(group)
            loss = DiscreteSACLoss(self.policy, self._q_network(), action_space=action_spec,
                                   num_actions=action_spec.space.n,
                                   target_entropy_weight=self.discrete_target_entropy_weight, **common)
            loss.set_keys(action_value=(group, "action_value"), **keys)
        loss.make_value_estimator(ValueEstimators.TD0, gamma=self.gamma)
        return loss

    @override
    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        loss = self.objective
        return {"actor": list(self.policy.parameters()),
                "critic": list(loss.qvalue_network_params.values(True, True)),
                "alpha": [loss.log_alpha] if isinstance(loss.log_alpha, nn.Parameter) else []}


class _Unflatten(nn.Module):
    """``[*B, n_agents, 1]`` of width ``n_agents × n_actions`` → ``[*B, n_agents, n_actions]``."""

    def __init__(self, net: FromState, n_agents: int, n_actions: int) -> None:
        super().__init__()
        self.net, self.n_agents, self.n_actions = net, n_agents, n_actions

    @override
    def forward(self, state):
        return self.net(state).squeeze(-1).unflatten(-1, (self.n_agents, self.n_actions))


class MASAC(MarlAlgorithm):
    """Multi-Agent SAC (Haarnoja et al., 2018; the categorical variant of Christodoulou, 2019, for discrete actions):
    decentralised stochastic actors, centralised twin Q-functions per group and a learned temperature.

    Examples:
        One iteration on VMAS *balance*, two agents, toy sizes (BenchMARL's: ``configs/masac_vmas_balance.yaml``):

        >>> import lightning.pytorch as pl
        >>> from lit_marl.algorithms import MASAC
        >>> from lit_marl.envs import VmasTask
        >>> model = MASAC(VmasTask("balance", max_steps=10, n_agents=2), num_envs=2, frames_per_batch=20,
        ...              max_frames=20, memory_size=1_000, n_optimizer_steps=2, train_batch_size=16,
        ...              evaluation_episodes=1)
        >>> pl.Trainer(max_epochs=-1, logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(model)
        >>> model.frames
        20
    """

    algorithm_name: ClassVar[str] = "masac"
    learner_class = SAC
    learner_settings: ClassVar[dict[str, Any]] = {"centralised_critic": True}


class ISAC(MarlAlgorithm):
    """Independent SAC: each agent's twin Q-functions see its own observation (and action) only; otherwise MASAC's
    losses, replay and temperature.

    Examples:
        One iteration on VMAS *balance*, two agents, toy sizes (BenchMARL's: ``configs/isac_vmas_balance.yaml``):

        >>> import lightning.pytorch as pl
        >>> from lit_marl.algorithms import ISAC
        >>> from lit_marl.envs import VmasTask
        >>> model = ISAC(VmasTask("balance", max_steps=10, n_agents=2), num_envs=2, frames_per_batch=20,
        ...             max_frames=20, memory_size=1_000, n_optimizer_steps=2, train_batch_size=16,
        ...             evaluation_episodes=1)
        >>> pl.Trainer(max_epochs=-1, logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(model)
        >>> model.frames
        20
    """

    algorithm_name: ClassVar[str] = "isac"
    learner_class = SAC
    learner_settings: ClassVar[dict[str, Any]] = {"centralised_critic": False}
