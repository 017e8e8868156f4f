"""Shared base of off-policy algorithms: replay buffers, exploration, target networks.

Each iteration collects ``frames_per_batch`` frames, adds each group's part to that group's replay
buffer and trains ``n_optimizer_steps`` minibatches sampled from the buffers (one Lightning epoch).
After every optimizer step the target networks move (soft: Polyak averaging with ``polyak_tau``;
hard: a copy every ``hard_target_update_frequency`` steps) and, with prioritized replay, the sampled
transitions get their new priorities. Exploration is annealed by collected frames.
"""

from __future__ import annotations

import inspect
import tempfile
from pathlib import Path
from typing import Any, ClassVar

import torch
from lightning.pytorch.utilities import rank_zero_warn
from tensordict import TensorDictBase
from tensordict.utils import unravel_key
from tensordict.nn import TensorDictModuleBase, TensorDictSequential
from torch import nn
from torchrl.data import TensorDictReplayBuffer
from torchrl.objectives import HardUpdate, SoftUpdate
from typing_extensions import override

from lit_marl.algorithms.base import MarlAlgorithm
from lit_marl.checkpoint import rank_sidecar, save_buffers_per_process
from lit_marl.data.off_policy import OffPolicyData
from lit_marl.data.replay import BUFFER_DEVICES, TRAJECTORY_KEY, ReplayShape, buffer_state, group_buffers
from lit_marl.lightning_adapter import attached_trainer
from lit_marl.errors import CheckpointError, ConfigError, positive_int, unit_interval
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


class OffPolicyAlgorithm(MarlAlgorithm):
    """Base of replay-buffer algorithms (MADDPG, IDDPG, MASAC, ISAC, and the Q-learning family).

    Subclasses call :meth:`_set_off_policy_args` before ``super().__init__`` and
    :meth:`_build_off_policy_parts` after it, and implement :meth:`_build_exploration` where the policy
    explores by more than sampling.
    """

    on_policy: ClassVar[bool] = False
    supports_recurrent: ClassVar[bool] = True

    def _set_off_policy_args(
        self,
        n_optimizer_steps: int,
        train_batch_size: int,
        memory_size: int,
        init_random_frames: int,
        use_prioritized_replay_buffer: bool,
        prb_alpha: float,
        prb_beta: float,
        buffer_device: str,
        soft_target_update: bool,
        polyak_tau: float,
        hard_target_update_frequency: int,
        exploration_eps_init: float,
        exploration_eps_end: float,
        exploration_anneal_frames: int | None,
        sequence_length: int | None = None,
        burn_in: int = 0,
    ) -> None:
        self.n_optimizer_steps = positive_int("n_optimizer_steps", n_optimizer_steps)
        self.train_batch_size = positive_int("train_batch_size", train_batch_size)
        self.memory_size = positive_int("memory_size", memory_size)
        if self.train_batch_size > self.memory_size:
            raise ConfigError(
                f"train_batch_size: {train_batch_size} is larger than memory_size={memory_size}; "
                f"allowed: 1..{memory_size}"
            )
        if not isinstance(init_random_frames, int) or isinstance(init_random_frames, bool) or init_random_frames < 0:
            raise ConfigError(f"init_random_frames: must be an integer >= 0, got {init_random_frames!r}")
        self.init_random_frames = init_random_frames
        self.use_prioritized_replay_buffer = bool(use_prioritized_replay_buffer)
        self.prb_alpha = unit_interval("prb_alpha", prb_alpha)
        self.prb_beta = unit_interval("prb_beta", prb_beta)
        if buffer_device not in BUFFER_DEVICES:
            raise ConfigError(f"buffer_device: {buffer_device!r} is unknown; allowed: {', '.join(BUFFER_DEVICES)}")
        self.buffer_device = buffer_device
        self.soft_target_update = bool(soft_target_update)
        if isinstance(polyak_tau, bool) or not isinstance(polyak_tau, (int, float)) or not 0 < polyak_tau <= 1:
            raise ConfigError(f"polyak_tau: must be in (0, 1], got {polyak_tau!r}")
        self.polyak_tau = float(polyak_tau)
        self.hard_target_update_frequency = positive_int("hard_target_update_frequency", hard_target_update_frequency)
        self.exploration_eps_init = unit_interval("exploration_eps_init", exploration_eps_init)
        self.exploration_eps_end = unit_interval("exploration_eps_end", exploration_eps_end)
        if exploration_anneal_frames is not None:
            positive_int("exploration_anneal_frames", exploration_anneal_frames)
        self.exploration_anneal_frames = exploration_anneal_frames
        if sequence_length is not None:
            positive_int("sequence_length", sequence_length)
        self.sequence_length = sequence_length
        if not isinstance(burn_in, int) or isinstance(burn_in, bool) or burn_in < 0:
            raise ConfigError(f"burn_in: must be an integer >= 0, got {burn_in!r}")
        self.burn_in = burn_in

    def _set_off_policy_args_from(self, values: dict[str, Any], **overrides: Any) -> None:
        """:meth:`_set_off_policy_args` with the arguments found in ``values`` (a subclass's ``locals()``)."""
        names = inspect.signature(OffPolicyAlgorithm._set_off_policy_args).parameters
        self._set_off_policy_args(**{n: overrides.get(n, values.get(n)) for n in names if n != "self"})

    @property
    def recurrent(self) -> bool:
        return self.actor_model.is_recurrent

    @property
    def chunk_length(self) -> int | None:
        """Steps of each sampled slice on which the loss is computed (recurrent policies; else None)."""
        if not self.recurrent:
            return None
        return self.sequence_length or min(self.task.max_steps, self.train_batch_size)

    @override
    def _validate_args(self) -> None:
        if self.critic_model.is_recurrent:
            raise ConfigError(
                f"critic_model: {type(self.critic_model).__name__} is recurrent; off-policy algorithms train "
                f"recurrent policies (actor_model) on sampled sequences, but their critics are feed-forward for now; "
                f"allowed: Mlp, Cnn, DeepSets, Gnn, Sequence of those (or MAPPO/IPPO for a recurrent critic)"
            )
        if self.recurrent:
            if self.use_prioritized_replay_buffer:
                raise ConfigError("use_prioritized_replay_buffer: true is not supported with a recurrent actor_model "
                                  "(sequences are sampled uniformly); allowed: false")
            if self.chunk_length > self.train_batch_size:
                raise ConfigError(f"sequence_length: {self.chunk_length} is longer than train_batch_size="
                                  f"{self.train_batch_size}; allowed: 1..{self.train_batch_size}")
            if self.chunk_length + self.burn_in > self.task.max_steps:
                raise ConfigError(
                    f"burn_in: {self.burn_in} + sequence_length {self.chunk_length} exceeds the episode length "
                    f"max_steps={self.task.max_steps}; no slice could be sampled. Allowed: burn_in + sequence_length "
                    f"<= {self.task.max_steps}"
                )
        if self.collect_with_grad and self.init_random_frames:
            raise ConfigError(f"init_random_frames: {self.init_random_frames} random frames cannot be collected with "
                              f"collect_with_grad (as in BenchMARL); allowed: 0, or collect_with_grad: false")
        if self.init_random_frames % self.frames_per_batch:
            raise ConfigError(
                f"init_random_frames: {self.init_random_frames} is not a multiple of frames_per_batch="
                f"{self.frames_per_batch}; allowed: 0, {self.frames_per_batch}, {2 * self.frames_per_batch}, …"
            )

    @property
    def anneal_frames(self) -> int:
        """Frames over which exploration anneals (default: a third of the budget, as BenchMARL)."""
        return self.exploration_anneal_frames or max(1, self.max_frames // 3)

    # ------------------------------------------------------------------ building
    def _build_exploration(self, group: str) -> TensorDictModuleBase | None:
        """A module appended to ``group``'s policy during collection (e.g. Gaussian noise); None for none."""
        return None

    def _build_off_policy_parts(self) -> None:
        """Exploration modules, target-network updaters and runtime state; call after ``super().__init__``
        (the losses, whose target networks the updaters move, exist only then)."""
        self.explorations = nn.ModuleDict(
            {g: e for g in self.groups if (e := self._build_exploration(g)) is not None}
        )
        self._target_updaters = {
            g: SoftUpdate(self.losses[g], tau=self.polyak_tau) if self.soft_target_update
            else HardUpdate(self.losses[g], value_network_update_interval=self.hard_target_update_frequency)
            for g in self.groups
        }
        # the collection policy, kept out of the module tree (and so out of state_dict)
        self._random_switch: dict[str, RandomUntil] = {}
        self._replay_buffer_map: dict[str, TensorDictReplayBuffer] | None = None

    @override
    def policy_for_collection(self) -> TensorDictModuleBase:
        modules = []
        for group in self.groups:
            modules.append(self.policies[group])
            if group in self.explorations:
                modules.append(self.explorations[group])
        specs = {(g, "action"): self.task.specs.group_action_spec(g).to(self.device) for g in self.groups}
        masks = {(g, "action"): self.task.action_mask_key(g) for g in self.groups}
        self._random_switch["policy"] = RandomUntil(TensorDictSequential(*modules), specs, masks)
        return self._random_switch["policy"]

    @override
    def __deepcopy__(self, memo: dict[int, Any]) -> OffPolicyAlgorithm:
        copied = deepcopy_keeping_shared_tensors(self, memo)
        for updater in copied._target_updaters.values():
            # each updater caches TensorDicts of its loss's networks; dropped, they are rebuilt from the copy's losses
            # (copied, they would be detached clones: the copy's target networks would never move)
            for cached in ("_sources_val", "_targets_val"):
                updater.__dict__.pop(cached, None)
        return copied

    # ------------------------------------------------------------------ buffers
    def group_keys(self, group: str) -> list:
        """Keys of a processed batch that ``group``'s loss reads: what its replay buffer stores (with a recurrent
        policy also its stored hidden states, episode starts and episode numbers, for sequence sampling)."""
        keys = [unravel_key(key) for key in self.losses[group].in_keys]
        state_key = self.task.state_key
        if state_key is not None and state_key in keys:
            # a TD target that conditions on the state reads the next one too (torchrl's SACLoss leaves it
            # out of in_keys)
            keys.append(unravel_key(("next", state_key)))
        if self.recurrent:
            states = list(recurrent_state_specs(self.policies[group]))
            keys += [*states, *(("next", *key) for key in states), "is_init", TRAJECTORY_KEY]
        return list(dict.fromkeys(keys))

    def replay_buffers(self) -> dict[str, TensorDictReplayBuffer]:
        """One replay buffer per group (:func:`~lit_marl.data.replay.replay_buffer`), built on first use, then
        filled from a checkpoint if resuming."""
        if self._replay_buffer_map is None:
            trainer = attached_trainer(self)
            root = (trainer.log_dir or trainer.default_root_dir) if trainer is not None else tempfile.mkdtemp()
            shape = ReplayShape(
                self.memory_size, self.buffer_device, priority=(self.prb_alpha, self.prb_beta)
                if self.use_prioritized_replay_buffer else None,
                slice_length=self.burn_in + self.chunk_length if self.recurrent else None,
            )
            restored = self._restored.pop("replay_buffers", None) if self._restored is not None else None
            self._replay_buffer_map = group_buffers(self.groups, shape, self.device, Path(root) / "replay_buffers",
                                                    restored)
        return self._replay_buffer_map

    @override
    def group_batch(self, batch: TensorDictBase, group: str) -> TensorDictBase:
        sample = batch.get(group)
        weight = sample.get("priority_weight", None)
        if weight is not None and weight.dim() == 1:
            # one importance weight per transition, applied to every agent's TD error
            n_agents = len(self.task.group_map[group])
            sample.set("priority_weight", weight.unsqueeze(-1).expand(-1, n_agents))
        return sample

    @override
    def loss(self, group: str, batch: TensorDictBase) -> TensorDictBase:
        if not self.recurrent:
            return super().loss(group, batch)
        with sequence_mode():
            if self.burn_in:
                batch = self._burn_in(group, batch)
            return super().loss(group, batch)

    def _burn_in(self, group: str, batch: TensorDictBase) -> TensorDictBase:
        """Run the policy (without grad) over each slice's first ``burn_in`` steps from the stored state, and
        start the loss's steps from the state it reaches: the stored one was computed by older weights."""
        b = self.burn_in
        with torch.no_grad(), sequence_mode():
            warm = self.policies[group](batch[:, : b + 1].clone())
        rest = batch[:, b:].clone()
        for key in recurrent_state_specs(self.policies[group]):
            reached = warm.get(("next", *key))
            rest.get(key)[:, 0] = reached[:, b - 1]  # the state entering the first trained step
            rest.get(("next", *key))[:, 0] = reached[:, b]  # and the one after it (read by target networks)
        return rest

    @override
    def train_dataloader(self) -> OffPolicyData:
        return OffPolicyData(self)

    # ------------------------------------------------------------------ per iteration / step
    @override
    def collect_batch(self) -> TensorDictBase:
        self._get_sampler()  # builds the collection policy (and its random-action switch)
        self.prepare_collection(self.frames)
        batch = super().collect_batch()
        self.advance_exploration(batch.numel())
        return batch

    def prepare_collection(self, frames: int) -> None:
        """Before a collection (its policy built): uniformly random actions while ``frames`` (collected so far) is
        below ``init_random_frames``."""
        self._random_switch["policy"].active = frames < self.init_random_frames

    def advance_exploration(self, frames: int) -> None:
        """After a collection of ``frames`` frames: anneal the exploration modules that anneal (noise, epsilon)."""
        for exploration in self.explorations.values():
            if hasattr(exploration, "step"):
                exploration.step(frames)

    @override
    def on_train_batch_end(self, outputs: Any, batch: TensorDictBase, batch_idx: int) -> None:
        if self.update_skipped:  # a non-finite step skipped under nan_policy=skip: its TD errors are not priorities
            return
        for group, updater in self._target_updaters.items():
            if self.use_prioritized_replay_buffer:
                sample = batch.get(group)
                self.replay_buffers()[group].update_priority(sample.get("index"), self.priorities(group, sample))
            updater.step()

    def priorities(self, group: str, sample: TensorDictBase) -> torch.Tensor:
        """The new priority of each transition of ``group``'s sample ``[n]`` after its update: the largest TD
        error among the group's agents."""
        return sample.get((group, "td_error")).reshape(sample.batch_size[0], -1).amax(-1)

    # ------------------------------------------------------------------ checkpoints
    @override
    def setup(self, stage: str) -> None:
        super().setup(stage)
        if attached_trainer(self) is not None and self.world_size > 1:
            save_buffers_per_process(self.trainer.strategy)

    @override
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        meta = checkpoint["lit_marl"]
        if self._replay_buffer_map is not None:
            state = {g: buffer_state(b) for g, b in self._replay_buffer_map.items()}
            if self.world_size > 1:  # written per process by the strategy (see checkpoint.save_buffers_per_process)
                meta["rank_buffers_state"] = state
                meta["rank_buffers"] = {"world_size": self.world_size,
                                        "token": f"f{self.frames}s{self.global_step}"}
            else:
                meta["replay_buffers"] = state
        meta["target_updaters"] = {g: _updater_state(u) for g, u in self._target_updaters.items()}

    @override
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        meta = checkpoint["lit_marl"]
        for group, state in meta.get("target_updaters", {}).items():
            _set_updater_state(self._target_updaters[group], state)
        saved = meta.get("rank_buffers")
        if saved is None or self._restored is None:
            return
        if saved["world_size"] != self.world_size:
            rank_zero_warn(f"lit-marl: the checkpoint's replay buffers belong to {saved['world_size']} processes and "
                           f"this run has {self.world_size}; training continues with empty buffers")
            return
        ckpt_path = Path(str(self.trainer.ckpt_path))
        sidecar = rank_sidecar(ckpt_path, saved["token"], self.rank)
        if not sidecar.is_file():
            raise CheckpointError(f"ckpt_path: the replay buffers of process {self.rank} ({sidecar.name}) are missing "
                                  f"beside {str(ckpt_path)!r}; allowed: the checkpoint with its .rank<r> files")
        self._restored["replay_buffers"] = torch.load(sidecar, map_location="cpu", weights_only=True)


def _updater_state(updater: SoftUpdate | HardUpdate) -> dict[str, int]:
    return {"steps": int(getattr(updater, "counter", 0))}


def _set_updater_state(updater: SoftUpdate | HardUpdate, state: dict[str, int]) -> None:
    if hasattr(updater, "counter"):
        updater.counter = state["steps"]
