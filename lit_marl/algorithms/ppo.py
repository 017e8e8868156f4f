"""Proximal Policy Optimization for multi-agent groups: MAPPO and IPPO.

MAPPO (Yu et al., 2022, "The Surprising Effectiveness of PPO in Cooperative Multi-Agent Games") uses a
centralised critic; IPPO (de Witt et al., 2020, "Is Independent Learning All You Need in the StarCraft
Multi-Agent Challenge?") gives every agent a critic of its own observation. Both use torchrl's
``ClipPPOLoss`` and ``GAE``; lit-marl only wires them per group.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from tensordict import TensorDictBase
from tensordict.nn import NormalParamExtractor, TensorDictModule, TensorDictModuleBase, TensorDictSequential
from torch import nn
from torchrl.modules import ProbabilisticActor
from torchrl.objectives import ClipPPOLoss, ValueEstimators
from typing_extensions import override

from lit_marl.algorithms.on_policy import OnPolicyAlgorithm
from lit_marl.algorithms.common import FromState, stochastic_policy
from lit_marl.envs.base import Task
from lit_marl.models import ModelConfig, ModelInputs
from lit_marl.models.recurrent import recurrent_state_specs, sequence_mode
from lit_marl.errors import ConfigError, non_negative_float, one_of, positive_float, positive_int, unit_interval


class PPO(OnPolicyAlgorithm):
    """Clipped-surrogate PPO per group, the shared base of :class:`MAPPO` and :class:`IPPO`.

    Args (beyond :class:`~lit_marl.algorithms.base.MarlAlgorithm`'s):
        n_minibatch_iters: passes (PPO epochs) over each collected batch.
        minibatch_size: frames per minibatch (one optimizer step each).
        share_param_critic: one critic network shared by all agents of a group.
        clip_epsilon: PPO ratio clipping ε.
        entropy_coef: weight of the entropy bonus.
        critic_coef: weight of the critic (value) loss.
        loss_critic_type: ``"l2"``, ``"l1"`` or ``"smooth_l1"`` distance of the value loss.
        lmbda: GAE λ.
        scale_mapping: how the policy's raw scale output becomes a standard deviation
            (``"biased_softplus_1.0"``, ``"softplus"``, ``"exp"``…; continuous actions).
        use_tanh_normal: tanh-squashed normal bounded to the action range (True) or a plain
            independent normal (False); continuous actions.
        minibatch_advantage: normalise advantages within each minibatch.
        sequence_length: with a recurrent actor or critic (Gru, Lstm), minibatches are made of trajectory chunks of
            this many steps (``minibatch_size // sequence_length`` chunks each), and the networks run through each
            chunk from the hidden state stored at its first step; default: each env's whole rollout of the
            iteration (``frames_per_batch // num_envs`` steps). Ignored by feed-forward models.
    """

    algorithm_name: ClassVar[str] = ""  # a base: use MAPPO or IPPO
    supports_recurrent: ClassVar[bool] = True
    #: MAPPO's critic sees every agent of the group (or the global state); IPPO's only its own agent
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
        n_minibatch_iters: int = 45,
        minibatch_size: int = 400,
        lr: float = 5e-5,
        adam_eps: float = 1e-6,
        gamma: float = 0.99,
        lmbda: float = 0.9,
        clip_epsilon: float = 0.2,
        entropy_coef: float = 0.0,
        critic_coef: float = 1.0,
        loss_critic_type: Literal["l2", "l1", "smooth_l1"] = "l2",
        scale_mapping: str = "biased_softplus_1.0",
        use_tanh_normal: bool = True,
        minibatch_advantage: bool = False,
        sequence_length: int | None = None,
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
        self.n_minibatch_iters = positive_int("n_minibatch_iters", n_minibatch_iters)
        self.minibatch_size = positive_int("minibatch_size", minibatch_size)
        self.share_param_critic = bool(share_param_critic)
        self.lmbda = unit_interval("lmbda", lmbda)
        self.clip_epsilon = positive_float("clip_epsilon", clip_epsilon)
        self.entropy_coef = non_negative_float("entropy_coef", entropy_coef)
        self.critic_coef = non_negative_float("critic_coef", critic_coef)
        self.loss_critic_type = one_of("loss_critic_type", loss_critic_type, ("l2", "l1", "smooth_l1"))
        try:
            if not isinstance(scale_mapping, str):
                raise ValueError(scale_mapping)
            NormalParamExtractor(scale_mapping=scale_mapping)
        except (NotImplementedError, ValueError, KeyError):
            raise ConfigError(
                f"scale_mapping: {scale_mapping!r} is unknown; allowed e.g. 'biased_softplus_1.0', 'softplus', "
                f"'exp', 'relu', 'biased_softplus_<bias>'"
            ) from None
        self.scale_mapping = scale_mapping
        self.use_tanh_normal = bool(use_tanh_normal)
        self.minibatch_advantage = bool(minibatch_advantage)
        if sequence_length is not None:
            positive_int("sequence_length", sequence_length)
        self.sequence_length = sequence_length
        super().__init__(**self.base_init_args(locals()))

    # ------------------------------------------------------------------ recurrence
    @property
    def recurrent(self) -> bool:
        return self.actor_model.is_recurrent or self.critic_model.is_recurrent

    @property
    @override
    def chunk_length(self) -> int | None:
        """Steps per training chunk with recurrent networks (None: minibatches of single steps)."""
        if not self.recurrent:
            return None
        return self.sequence_length or self.frames_per_batch // self.num_envs

    @override
    def _validate_args(self) -> None:
        super()._validate_args()
        if not self.recurrent:
            return
        steps = self.frames_per_batch // self.num_envs
        if steps % self.chunk_length:
            raise ConfigError(
                f"sequence_length: {self.sequence_length} does not divide the {steps} steps each env collects per "
                f"iteration (frames_per_batch={self.frames_per_batch} / num_envs={self.num_envs}); allowed: a divisor "
                f"of {steps}"
            )
        if self.minibatch_size < self.chunk_length:
            raise ConfigError(
                f"minibatch_size: {self.minibatch_size} frames cannot hold one chunk of {self.chunk_length} steps "
                f"(sequence_length); allowed: {self.chunk_length} or more"
            )

    @override
    def policy_for_collection(self) -> TensorDictModuleBase:
        if not self.critic_model.is_recurrent:
            return self.policy
        # a recurrent critic steps with the policy, so every step stores the critic's hidden state too
        return TensorDictSequential(*self.policies.values(), *self.critics.values())

    @override
    def loss(self, group: str, batch: TensorDictBase) -> TensorDictBase:
        if not self.recurrent:  # no context to enter on every minibatch of a feed-forward model
            return super().loss(group, batch)
        with sequence_mode():
            return super().loss(group, batch)

    # ------------------------------------------------------------------ networks
    @override
    def _build_policy(self, group: str) -> ProbabilisticActor:
        return stochastic_policy(self.task, group, self.actor_model, self.share_policy_params, self.scale_mapping,
                                 self.use_tanh_normal)

    @override
    def _build_critic(self, group: str) -> TensorDictModule:
        specs = self.task.specs
        n_agents = specs.n_agents(group)
        if self.centralised_critic and self.task.has_state:
            state_shape = specs.state_spec.shape
            net = FromState(self.critic_model.build_single(state_shape.numel(), n_agents), len(state_shape))
            return TensorDictModule(net, in_keys=[self.task.state_key], out_keys=[(group, "state_value")])
        return self.critic_model.build_module(ModelInputs.of(self.task, group, field="critic_model"), [(group, "state_value")], 1,
                                              centralised=self.centralised_critic,
                                              share_params=self.share_param_critic)

    @override
    def _build_loss(self, group: str) -> ClipPPOLoss:
        loss = ClipPPOLoss(
            actor_network=self.policies[group],
            critic_network=self.critics[group],
            clip_epsilon=self.clip_epsilon,
            entropy_bonus=self.entropy_coef > 0,
            entropy_coeff=self.entropy_coef,
            critic_coeff=self.critic_coef,
            loss_critic_type=self.loss_critic_type,
            normalize_advantage=self.minibatch_advantage,
        )
        loss.set_keys(
            reward=(group, "reward"),
            action=(group, "action"),
            done=(group, "done"),
            terminated=(group, "terminated"),
            advantage=(group, "advantage"),
            value_target=(group, "value_target"),
            value=(group, "state_value"),
            sample_log_prob=(group, "action_log_prob"),
        )
        # torch's RNN kernels have no vmap rule: recurrent critics are evaluated on root and next steps in turn
        loss.make_value_estimator(ValueEstimators.GAE, gamma=self.gamma, lmbda=self.lmbda,
                                  deactivate_vmap=self.critic_model.is_recurrent)
        return loss

    @override
    def param_groups(self, group: str) -> dict[str, list[nn.Parameter]]:
        return {"actor": list(self.policies[group].parameters()), "critic": list(self.critics[group].parameters())}

    # ------------------------------------------------------------------ data
    @override
    def process_batch(self, batch: TensorDictBase) -> TensorDictBase:
        """Per-group done flags (see the base class), then GAE advantages and value targets."""
        batch = super().process_batch(batch)
        view = batch
        if self.recurrent:
            # Every step carries the hidden state stored while collecting, so values are computed step by step. The
            # episode-start flag is left out: the stored state is already zero there, and torchrl would otherwise
            # also reset the state of the step after an episode's first one. Values a recurrent critic wrote while
            # collecting are recomputed.
            view = batch.exclude("is_init", ("next", "is_init"), *[(g, "state_value") for g in self.groups])
        for group in self.groups:
            loss = self.losses[group]
            loss.value_estimator(view, params=loss.critic_network_params,
                                 target_params=loss.target_critic_network_params)
        if view is not batch:
            batch.update(view.select(*[(g, key) for g in self.groups
                                       for key in ("advantage", "value_target", "state_value")]))
        return batch

    @override
    def training_keys(self) -> list:
        keys = []
        for group in self.groups:
            keys += [(group, "observation"), (group, "action"), (group, "action_log_prob"),
                     (group, "advantage"), (group, "value_target"), (group, "state_value")]
            if self.task.has_state:
                keys.append(self.task.state_key)
            if self.task.action_mask_key(group) is not None:
                keys.append(self.task.action_mask_key(group))
        if self.recurrent:  # the stored hidden states (read at each chunk's first step) and episode starts
            for module in (*self.policies.values(), *self.critics.values()):
                keys += list(recurrent_state_specs(module))
            keys.append("is_init")
        return list(dict.fromkeys(keys))


class MAPPO(PPO):
    """Multi-Agent PPO: decentralised actors, a centralised critic per group (over all the group's
    agents' observations, or the global state where the task has one)."""

    algorithm_name: ClassVar[str] = "mappo"
    centralised_critic: ClassVar[bool] = True


class IPPO(PPO):
    """Independent PPO: decentralised actors and decentralised critics (each agent's own observation)."""

    algorithm_name: ClassVar[str] = "ippo"
    centralised_critic: ClassVar[bool] = False
