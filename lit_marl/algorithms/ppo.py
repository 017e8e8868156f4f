"""Proximal Policy Optimization for multi-agent groups: MAPPO and IPPO.

MAPPO (Yu et al., 2022, "The Surprising Effectiveness of PPO in Cooperative Multi-Agent Games") uses a
centralised critic; IPPO (de Witt et al., 2020, "Is Independent Learning All You Need in the StarCraft
Multi-Agent Challenge?") gives every agent a critic of its own observation. Both use torchrl's
``ClipPPOLoss`` and ``GAE``; lit-marl only wires them per group.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from tensordict import TensorDictBase
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn
from torchrl.modules import ProbabilisticActor
from torchrl.objectives import ClipPPOLoss, ValueEstimators
from typing_extensions import override

from lit_marl.algorithms.base import OnPolicyAlgorithm
from lit_marl.algorithms.common import FromState, stochastic_policy
from lit_marl.envs.base import Task
from lit_marl.models import ModelConfig, ModelInputs
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
    """

    algorithm_name: ClassVar[str] = ""  # a base: use MAPPO or IPPO
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
        evaluation_episodes: int = 10,
        evaluation_batch_size: int | None = None,
        evaluation_deterministic: bool = True,
        evaluation_seed: int | None = None,
        test_episodes: int = 100,
        seed: int = 0,
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
            NormalParamExtractor(scale_mapping=scale_mapping)
        except (NotImplementedError, ValueError, KeyError):
            raise ConfigError(
                f"scale_mapping: {scale_mapping!r} is unknown; allowed e.g. 'biased_softplus_1.0', 'softplus', "
                f"'exp', 'relu', 'biased_softplus_<bias>'"
            ) from None
        self.scale_mapping = scale_mapping
        self.use_tanh_normal = bool(use_tanh_normal)
        self.minibatch_advantage = bool(minibatch_advantage)
        super().__init__(**self.base_init_args(locals()))

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
        loss.make_value_estimator(ValueEstimators.GAE, gamma=self.gamma, lmbda=self.lmbda)
        return loss

    @override
    def param_groups(self, group: str) -> dict[str, list[nn.Parameter]]:
        return {"actor": list(self.policies[group].parameters()), "critic": list(self.critics[group].parameters())}

    # ------------------------------------------------------------------ data
    @override
    def process_batch(self, batch: TensorDictBase) -> TensorDictBase:
        """Per-group done flags (see the base class), then GAE advantages and value targets."""
        batch = super().process_batch(batch)
        for group in self.groups:
            loss = self.losses[group]
            loss.value_estimator(batch, params=loss.critic_network_params,
                                 target_params=loss.target_critic_network_params)
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
