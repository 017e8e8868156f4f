"""Soft actor-critic for multi-agent groups: MASAC and ISAC, continuous and discrete actions.

SAC (Haarnoja et al., 2018) with twin Q-functions and a learned temperature; discrete actions use the
categorical variant (Christodoulou, 2019). MASAC's Q-functions are centralised over the group (or use
the global state); ISAC's see one agent. The maths is torchrl's ``SACLoss`` / ``DiscreteSACLoss``.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.modules import ProbabilisticActor
from torchrl.objectives import DiscreteSACLoss, SACLoss, ValueEstimators
from typing_extensions import override

from lit_marl.algorithms.common import FromState, q_critic, stochastic_policy
from lit_marl.algorithms.off_policy import OffPolicyAlgorithm
from lit_marl.envs.base import Task
from lit_marl.errors import ConfigError, non_negative_float, one_of, positive_float, positive_int, unit_interval
from lit_marl.models import Mlp, ModelConfig, ModelInputs


class SAC(OffPolicyAlgorithm):
    """SAC per group, the shared base of :class:`MASAC` and :class:`ISAC`.

    Args (beyond :class:`~lit_marl.algorithms.ddpg.DDPG`'s replay and target-network arguments):
        num_qvalue_nets: Q-functions whose minimum gives the targets (2: clipped double Q).
        target_entropy: ``"auto"`` (minus the action dimension per agent; for discrete actions
            ``discrete_target_entropy_weight`` × the maximum entropy) or a number.
        discrete_target_entropy_weight: fraction of the maximum entropy targeted with discrete actions.
        alpha_init: initial temperature; ``min_alpha`` / ``max_alpha`` clamp it; ``fixed_alpha`` keeps it.
        scale_mapping / use_tanh_normal: the continuous policy's distribution (as in PPO).
        delay_qvalue: use target Q-networks for the TD targets.
    """

    algorithm_name: ClassVar[str] = ""  # a base: use MASAC or ISAC
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
        # SAC explores by sampling its policy: the noise-annealing arguments do not apply.
        self._set_off_policy_args_from(locals(), exploration_eps_init=0.0, exploration_eps_end=0.0,
                                       exploration_anneal_frames=None)
        self.share_param_critic = bool(share_param_critic)
        self.num_qvalue_nets = positive_int("num_qvalue_nets", num_qvalue_nets)
        self.loss_function = one_of("loss_function", loss_function, ("l2", "l1", "smooth_l1"))
        self.delay_qvalue = bool(delay_qvalue)
        if target_entropy != "auto" and (isinstance(target_entropy, bool) or not isinstance(target_entropy, (int, float))):
            raise ConfigError(f"target_entropy: must be 'auto' or a number, got {target_entropy!r}")
        self.target_entropy = target_entropy
        self.discrete_target_entropy_weight = unit_interval("discrete_target_entropy_weight",
                                                            discrete_target_entropy_weight)
        self.alpha_init = positive_float("alpha_init", alpha_init)
        self.min_alpha = None if min_alpha is None else non_negative_float("min_alpha", min_alpha)
        self.max_alpha = None if max_alpha is None else positive_float("max_alpha", max_alpha)
        if self.min_alpha is not None and self.max_alpha is not None and self.min_alpha > self.max_alpha:
            raise ConfigError(f"min_alpha: {min_alpha} is larger than max_alpha={max_alpha}")
        self.fixed_alpha = bool(fixed_alpha)
        self.scale_mapping = scale_mapping
        self.use_tanh_normal = bool(use_tanh_normal)
        super().__init__(**self.base_init_args(locals()))
        self._build_off_policy_parts()

    # ------------------------------------------------------------------ networks
    @override
    def _build_policy(self, group: str) -> ProbabilisticActor:
        return stochastic_policy(self.task, group, self.actor_model, self.share_policy_params, self.scale_mapping,
                                 self.use_tanh_normal)

    def _q_network(self, group: str) -> nn.Module:
        """One Q-network of ``group``; the loss holds ``num_qvalue_nets`` independently initialised copies
        of its parameters (so it is not a separate submodule: only the loss's copies are trained)."""
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
    def _build_loss(self, group: str) -> SACLoss | DiscreteSACLoss:
        common = dict(num_qvalue_nets=self.num_qvalue_nets, loss_function=self.loss_function,
                      alpha_init=self.alpha_init, min_alpha=self.min_alpha, max_alpha=self.max_alpha,
                      fixed_alpha=self.fixed_alpha, target_entropy=self.target_entropy,
                      delay_qvalue=self.delay_qvalue)
        keys = dict(action=(group, "action"), reward=(group, "reward"), done=(group, "done"),
                    terminated=(group, "terminated"), priority=(group, "td_error"),
                    log_prob=(group, "action_log_prob"))
        if self.task.continuous_actions:
            loss = SACLoss(self.policies[group], self._q_network(group), action_spec=self.task.specs.action_spec,
                           **common)
            loss.set_keys(state_action_value=(group, "state_action_value"), **keys)
        else:
            action_spec = self.task.specs.group_action_spec(group)
            loss = DiscreteSACLoss(self.policies[group], self._q_network(group), action_space=action_spec,
                                   num_actions=action_spec.space.n,
                                   target_entropy_weight=self.discrete_target_entropy_weight, **common)
            loss.set_keys(action_value=(group, "action_value"), **keys)
        loss.make_value_estimator(ValueEstimators.TD0, gamma=self.gamma)
        return loss

    @override
    def param_groups(self, group: str) -> dict[str, list[nn.Parameter]]:
        loss = self.losses[group]
        return {"actor": list(self.policies[group].parameters()),
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


class MASAC(SAC):
    """Multi-Agent SAC: decentralised stochastic actors, centralised twin Q-functions per group."""

    algorithm_name: ClassVar[str] = "masac"
    centralised_critic: ClassVar[bool] = True


class ISAC(SAC):
    """Independent SAC: each agent's twin Q-functions see its own observation (and action) only."""

    algorithm_name: ClassVar[str] = "isac"
    centralised_critic: ClassVar[bool] = False
