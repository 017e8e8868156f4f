"""Off-policy learning: replay settings, exploration, target networks and priorities of a group
(:class:`OffPolicyLearner`), trained by the run's loop over replay buffers (:class:`~lit_marl.algorithms.loops.OffPolicyLoop`).

Each iteration collects ``frames_per_batch`` frames, adds each group's part to that group's replay
buffer and trains ``n_optimizer_steps`` minibatches sampled from the buffers (one Lightning epoch).
After every optimizer step the target networks move (soft: Polyak averaging with ``polyak_tau``;
hard: a copy every ``hard_target_update_frequency`` steps) and, with prioritized replay, the sampled
transitions get their new priorities. Exploration is annealed by collected frames.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
from tensordict import TensorDictBase
from tensordict.utils import unravel_key
from tensordict.nn import TensorDictModuleBase, TensorDictSequential
from torchrl.objectives import HardUpdate, SoftUpdate
from typing_extensions import override

from lit_marl.algorithms.learner import GroupLearner
from lit_marl.algorithms.loops import OffPolicyLoop
from lit_marl.data.replay import BUFFER_DEVICES, TRAJECTORY_KEY, ReplayShape
from lit_marl.errors import ConfigError, check_types, non_negative_int, positive_int, unit_interval
from lit_marl.models.recurrent import recurrent_state_specs, sequence_mode
from lit_marl.utils import deepcopy_keeping_shared_tensors


class RandomUntil(TensorDictModuleBase):
    """Steps the wrapped policy, or uniformly random actions while ``active`` (``init_random_frames``)."""

    def __init__(self, policy: TensorDictModuleBase, action_specs: dict[tuple, Any],
                 mask_keys: dict[tuple, tuple | None]) -> None:
        super().__init__()
        self.policy = policy
        self.action_specs = action_specs
        self.mask_keys = mask_keys
        self.in_keys = policy.in_keys
        self.out_keys = policy.out_keys
        self.active = False
        self.steps_policy = bool(recurrent_state_specs(policy))

    @override
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if not self.active:
            return self.policy(tensordict)
        if self.steps_policy:  # a recurrent policy still runs, so its hidden state follows the episode
            tensordict = self.policy(tensordict)
        for key, spec in self.action_specs.items():
            mask_key = self.mask_keys.get(key)
            if mask_key is None:
                action = spec.rand(tensordict.batch_size).to(tensordict.device)
            else:  # uniform over the legal actions
                action = torch.distributions.Categorical(probs=tensordict.get(mask_key).float()).sample()
            tensordict.set(key, action)
        return tensordict


class OffPolicyLearner(GroupLearner):
    """What one group learns from a replay buffer (MADDPG, IDDPG, MASAC, ISAC and the Q-learning family).

    A subclass implements :meth:`build_exploration` where its policy explores by more than sampling.

    Args:
        memory_size: replay buffer capacity per group (transitions; episodes with ``sample_episodes``).
        sample_episodes: EPyMARL's episode replay (Papoudakis et al., 2021): every minibatch is ``train_batch_size``
            distinct whole episodes (its ``batch_size``), drawn uniformly among the ``memory_size`` most recent
            complete ones (its ``buffer_size``); the loss averages over their steps, so a minibatch's number of
            transitions varies with the episodes' lengths. Feed-forward policies; the storage holds
            ``(memory_size + 2 * num_envs) * max_steps`` transitions.
        init_random_frames: frames collected with uniformly random actions before the policy acts.
        use_prioritized_replay_buffer: sample by TD error (Schaul et al., 2016) with ``prb_alpha``/``prb_beta``.
        prb_alpha: how strongly priorities skew sampling (0: uniform).
        prb_beta: importance-sampling correction exponent.
        buffer_device: where the buffers live: ``cpu``, ``train`` (the module's device) or ``disk``
            (memory-mapped files in the run folder).
        sequence_length: with a recurrent ``actor_model`` (Gru, Lstm), minibatches are
            ``train_batch_size // sequence_length`` slices of this many consecutive steps of one episode, sampled
            from the buffer (default: ``min(max_steps, train_batch_size)``).
        burn_in: steps before each slice that only refresh the stored hidden state with the current weights
            (no loss on them; R2D2's burn-in).
        soft_target_update: Polyak-average the target networks each step (``polyak_tau``); otherwise copy
            them every ``hard_target_update_frequency`` steps.
        polyak_tau: weight of the online network in each soft target update.
        hard_target_update_frequency: optimizer steps between hard target updates.
    """

    on_policy: ClassVar[bool] = False
    loop = OffPolicyLoop
    supports_recurrent: ClassVar[bool] = True

    def __init__(
        self,
        task,
        group,
        run,
        memory_size: int = 1_000_000,
        sample_episodes: bool = False,
        init_random_frames: int = 0,
        use_prioritized_replay_buffer: bool = False,
        prb_alpha: float = 0.6,
        prb_beta: float = 0.4,
        buffer_device: Literal["cpu", "train", "disk"] = "cpu",
        sequence_length: int | None = None,
        burn_in: int = 0,
        soft_target_update: bool = True,
        polyak_tau: float = 0.005,
        hard_target_update_frequency: int = 5,
        **kwargs: Any,
    ) -> None:
        self.memory_size = positive_int("memory_size", memory_size)
        check_types(OffPolicyLearner.__init__, {"sample_episodes": sample_episodes})
        self.sample_episodes = sample_episodes
        if run.batch_size > self.memory_size:
            raise ConfigError(f"train_batch_size: {run.batch_size} is larger than memory_size={memory_size}; "
                              f"allowed: 1..{memory_size}")
        self.init_random_frames = non_negative_int("init_random_frames", init_random_frames)
        self.use_prioritized_replay_buffer = bool(use_prioritized_replay_buffer)
        self.prb_alpha = unit_interval("prb_alpha", prb_alpha)
        self.prb_beta = unit_interval("prb_beta", prb_beta)
        if buffer_device not in BUFFER_DEVICES:
            raise ConfigError(f"buffer_device: {buffer_device!r} is unknown; allowed: {', '.join(BUFFER_DEVICES)}")
        self.buffer_device = buffer_device
        if sequence_length is not None:
            positive_int("sequence_length", sequence_length)
        self.sequence_length = sequence_length
        self.burn_in = non_negative_int("burn_in", burn_in)
        self.soft_target_update = bool(soft_target_update)
        if isinstance(polyak_tau, bool) or not isinstance(polyak_tau, (int, float)) or not 0 < polyak_tau <= 1:
            raise ConfigError(f"polyak_tau: must be in (0, 1], got {polyak_tau!r}")
        self.polyak_tau = float(polyak_tau)
        self.hard_target_update_frequency = positive_int("hard_target_update_frequency", hard_target_update_frequency)
        super().__init__(task, group, run, **kwargs)
        if group is None:  # arguments checked: nothing to build
            return
        self.exploration = self.build_exploration()
        # moves the objective's target networks (not a module: it holds the objective, a submodule already)
        self.target_updater = SoftUpdate(self.objective, tau=self.polyak_tau) if self.soft_target_update \
            else HardUpdate(self.objective, value_network_update_interval=self.hard_target_update_frequency)
        self._random_switch: RandomUntil | None = None

    @property
    @override
    def chunk_length(self) -> int | None:
        """Steps of each sampled slice on which the loss is computed (recurrent policies; else None)."""
        if not self.recurrent:
            return None
        return self.sequence_length or min(self.task.max_steps, self.run.batch_size)

    @override
    def validate(self) -> None:
        if self.critic_model.is_recurrent:
            raise ConfigError(
                f"critic_model: {type(self.critic_model).__name__} is recurrent; off-policy algorithms train "
                f"recurrent policies (actor_model) on sampled sequences, but their critics are feed-forward for now; "
                f"allowed: Mlp, Cnn, DeepSets, Gnn, Sequence of those (or MAPPO/IPPO for a recurrent critic)"
            )
        if self.sample_episodes and self.recurrent:
            raise ConfigError(f"actor_model: {type(self.actor_model).__name__!r} does not combine with sample_episodes: "
                              f"true; allowed: a feed-forward model (recurrent ones train on sampled slices), or "
                              f"sample_episodes: false")
        if self.sample_episodes and self.use_prioritized_replay_buffer:
            raise ConfigError("use_prioritized_replay_buffer: True does not combine with sample_episodes: true; "
                              "allowed: false (episodes are drawn uniformly), or sample_episodes: false")
        if self.recurrent:
            if self.use_prioritized_replay_buffer:
                raise ConfigError("use_prioritized_replay_buffer: true is not supported with a recurrent actor_model "
                                  "(sequences are sampled uniformly); allowed: false")
            if self.chunk_length > self.run.batch_size:
                raise ConfigError(f"sequence_length: {self.chunk_length} is longer than train_batch_size="
                                  f"{self.run.batch_size}; allowed: 1..{self.run.batch_size}")
            if self.chunk_length + self.burn_in > self.task.max_steps:
                raise ConfigError(
                    f"burn_in: {self.burn_in} + sequence_length {self.chunk_length} exceeds the episode length "
                    f"max_steps={self.task.max_steps}; no slice could be sampled. Allowed: burn_in + sequence_length "
                    f"<= {self.task.max_steps}"
                )
        if self.run.collect_with_grad and self.init_random_frames:
            raise ConfigError(f"init_random_frames: {self.init_random_frames} random frames cannot be collected with "
                              f"collect_with_grad (as in BenchMARL); allowed: 0, or collect_with_grad: false")
        if self.init_random_frames % self.run.frames_per_batch:
            raise ConfigError(
                f"init_random_frames: {self.init_random_frames} is not a multiple of frames_per_batch="
                f"{self.run.frames_per_batch}; allowed: 0, {self.run.frames_per_batch}, "
                f"{2 * self.run.frames_per_batch}, …"
            )

    def build_exploration(self) -> TensorDictModuleBase | None:
        """A module appended to the policy during collection (e.g. Gaussian noise); None for none."""
        return None

    def replay_shape(self) -> ReplayShape:
        """What the group's replay buffer looks like (the run builds it)."""
        if self.sample_episodes:
            # the window's episodes, the ones still running and those that started before the oldest of the window
            capacity = (self.memory_size + 2 * self.run.num_envs) * self.task.max_steps
            return ReplayShape(capacity, self.buffer_device, episodes=self.memory_size)
        return ReplayShape(self.memory_size, self.buffer_device,
                           priority=(self.prb_alpha, self.prb_beta) if self.use_prioritized_replay_buffer else None,
                           slice_length=self.burn_in + self.chunk_length if self.recurrent else None)

    # ------------------------------------------------------------------ collection
    @override
    def collection_policy(self) -> RandomUntil:
        modules = [self.policy] if self.exploration is None else [self.policy, self.exploration]
        device = next(self.policy.parameters()).device
        key = (self.group, "action")
        # kept out of the module tree (and so out of state_dict)
        self.__dict__["_random_switch"] = RandomUntil(TensorDictSequential(*modules),
                                                      {key: self.task.specs.group_action_spec(self.group).to(device)},
                                                      {key: self.task.action_mask_key(self.group)})
        return self._random_switch

    @override
    def prepare_collection(self, frames: int) -> None:
        """Uniformly random actions while ``frames`` (collected so far) is below ``init_random_frames``."""
        self._random_switch.active = frames < self.init_random_frames

    @override
    def after_collection(self, frames: int) -> None:
        """Anneal the exploration module, where it anneals (noise, epsilon)."""
        if self.exploration is not None and hasattr(self.exploration, "step"):
            self.exploration.step(frames)

    # ------------------------------------------------------------------ training
    @override
    def training_keys(self) -> list:
        """What the group's replay buffer stores: the keys its loss reads (with a recurrent policy also its stored
        hidden states, episode starts and episode numbers, for sequence sampling)."""
        keys = [unravel_key(key) for key in self.objective.in_keys]
        state_key = self.task.state_key
        if state_key is not None and state_key in keys:
            # a TD target that conditions on the state reads the next one too (torchrl's SACLoss leaves it
            # out of in_keys)
            keys.append(unravel_key(("next", state_key)))
        if self.recurrent:
            states = list(recurrent_state_specs(self.policy))
            keys += [*states, *(("next", *key) for key in states), "is_init", TRAJECTORY_KEY]
        if self.sample_episodes:
            keys += [TRAJECTORY_KEY, ("next", "done")]  # what numbers the episodes
        return list(dict.fromkeys(keys))

    def replay_frames(self, batch: TensorDictBase) -> TensorDictBase:
        """What of a processed collected batch ``[*envs, time]`` goes into the group's replay buffer: its
        :meth:`training_keys`, one transition per row (HASAC first turns them into n-step transitions)."""
        return batch.select(*self.training_keys(), strict=False).reshape(-1)

    @override
    def group_batch(self, batch: TensorDictBase) -> TensorDictBase:
        sample = batch.get(self.group)
        weight = sample.get("priority_weight", None)
        if weight is not None and weight.dim() == 1:
            # one importance weight per transition, applied to every agent's TD error
            n_agents = len(self.task.group_map[self.group])
            sample.set("priority_weight", weight.unsqueeze(-1).expand(-1, n_agents))
        return sample

    @override
    def loss(self, batch: TensorDictBase) -> TensorDictBase:
        if not self.recurrent:
            return super().loss(batch)
        with sequence_mode():
            if self.burn_in:
                batch = self._burn_in(batch)
            return super().loss(batch)

    def _burn_in(self, batch: TensorDictBase) -> TensorDictBase:
        """Run the policy (without grad) over each slice's first ``burn_in`` steps from the stored state, and
        start the loss's steps from the state it reaches: the stored one was computed by older weights."""
        b = self.burn_in
        with torch.no_grad(), sequence_mode():
            warm = self.policy(batch[:, : b + 1].clone())
        rest = batch[:, b:].clone()
        for key in recurrent_state_specs(self.policy):
            reached = warm.get(("next", *key))
            rest.get(key)[:, 0] = reached[:, b - 1]  # the state entering the first trained step
            rest.get(("next", *key))[:, 0] = reached[:, b]  # and the one after it (read by target networks)
        return rest

    @override
    def after_step(self, batch: TensorDictBase) -> torch.Tensor | None:
        """The sampled transitions' new priorities (with prioritized replay), then the target networks move."""
        priorities = self.priorities(batch) if self.use_prioritized_replay_buffer else None
        self.target_updater.step()
        return priorities

    def priorities(self, sample: TensorDictBase) -> torch.Tensor:
        """The new priority of each transition of the group's sample ``[n]`` after its update: the largest TD
        error among the group's agents."""
        return sample.get((self.group, "td_error")).reshape(sample.batch_size[0], -1).amax(-1)

    # ------------------------------------------------------------------ checkpoints
    @override
    def checkpoint_state(self) -> dict[str, Any]:
        return {"steps": int(getattr(self.target_updater, "counter", 0))}

    @override
    def load_checkpoint_state(self, state: dict[str, Any]) -> None:
        if hasattr(self.target_updater, "counter"):
            self.target_updater.counter = state["steps"]

    def __deepcopy__(self, memo: dict[int, Any]) -> OffPolicyLearner:
        copied = deepcopy_keeping_shared_tensors(self, memo)
        # the updater caches TensorDicts of the objective's networks; dropped, they are rebuilt from the copy's
        # objective (copied, they would be detached clones: the copy's target networks would never move)
        for cached in ("_sources_val", "_targets_val"):
            copied.target_updater.__dict__.pop(cached, None)
        return copied


class AnnealedExploration(OffPolicyLearner):
    """An off-policy learner that explores by a module whose scale anneals linearly over collected frames
    (DDPG's Gaussian noise, Q-learning's epsilon-greedy).

    Args:
        exploration_eps_init: the exploration's scale at the start (noise standard deviation, or epsilon).
        exploration_eps_end: its scale after ``exploration_anneal_frames``.
        exploration_anneal_frames: frames over which it anneals (default: a third of ``max_frames``, as BenchMARL).
    """

    def __init__(
        self,
        task,
        group,
        run,
        exploration_eps_init: float = 0.8,
        exploration_eps_end: float = 0.01,
        exploration_anneal_frames: int | None = None,
        **kwargs: Any,
    ) -> None:
        self.exploration_eps_init = unit_interval("exploration_eps_init", exploration_eps_init)
        self.exploration_eps_end = unit_interval("exploration_eps_end", exploration_eps_end)
        if exploration_anneal_frames is not None:
            positive_int("exploration_anneal_frames", exploration_anneal_frames)
        self.exploration_anneal_frames = exploration_anneal_frames
        super().__init__(task, group, run, **kwargs)

    @property
    def anneal_frames(self) -> int:
        """Frames over which exploration anneals (by default a third of the budget, as BenchMARL)."""
        return self.exploration_anneal_frames or max(1, self.run.max_frames // 3)
