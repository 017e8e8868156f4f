"""Proximal Policy Optimization for multi-agent groups: MAPPO and IPPO.

MAPPO (Yu et al., 2022, "The Surprising Effectiveness of PPO in Cooperative Multi-Agent Games") uses a
centralised critic; IPPO (de Witt et al., 2020, "Is Independent Learning All You Need in the StarCraft
Multi-Agent Challenge?") gives every agent a critic of its own observation. Both use torchrl's
``ClipPPOLoss`` and ``GAE``; lit-marl only wires them per group (:class:`PPO`, the learner).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
from tensordict import TensorDictBase
from tensordict.nn import NormalParamExtractor, TensorDictModule, TensorDictModuleBase, TensorDictSequential
from torch import nn
from torchrl.modules import ProbabilisticActor
from torchrl.objectives import ClipPPOLoss, ValueEstimators
from torchrl.objectives.value import GAE
from typing_extensions import override

from lit_marl.algorithms.common import FromState, stochastic_policy
from lit_marl.algorithms.learner import GroupLearner
from lit_marl.algorithms.loops import OnPolicyLoop
from lit_marl.algorithms.base import MarlAlgorithm
from lit_marl.models import ModelInputs
from lit_marl.models.recurrent import recurrent_state_specs, sequence_mode
from lit_marl.errors import ConfigError, non_negative_float, one_of, positive_float, positive_int, unit_interval


class PPO(GroupLearner):
    """What one group learns with clipped-surrogate PPO: the learner of :class:`MAPPO` and :class:`IPPO`.

    Args:
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

    on_policy: ClassVar[bool] = True
    loop = OnPolicyLoop
    supports_recurrent: ClassVar[bool] = True

    def __init__(
        self,
        task,
        group,
        run,
        centralised_critic: bool = True,
        share_param_critic: bool = True,
        lmbda: float = 0.9,
        clip_epsilon: float = 0.2,
        entropy_coef: float = 0.0,
        critic_coef: float = 1.0,
        loss_critic_type: Literal["l2", "l1", "smooth_l1"] = "l2",
        scale_mapping: str = "biased_softplus_1.0",
        use_tanh_normal: bool = True,
        minibatch_advantage: bool = False,
        sequence_length: int | None = None,
        **kwargs: Any,
    ) -> None:
        #: MAPPO's critic sees every agent of the group (or the global state); IPPO's only its own agent
        self.centralised_critic = bool(centralised_critic)
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
        super().__init__(task, group, run, **kwargs)

    # ------------------------------------------------------------------ recurrence
    @property
    @override
    def recurrent(self) -> bool:
        return self.actor_model.is_recurrent or self.critic_model.is_recurrent

    @property
    @override
    def chunk_length(self) -> int | None:
        """Steps per training chunk with recurrent networks, or None (minibatches of single steps)."""
        if not self.recurrent:
            return None
        return self.sequence_length or self.run.frames_per_batch // self.run.num_envs

    @override
    def validate(self) -> None:
        if not self.recurrent:
            return
        steps = self.run.frames_per_batch // self.run.num_envs
        if steps % self.chunk_length:
            raise ConfigError(
                f"sequence_length: {self.sequence_length} does not divide the {steps} steps each env collects per "
                f"iteration (frames_per_batch={self.run.frames_per_batch} / num_envs={self.run.num_envs}); allowed: "
                f"a divisor of {steps}"
            )
        if self.run.batch_size < self.chunk_length:
            raise ConfigError(
                f"minibatch_size: {self.run.batch_size} frames cannot hold one chunk of {self.chunk_length} steps "
                f"(sequence_length); allowed: {self.chunk_length} or more"
            )

    @override
    def collection_policy(self) -> TensorDictModuleBase:
        if not self.critic_model.is_recurrent:
            return self.policy
        # a recurrent critic steps with the policy, so every step stores the critic's hidden state too
        return TensorDictSequential(self.policy, self.critic)

    @override
    def loss(self, batch: TensorDictBase) -> TensorDictBase:
        if not self.recurrent:  # no context to enter on every minibatch of a feed-forward model
            return super().loss(batch)
        with sequence_mode():
            return super().loss(batch)

    @property
    def entropy_weight(self) -> float:
        """The entropy coefficient the torchrl loss applies (its mean runs over every agent of the group)."""
        return self.entropy_coef

    # ------------------------------------------------------------------ networks
    @override
    def build_policy(self) -> ProbabilisticActor:
        return stochastic_policy(self.task, self.group, self.actor_model, self.share_policy_params,
                                 self.scale_mapping, self.use_tanh_normal)

    @override
    def build_critic(self) -> TensorDictModule:
        group, specs = self.group, self.task.specs
        n_agents = specs.n_agents(group)
        if self.centralised_critic and self.task.has_state:
            state_shape = specs.state_spec.shape
            net = FromState(self.critic_model.build_single(state_shape.numel(), n_agents), len(state_shape))
            return TensorDictModule(net, in_keys=[self.task.state_key], out_keys=[(group, "state_value")])
        return self.critic_model.build_module(ModelInputs.of(self.task, group, field="critic_model"),
                                              [(group, "state_value")], 1, centralised=self.centralised_critic,
                                              share_params=self.share_param_critic)

    @override
    def build_objective(self) -> ClipPPOLoss:
        group = self.group
        loss = ClipPPOLoss(
            actor_network=self.policy,
            critic_network=self.critic,
            clip_epsilon=self.clip_epsilon,
            entropy_bonus=self.entropy_coef > 0,
            entropy_coeff=self.entropy_weight,
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
    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        return {"actor": list(self.policy.parameters()), "critic": list(self.critic.parameters())}

    # ------------------------------------------------------------------ data
    @override
    def process_batch(self, batch: TensorDictBase) -> TensorDictBase:
        """Per-group done flags (see :class:`GroupLearner`), then GAE advantages and value targets."""
        batch = super().process_batch(batch)
        group, view = self.group, batch
        if self.recurrent:
            # Every step carries the hidden state stored while collecting, so values are computed step by step. The
            # episode-start flag is left out: the stored state is already zero there, and torchrl would otherwise
            # also reset the state of the step after an episode's first one. Values a recurrent critic wrote while
            # collecting are recomputed.
            view = batch.exclude("is_init", ("next", "is_init"), (group, "state_value"))
        loss = self.objective
        if self.recurrent or not state_values_in_one_call(self.critic, batch, loss.tensor_keys.value):
            loss.value_estimator(view, params=loss.critic_network_params,
                                 target_params=loss.target_critic_network_params)
        else:  # torchrl's GAE on the values written, its network held out
            estimator = loss.value_estimator
            gae = GAE(gamma=estimator.gamma, lmbda=estimator.lmbda, value_network=None,
                      average_gae=estimator.average_gae, vectorized=estimator.vectorized,
                      time_dim=estimator.time_dim, auto_reset_env=estimator.auto_reset_env)
            gae.set_keys(**{key: getattr(estimator.tensor_keys, key)
                            for key in ("advantage", "value_target", "value", "reward", "done", "terminated")})
            gae(batch)
        if view is not batch:
            batch.update(view.select(*[(group, key) for key in ("advantage", "value_target", "state_value")]))
        return batch

    @override
    def training_keys(self) -> list:
        group = self.group
        keys = [(group, "observation"), (group, "action"), (group, "action_log_prob"),
                (group, "advantage"), (group, "value_target"), (group, "state_value")]
        if self.task.has_state:
            keys.append(self.task.state_key)
        if self.task.action_mask_key(group) is not None:
            keys.append(self.task.action_mask_key(group))
        if self.recurrent:  # the stored hidden states (read at each chunk's first step) and episode starts
            for module in (self.policy, self.critic):
                keys += list(recurrent_state_specs(module))
            keys.append("is_init")
        return list(dict.fromkeys(keys))


def state_values_in_one_call(critic: TensorDictModuleBase, batch: TensorDictBase, value_key) -> bool:
    """Write ``value_key`` and ``("next", value_key)`` of a ``[num_envs, steps]`` batch with one call of a
    feed-forward critic; False (nothing written) for another layout.

    torchrl's GAE calls the critic on every step's inputs and on every step's next inputs: twice the frames. A next
    input is bitwise the following step's input except where an episode ended (or the batch does), so the critic runs
    on every step's inputs and on the next inputs that differ from the following step's (found by comparing them:
    exact for any env or transform), and the other next values are the following step's values. On an accelerator
    the comparison reads one count on the host, once per batch.
    """
    if batch.ndim != 2:
        return False
    in_keys = list(critic.in_keys)
    roots = [batch.get(key) for key in in_keys]
    nexts = [batch.get(("next", key), None) for key in in_keys]
    if any(nxt is None for nxt in nexts):
        return False
    n_envs, steps = batch.shape
    differs = torch.ones(n_envs, steps, dtype=torch.bool, device=roots[0].device)  # the last step: no follower
    differs[:, :-1] = False
    for root, nxt in zip(roots, nexts) if steps > 1 else ():
        differs[:, :-1] |= (nxt[:, :-1] != root[:, 1:]).reshape(n_envs, steps - 1, -1).any(-1)
    flat = batch.select(*in_keys).reshape(-1)
    extra = batch.get("next").select(*in_keys)[differs]
    values = critic(torch.cat([flat, extra], 0)).get(value_key)
    # a centralised critic's value is one per frame, expanded over the agents: stored as a tensor of its own
    value = values[: flat.shape[0]].unflatten(0, (n_envs, steps)).contiguous()
    next_value = torch.empty_like(value)
    next_value[:, :-1] = value[:, 1:]
    next_value[differs] = values[flat.shape[0]:]
    batch.set(value_key, value)
    batch.set(("next", value_key), next_value)
    return True


class MAPPO(MarlAlgorithm):
    """Multi-Agent PPO (Yu et al., 2022): decentralised actors, a centralised critic per group (over all the group's
    agents' observations, or the global state where the task has one), trained with the clipped surrogate and GAE.

    Examples:
        One iteration on VMAS *balance*, two agents, toy sizes (BenchMARL's: ``configs/mappo_vmas_balance.yaml``):

        >>> import lightning.pytorch as pl
        >>> from lit_marl.algorithms import MAPPO
        >>> from lit_marl.envs import VmasTask
        >>> from lit_marl.models import Mlp
        >>> model = MAPPO(VmasTask("balance", max_steps=10, n_agents=2), actor_model=Mlp(num_cells=[32]),
        ...               critic_model=Mlp(num_cells=[32]), num_envs=2, frames_per_batch=20, max_frames=20,
        ...               minibatch_size=10, n_minibatch_iters=2, evaluation_episodes=1)
        >>> pl.Trainer(max_epochs=-1, logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(model)
        >>> model.frames, model.iteration  # the frame budget, max_frames, ended training
        (20, 1)
    """

    algorithm_name: ClassVar[str] = "mappo"
    learner_class = PPO
    learner_settings: ClassVar[dict[str, Any]] = {"centralised_critic": True}


class IPPO(MarlAlgorithm):
    """Independent PPO (de Witt et al., 2020): decentralised actors and decentralised critics (each agent's value of
    its own observation); otherwise MAPPO's losses and loop.

    Examples:
        One iteration on VMAS *balance*, two agents, toy sizes (BenchMARL's: ``configs/ippo_vmas_balance.yaml``):

        >>> import lightning.pytorch as pl
        >>> from lit_marl.algorithms import IPPO
        >>> from lit_marl.envs import VmasTask
        >>> model = IPPO(VmasTask("balance", max_steps=10, n_agents=2), num_envs=2, frames_per_batch=20,
        ...             max_frames=20, minibatch_size=10, n_minibatch_iters=2, evaluation_episodes=1)
        >>> pl.Trainer(max_epochs=-1, logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(model)
        >>> model.learners["agents"].centralised_critic
        False
    """

    algorithm_name: ClassVar[str] = "ippo"
    learner_class = PPO
    learner_settings: ClassVar[dict[str, Any]] = {"centralised_critic": False}
