"""Deterministic policy gradients for multi-agent groups: MADDPG and IDDPG.

MADDPG (Lowe et al., 2017, "Multi-Agent Actor-Critic for Mixed Cooperative-Competitive Environments")
gives each agent a Q-function of all agents' observations and actions (or the global state and all
actions); IDDPG gives each agent a Q-function of its own observation and action. Both compose torchrl's
``DDPGLoss`` (TD(0) targets from target networks) with Gaussian exploration noise annealed over frames.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from tensordict.nn import TensorDictModuleBase
from torch import nn
from torchrl.modules import AdditiveGaussianModule
from torchrl.objectives import DDPGLoss, ValueEstimators
from typing_extensions import override

from lit_marl.algorithms.common import TanhBounded, q_critic
from lit_marl.algorithms.off_policy import OffPolicyAlgorithm
from lit_marl.envs.base import Task
from lit_marl.errors import one_of
from lit_marl.models import ModelConfig, ModelInputs


class DDPG(OffPolicyAlgorithm):
    """DDPG per group, the shared base of :class:`MADDPG` and :class:`IDDPG` (continuous actions).

    Args (beyond :class:`~lit_marl.algorithms.base.MarlAlgorithm`'s):
        share_param_critic: one Q-network shared by all agents of a group.
        n_optimizer_steps: minibatches (optimizer steps) per iteration.
        train_batch_size: transitions per minibatch.
        memory_size: replay buffer capacity per group (transitions).
        init_random_frames: frames collected with uniformly random actions before the policy acts.
        use_prioritized_replay_buffer: sample by TD error (Schaul et al., 2016) with ``prb_alpha``/``prb_beta``.
        buffer_device: where the buffers live: ``cpu``, ``train`` (the module's device) or ``disk``
            (memory-mapped files in the run folder).
        sequence_length: with a recurrent ``actor_model`` (Gru, Lstm), minibatches are
            ``train_batch_size // sequence_length`` slices of this many consecutive steps of one episode, sampled
            from the buffer (default: ``min(max_steps, train_batch_size)``).
        burn_in: steps before each slice that only refresh the stored hidden state with the current weights
            (no loss on them; R2D2's burn-in).
        soft_target_update: Polyak-average the target networks each step (``polyak_tau``); otherwise copy
            them every ``hard_target_update_frequency`` steps.
        exploration_eps_init / exploration_eps_end: standard deviation of the Gaussian action noise,
            annealed linearly over ``exploration_anneal_frames`` (default: a third of ``max_frames``).
        loss_function: ``l2``, ``l1`` or ``smooth_l1`` distance of the TD error.
        delay_value: use a target Q-network for the TD targets.
        use_tanh_mapping: squash the actor's output into the action bounds with tanh.
    """

    algorithm_name: ClassVar[str] = ""  # a base: use MADDPG or IDDPG
    supports_discrete_actions: ClassVar[bool] = False
    centralised_critic: ClassVar[bool] = True

    def __init__(
        self,
        task: Task,
        actor_model: ModelConfig | None = None,
        critic_model: ModelConfig | None = None,
        share_policy_params: bool = True,
        share_param_critic: bool = True,
        frames_per_batch: int = 6000,
        num_envs: int = 10,
        max_frames: int = 3_000_000,
        n_optimizer_steps: int = 1000,
        train_batch_size: int = 128,
        memory_size: int = 1_000_000,
        init_random_frames: int = 0,
        use_prioritized_replay_buffer: bool = False,
        prb_alpha: float = 0.6,
        prb_beta: float = 0.4,
        buffer_device: Literal["cpu", "train", "disk"] = "cpu",
        sequence_length: int | None = None,
        burn_in: int = 0,
        lr: float = 5e-5,
        adam_eps: float = 1e-6,
        gamma: float = 0.99,
        soft_target_update: bool = True,
        polyak_tau: float = 0.005,
        hard_target_update_frequency: int = 5,
        exploration_eps_init: float = 0.8,
        exploration_eps_end: float = 0.01,
        exploration_anneal_frames: int | None = None,
        loss_function: Literal["l2", "l1", "smooth_l1"] = "l2",
        delay_value: bool = True,
        use_tanh_mapping: bool = True,
        evaluation_episodes: int = 10,
        evaluation_batch_size: int | None = None,
        evaluation_deterministic: bool = True,
        evaluation_seed: int | None = None,
        test_episodes: int = 100,
        test_videos: int = 0,
        sampling_device: str | None = None,
        compile: bool = False,
        seed: int = 0,
        collect_with_grad: bool = False,
    ) -> None:
        self._set_off_policy_args_from(locals())
        self.share_param_critic = bool(share_param_critic)
        self.loss_function = one_of("loss_function", loss_function, ("l2", "l1", "smooth_l1"))
        self.delay_value = bool(delay_value)
        self.use_tanh_mapping = bool(use_tanh_mapping)
        super().__init__(**self.base_init_args(locals()))
        self._build_off_policy_parts()

    # ------------------------------------------------------------------ networks
    @override
    def _build_policy(self, group: str) -> TensorDictModuleBase:
        action_spec = self.task.specs.group_action_spec(group)
        # the tanh squashing is the network's head, not a module of its own: the actor runs on every optimizer step
        # (and again for the targets), and each TensorDict module call costs tens of microseconds
        head = TanhBounded(action_spec.space.low, action_spec.space.high) if self.use_tanh_mapping else None
        return self.actor_model.build_module(ModelInputs.of(self.task, group), [(group, "action")],
                                             action_spec.shape[-1], centralised=False,
                                             share_params=self.share_policy_params, head=head)

    @override
    def _build_exploration(self, group: str) -> AdditiveGaussianModule:
        return AdditiveGaussianModule(
            spec=self.task.specs.group_action_spec(group), sigma_init=self.exploration_eps_init,
            sigma_end=self.exploration_eps_end, annealing_num_steps=self.anneal_frames, action_key=(group, "action"),
        )

    @override
    def _build_critic(self, group: str) -> TensorDictModuleBase:
        return q_critic(self.task, group, self.critic_model, self.centralised_critic, self.share_param_critic)

    @override
    def _build_loss(self, group: str) -> DDPGLoss:
        loss = DDPGLoss(self.policies[group], self.critics[group], loss_function=self.loss_function,
                        delay_actor=False, delay_value=self.delay_value)
        loss.set_keys(state_action_value=(group, "state_action_value"), reward=(group, "reward"),
                      done=(group, "done"), terminated=(group, "terminated"), priority=(group, "td_error"))
        loss.make_value_estimator(ValueEstimators.TD0, gamma=self.gamma)
        return loss

    @override
    def param_groups(self, group: str) -> dict[str, list[nn.Parameter]]:
        return {"actor": list(self.policies[group].parameters()), "critic": list(self.critics[group].parameters())}


class MADDPG(DDPG):
    """Multi-Agent DDPG: decentralised deterministic actors, centralised Q-functions (all agents'
    observations and actions of the group, or the global state and all actions)."""

    algorithm_name: ClassVar[str] = "maddpg"
    centralised_critic: ClassVar[bool] = True


class IDDPG(DDPG):
    """Independent DDPG: each agent's Q-function sees its own observation and action only."""

    algorithm_name: ClassVar[str] = "iddpg"
    centralised_critic: ClassVar[bool] = False
