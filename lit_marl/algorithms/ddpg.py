"""Deterministic policy gradients for multi-agent groups: MADDPG and IDDPG.

MADDPG (Lowe et al., 2017, "Multi-Agent Actor-Critic for Mixed Cooperative-Competitive Environments")
gives each agent a Q-function of all agents' observations and actions (or the global state and all
actions); IDDPG gives each agent a Q-function of its own observation and action. Both compose torchrl's
``DDPGLoss`` (TD(0) targets from target networks) with Gaussian exploration noise annealed over frames.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from tensordict.nn import TensorDictModuleBase
from torch import nn
from torchrl.modules import AdditiveGaussianModule
from torchrl.objectives import DDPGLoss, ValueEstimators
from typing_extensions import override

from lit_marl.algorithms.common import TanhBounded, q_critic
from lit_marl.algorithms.base import MarlAlgorithm
from lit_marl.algorithms.off_policy import AnnealedExploration
from lit_marl.errors import one_of
from lit_marl.models import ModelInputs


class DDPG(AnnealedExploration):
    """What one group learns with DDPG: the learner of :class:`MADDPG` and :class:`IDDPG` (continuous actions).
    Its exploration is Gaussian noise on the action, of standard deviation ``exploration_eps_init`` annealed to
    ``exploration_eps_end``.

    Args:
        share_param_critic: one Q-network shared by all agents of a group.
        loss_function: ``l2``, ``l1`` or ``smooth_l1`` distance of the TD error.
        delay_value: use a target Q-network for the TD targets.
        use_tanh_mapping: squash the actor's output into the action bounds with tanh.
    """

    supports_discrete_actions: ClassVar[bool] = False

    def __init__(
        self,
        task,
        group,
        run,
        centralised_critic: bool = True,
        share_param_critic: bool = True,
        loss_function: Literal["l2", "l1", "smooth_l1"] = "l2",
        delay_value: bool = True,
        use_tanh_mapping: bool = True,
        **kwargs: Any,
    ) -> None:
        self.centralised_critic = bool(centralised_critic)
        self.share_param_critic = bool(share_param_critic)
        self.loss_function = one_of("loss_function", loss_function, ("l2", "l1", "smooth_l1"))
        self.delay_value = bool(delay_value)
        self.use_tanh_mapping = bool(use_tanh_mapping)
        super().__init__(task, group, run, **kwargs)

    # ------------------------------------------------------------------ networks
    @override
    def build_policy(self) -> TensorDictModuleBase:
        action_spec = self.task.specs.group_action_spec(self.group)
        # the tanh squashing is the network's head, not a module of its own: the actor runs on every optimizer step
        # (and again for the targets), and each TensorDict module call costs tens of microseconds
        head = TanhBounded(action_spec.space.low, action_spec.space.high) if self.use_tanh_mapping else None
        return self.actor_model.build_module(ModelInputs.of(self.task, self.group), [(self.group, "action")],
                                             action_spec.shape[-1], centralised=False,
                                             share_params=self.share_policy_params, head=head)

    @override
    def build_exploration(self) -> AdditiveGaussianModule:
        return AdditiveGaussianModule(
            spec=self.task.specs.group_action_spec(self.group), sigma_init=self.exploration_eps_init,
            sigma_end=self.exploration_eps_end, annealing_num_steps=self.anneal_frames,
            action_key=(self.group, "action"),
        )

    @override
    def build_critic(self) -> TensorDictModuleBase:
        return q_critic(self.task, self.group, self.critic_model, self.centralised_critic, self.share_param_critic)

    @override
    def build_objective(self) -> DDPGLoss:
        group = self.group
        loss = DDPGLoss(self.policy, self.critic, loss_function=self.loss_function, delay_actor=False,
                        delay_value=self.delay_value)
        loss.set_keys(state_action_value=(group, "state_action_value"), reward=(group, "reward"),
                      done=(group, "done"), terminated=(group, "terminated"), priority=(group, "td_error"))
        loss.make_value_estimator(ValueEstimators.TD0, gamma=self.gamma)
        return loss

    @override
    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        return {"actor": list(self.policy.parameters()), "critic": list(self.critic.parameters())}


class MADDPG(MarlAlgorithm):
    """Multi-Agent DDPG (Lowe et al., 2017): decentralised deterministic actors, centralised Q-functions (all agents'
    observations and actions of the group, or the global state and all actions), trained off-policy from a replay
    buffer with exploration noise annealed over frames.

    Examples:
        One iteration on VMAS *balance*, two agents, toy sizes (BenchMARL's: ``configs/maddpg_vmas_balance.yaml``):

        >>> import lightning.pytorch as pl
        >>> from lit_marl.algorithms import MADDPG
        >>> from lit_marl.envs import VmasTask
        >>> model = MADDPG(VmasTask("balance", max_steps=10, n_agents=2), num_envs=2, frames_per_batch=20,
        ...               max_frames=20, memory_size=1_000, n_optimizer_steps=2, train_batch_size=16,
        ...               evaluation_episodes=1)
        >>> pl.Trainer(max_epochs=-1, logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(model)
        >>> len(model.replay_buffers()["agents"])  # the iteration's frames, stored for replay
        20
    """

    algorithm_name: ClassVar[str] = "maddpg"
    learner_class = DDPG
    learner_settings: ClassVar[dict[str, Any]] = {"centralised_critic": True}


class IDDPG(MarlAlgorithm):
    """Independent DDPG: each agent's Q-function sees its own observation and action only; otherwise MADDPG's
    losses, replay and exploration.

    Examples:
        One iteration on VMAS *balance*, two agents, toy sizes (BenchMARL's: ``configs/iddpg_vmas_balance.yaml``):

        >>> import lightning.pytorch as pl
        >>> from lit_marl.algorithms import IDDPG
        >>> from lit_marl.envs import VmasTask
        >>> model = IDDPG(VmasTask("balance", max_steps=10, n_agents=2), num_envs=2, frames_per_batch=20,
        ...              max_frames=20, memory_size=1_000, n_optimizer_steps=2, train_batch_size=16,
        ...              evaluation_episodes=1)
        >>> pl.Trainer(max_epochs=-1, logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(model)
        >>> model.frames
        20
    """

    algorithm_name: ClassVar[str] = "iddpg"
    learner_class = DDPG
    learner_settings: ClassVar[dict[str, Any]] = {"centralised_critic": False}
