"""The shared LightningModule of every MARL algorithm.

Per group (``task.group_map``) an algorithm builds a policy, a loss and whatever the loss needs, in
``__init__`` from the task's specs; envs and collectors are built lazily in ``train_dataloader`` /
``val_dataloader`` and never become submodules. One Lightning epoch is one collection iteration
(DESIGN.md §2); the Trainer owns backward, clipping, precision and checkpoints.

Per-group hooks a subclass overrides (BenchMARL's decomposition):

- :meth:`_build_policy` / :meth:`_build_loss`: networks and torchrl loss of one group;
- :meth:`process_batch`: what happens to a collected batch before training (e.g. GAE);
- :meth:`loss`: the loss terms of one group on one minibatch; every ``loss`` / ``loss_*`` entry is summed;
- :meth:`param_groups`: the optimizer parameter groups (named ``<group>/<role>``) of one group.
"""

from __future__ import annotations

import inspect
import time
from abc import ABC, abstractmethod
from collections import defaultdict
from typing import Any, ClassVar

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.plugins.io import TorchCheckpointIO
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase, TensorDictSequential
from torch import nn
from torchrl.data import Composite
from torchrl.envs import EnvBase, InitTracker, TensorDictPrimer, Transform
from typing_extensions import override

from lit_marl import __version__
from lit_marl.callbacks import (
    FrameBudget,
    MetricsFileRepair,
    NumericalFaultPolicy,
    PreemptionCheckpoint,
    call_marl_hook,
)
from lit_marl.lightning_adapter import attached_trainer, logged_step
from lit_marl.checkpoint import (
    FORMAT_VERSION,
    AtomicCheckpointIO,
    check_compatible,
    check_state_dict,
    read_checkpoint,
)
from lit_marl.data import EvaluationBatches, OnPolicyData, Sampler
from lit_marl.data.differentiable import DifferentiableSampler
from lit_marl.data.evaluator import Evaluator, episode_returns
from lit_marl.distributed import check_shares, check_strategy, reduce_means, world_size_of
from lit_marl.envs.base import Task
from lit_marl.models import ModelConfig, Mlp
from lit_marl.models.recurrent import recurrent_state_specs
from lit_marl.errors import (
    ConfigError,
    check_types,
    positive_float,
    positive_int,
    unit_interval,
)
from lit_marl.utils import instantiate, rng_state, set_rng_state


def _checked_device(field: str, value: str | None) -> str | None:
    """A device name, refused by name where it does not exist on this machine."""
    if value is None:
        return None
    try:
        device = torch.device(value)
    except (RuntimeError, TypeError):
        raise ConfigError(f"{field}: {value!r} is not a device; allowed: cpu, cuda, cuda:<index>, mps") from None
    if device.type == "cuda" and (not torch.cuda.is_available() or (device.index or 0) >= torch.cuda.device_count()):
        raise ConfigError(f"{field}: {value!r} but this machine has {torch.cuda.device_count()} CUDA device(s); "
                          f"allowed: cpu{', cuda' if torch.cuda.is_available() else ''}")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"{field}: 'mps' is not available on this machine; allowed: cpu")
    return str(device)


class _OnDevice(TensorDictModuleBase):
    """Runs ``policy`` on ``policy_device`` for data that lives on ``env_device``."""

    def __init__(self, policy: TensorDictModuleBase, policy_device: torch.device, env_device: torch.device) -> None:
        super().__init__()
        self.policy, self.policy_device, self.env_device = policy, policy_device, env_device
        self.in_keys, self.out_keys = policy.in_keys, policy.out_keys

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        out = self.policy(tensordict.to(self.policy_device))
        return tensordict.update(out.select(*self.out_keys, strict=False).to(self.env_device))


class MarlAlgorithm(pl.LightningModule, ABC):
    """Base of every lit-marl algorithm.

    Args:
        task: the benchmark task (e.g. ``VmasTask("balance")``).
        actor_model: network of each group's policy (default ``Mlp()``: 256-256, Tanh).
        critic_model: network of each group's critic, where the algorithm has one (default ``Mlp()``).
        share_policy_params: one policy network shared by all agents of a group.
        frames_per_batch: environment steps collected per iteration (all envs together).
        num_envs: parallel (vectorised) training environments.
        max_frames: frame budget; training stops after the iteration that reaches it.
        lr: Adam learning rate (every parameter group).
        adam_eps: Adam epsilon.
        gamma: discount factor.
        evaluation_episodes: episodes per evaluation (validation loop).
        evaluation_batch_size: episodes rolled out in parallel per evaluation batch (default: all).
        evaluation_deterministic: evaluate the policy's mode instead of sampling actions.
        evaluation_seed: seed of the first evaluation batch (default ``seed + 10_000``); the same
            episodes are evaluated every time.
        test_episodes: episodes rolled out by ``lit-marl test``.
        test_videos: of those, how many ``lit-marl test`` renders to mp4 (the first ones; needs a task that renders).
        sampling_device: where the environments step, when not where the networks train (e.g. ``cuda`` for VMAS
            on the GPU, or ``cpu`` for a CPU simulator beside a GPU learner); default: the module's device. The
            training device is the Trainer's (``trainer.accelerator``/``devices``); replay buffers: ``buffer_device``.
        seed: base seed of the training envs (linked to ``seed_everything`` on the command line).
        collect_with_grad: collect with rollouts that keep the autograd graph through a differentiable simulator
            (VMAS), as BenchMARL's ``collect_with_grad``: ``on_batch_collected`` hooks get the batch with the graph
            from the policies' parameters through actions and physics to observations and rewards; training reads a
            detached copy (see :mod:`lit_marl.data.differentiable`).
    """

    #: name written into checkpoints (a checkpoint only loads into the same algorithm); empty on bases
    algorithm_name: ClassVar[str] = ""
    #: trains on the frames just collected (True) or on a replay buffer (False)
    on_policy: ClassVar[bool] = False
    #: whether the algorithm trains recurrent networks (on sequences)
    supports_recurrent: ClassVar[bool] = False
    supports_continuous_actions: ClassVar[bool] = True
    supports_discrete_actions: ClassVar[bool] = True
    #: what a NaN/Inf loss term or gradient does: ``"stop"`` training with a :class:`NumericalError` naming the
    #: group, term and iteration, or ``"skip"`` that update (see :class:`~lit_marl.callbacks.NumericalFaultPolicy`).
    #: Set per run with ``lit-marl fit --nan_policy skip`` or on the instance.
    nan_policy: str = "stop"

    def __init__(
        self,
        task: Task,
        actor_model: ModelConfig | None = None,
        critic_model: ModelConfig | None = None,
        share_policy_params: bool = True,
        frames_per_batch: int = 6000,
        num_envs: int = 10,
        max_frames: int = 3_000_000,
        lr: float = 5e-5,
        adam_eps: float = 1e-6,
        gamma: float = 0.99,
        evaluation_episodes: int = 10,
        evaluation_batch_size: int | None = None,
        evaluation_deterministic: bool = True,
        evaluation_seed: int | None = None,
        test_episodes: int = 100,
        test_videos: int = 0,
        sampling_device: str | None = None,
        seed: int = 0,
        collect_with_grad: bool = False,
    ) -> None:
        super().__init__()
        if not self.algorithm_name:
            concrete = ", ".join(c.__name__ for c in type(self).__subclasses__()) or "one of its subclasses"
            raise TypeError(f"{type(self).__name__} is a base class without an algorithm_name; use {concrete}")
        # Validate everything cheap before any environment (even the probe) is built.
        check_types(MarlAlgorithm.__init__, {k: v for k, v in locals().items() if k != "self"})
        self.task = instantiate(task, Task, "task")
        self.actor_model = instantiate(actor_model if actor_model is not None else Mlp(), ModelConfig, "actor_model")
        self.critic_model = instantiate(critic_model if critic_model is not None else Mlp(), ModelConfig, "critic_model")
        for field in ("actor_model", "critic_model"):
            if getattr(self, field).is_recurrent and not self.supports_recurrent:
                from lit_marl.algorithms.registry import algorithm_names

                fitting = ", ".join(algorithm_names(supports_recurrent=True))
                raise ConfigError(
                    f"{field}: {type(getattr(self, field)).__name__} is recurrent, and {type(self).__name__} cannot "
                    f"train recurrent networks yet; allowed: a feed-forward model (Mlp, Cnn, DeepSets, Gnn), or an "
                    f"algorithm that trains on sequences: {fitting}"
                )
        self.frames_per_batch = positive_int("frames_per_batch", frames_per_batch)
        self.num_envs = positive_int("num_envs", num_envs)
        if frames_per_batch % num_envs:
            raise ConfigError(
                f"frames_per_batch: {frames_per_batch} is not a multiple of num_envs={num_envs}; "
                f"allowed: multiples such as {max(1, frames_per_batch // num_envs) * num_envs}"
            )
        self.max_frames = positive_int("max_frames", max_frames)
        self.lr = positive_float("lr", lr)
        self.adam_eps = positive_float("adam_eps", adam_eps)
        self.gamma = unit_interval("gamma", gamma)
        self.evaluation_episodes = positive_int("evaluation_episodes", evaluation_episodes)
        self.evaluation_batch_size = positive_int(
            "evaluation_batch_size", evaluation_batch_size if evaluation_batch_size is not None else evaluation_episodes
        )
        self.evaluation_deterministic = bool(evaluation_deterministic)
        self.evaluation_seed = int(evaluation_seed) if evaluation_seed is not None else int(seed) + 10_000
        self.test_episodes = positive_int("test_episodes", test_episodes)
        if not isinstance(test_videos, int) or isinstance(test_videos, bool) or not 0 <= test_videos <= test_episodes:
            raise ConfigError(f"test_videos: must be an integer in 0..test_episodes={test_episodes}, got {test_videos!r}")
        self.test_videos = test_videos
        self.share_policy_params = bool(share_policy_params)
        self.sampling_device = _checked_device("sampling_device", sampling_device)
        self.seed = int(seed)
        self.collect_with_grad = bool(collect_with_grad)
        if self.collect_with_grad and not self.task.differentiable:
            raise ConfigError(f"collect_with_grad: true needs a differentiable simulator, and the task {self.task.name} "
                              f"({type(self.task).__name__}) is not one; allowed: false, or a VmasTask")
        self._check_action_space()
        self._validate_args()

        self.save_hyperparameters(ignore=["task", "actor_model", "critic_model"])
        init_args = inspect.signature(type(self).__init__).parameters
        configs = {name: getattr(self, name).to_config() for name in ("task", "actor_model", "critic_model")
                   if name in init_args}
        self.hparams.update(configs)
        self._hparams_initial.update(configs)

        # Counters (saved in checkpoint["lit_marl"]).
        self.frames = 0
        self.iteration = 0

        specs = self.task.specs
        self.groups: list[str] = list(specs.group_map)
        self._build_networks()

        # Runtime state: plain attributes (not submodules), rebuilt lazily.
        self._sampler: Sampler | None = None
        self._evaluator: Evaluator | None = None
        self._restored: dict[str, Any] | None = None
        self._epoch_metrics: dict[str, list[torch.Tensor]] = defaultdict(list)
        self._eval_rollouts: list[TensorDictBase] = []
        self._timer: dict[str, float] = {}
        #: whether the current optimizer step was skipped for a NaN/Inf (``nan_policy="skip"``)
        self.update_skipped = False
        #: the last iteration's training row as logged: ``{"step", "epoch", "metrics"}`` (checkpoints carry it)
        self.iteration_row: dict[str, Any] | None = None
        #: the signal that stopped the last ``fit`` (after saving ``signal_checkpoint``), or None
        self.stopped_by_signal: int | None = None
        self.signal_checkpoint: str | None = None
        self._faults = NumericalFaultPolicy()

    @staticmethod
    def base_init_args(values: dict[str, Any]) -> dict[str, Any]:
        """The arguments of :class:`MarlAlgorithm` found in ``values`` (a subclass's ``locals()``), so a
        subclass with an explicit signature can forward them without listing them twice."""
        if isinstance(values.get("self"), MarlAlgorithm):  # the subclass's own arguments against its annotations
            check_types(type(values["self"]).__init__, values)
        names = inspect.signature(MarlAlgorithm.__init__).parameters
        return {name: values[name] for name in names if name != "self" and name in values}

    # ------------------------------------------------------------------ checks
    def _check_action_space(self) -> None:
        from lit_marl.algorithms.registry import algorithm_names  # the registry imports every algorithm

        continuous = self.task.continuous_actions
        if (self.supports_continuous_actions if continuous else self.supports_discrete_actions):
            return
        kind, other = ("continuous", "discrete") if continuous else ("discrete", "continuous")
        flag = "supports_continuous_actions" if continuous else "supports_discrete_actions"
        fitting = ", ".join(algorithm_names(**{flag: True})) or "none yet"
        raise ConfigError(
            f"task.continuous_actions: {type(self).__name__} needs {other} actions, but the task {self.task.name} "
            f"has {kind} actions; allowed: continuous_actions={str(not continuous).lower()}, or an algorithm for "
            f"{kind} actions: {fitting}"
        )

    def _validate_args(self) -> None:
        """Subclasses validate their own arguments here (called before any env is built)."""

    # ------------------------------------------------------------------ per-group hooks
    def _build_networks(self) -> None:
        """``policies``, ``critics`` and ``losses`` of every group from the per-group hooks below (an
        :class:`~lit_marl.algorithms.Ensemble` takes them from its per-group algorithms instead)."""
        self.policies = nn.ModuleDict({g: self._build_policy(g) for g in self.groups})
        critics = {g: self._build_critic(g) for g in self.groups}
        self.critics = nn.ModuleDict({g: c for g, c in critics.items() if c is not None})
        self.losses = nn.ModuleDict({g: self._build_loss(g) for g in self.groups})

    @abstractmethod
    def _build_policy(self, group: str) -> TensorDictModuleBase:
        """The policy of ``group``: reads ``(group, "observation")``, writes ``(group, "action")``."""

    def _build_critic(self, group: str) -> TensorDictModuleBase | None:
        """The critic of ``group`` (None where the algorithm has none); built before the loss."""
        return None

    @abstractmethod
    def _build_loss(self, group: str) -> nn.Module:
        """The torchrl loss module of ``group``, with its keys set to the group's nested keys."""

    @abstractmethod
    def param_groups(self, group: str) -> dict[str, list[nn.Parameter]]:
        """Parameters of ``group`` by role (``actor``, ``critic``…); each becomes a named optimizer group."""

    def process_batch(self, batch: TensorDictBase) -> TensorDictBase:
        """Called (without grad) on every collected batch before training; returns the batch.

        The base version gives every group its own ``("next", group, "done"|"terminated")`` of shape
        ``[*B, n_agents, 1]``, expanded from the root where the task reports them once (VMAS): torchrl's
        value estimators need them beside the group's reward.
        """
        nxt = batch.get("next")
        for group in self.groups:
            reward_shape = nxt.get((group, "reward")).shape
            for key in ("done", "terminated"):
                if (group, key) not in nxt.keys(include_nested=True):
                    nxt.set((group, key), nxt.get(key).unsqueeze(-2).expand(reward_shape))
        return batch

    def loss(self, group: str, batch: TensorDictBase) -> TensorDictBase:
        """Loss terms of ``group`` on a minibatch: every ``loss`` or ``loss_*`` entry is summed into the objective,
        every other scalar is logged. Override to add terms::

            def loss(self, group, batch):
                terms = super().loss(group, batch)
                terms["loss_l2"] = 1e-4 * sum(p.square().sum() for p in self.policies[group].parameters())
                return terms
        """
        return self.losses[group](batch)

    def group_batch(self, batch: TensorDictBase, group: str) -> TensorDictBase:
        """The part of a training minibatch that ``group``'s loss reads (on-policy: all of it)."""
        return batch

    def training_keys(self) -> list:
        """Keys of a processed batch that training reads (the rest is dropped before minibatching)."""
        keys: list = []
        for group in self.groups:
            keys.extend(self.losses[group].in_keys)
        return list(dict.fromkeys(keys))

    # ------------------------------------------------------------------ policies
    @property
    def policy(self) -> TensorDictModuleBase:
        """All groups' policies as one module (reads observations, writes every group's action)."""
        if len(self.groups) == 1:  # no wrapper: it costs a few percent of collection time
            return self.policies[self.groups[0]]
        return TensorDictSequential(*[self.policies[g] for g in self.groups])

    def policy_for_collection(self) -> TensorDictModuleBase:
        """The policy stepped in the training envs (off-policy algorithms add exploration here)."""
        return self.policy

    # ------------------------------------------------------------------ Lightning: setup and data
    @override
    def setup(self, stage: str) -> None:
        if self.trainer is None:
            return
        # Checkpoints written atomically unless the user chose their own CheckpointIO.
        strategy = self.trainer.strategy
        check_strategy(self.trainer)
        check_shares(self, self.world_size, stage)
        if type(strategy.checkpoint_io) is TorchCheckpointIO:
            strategy.checkpoint_io = AtomicCheckpointIO()
        ckpt_path = self.trainer.ckpt_path
        if ckpt_path and str(ckpt_path) not in ("last", "best", "hpc", "registry"):
            meta = read_checkpoint(ckpt_path)["lit_marl"]
            check_compatible(meta, self.algorithm_name, self.task.to_config(), f"ckpt_path {str(ckpt_path)!r}")

    @override
    def configure_callbacks(self) -> list[pl.Callback]:
        """The callbacks every run of an algorithm needs, so a plain ``Trainer`` gets them too: the frame budget,
        the NaN/Inf policy, ``metrics.csv`` repair and pre-emption signals. Also refreshes Lightning's default
        progress bar every 20 steps instead of every step: hundreds of minibatch steps per iteration make a per-step
        refresh cost ~1% of training time."""
        callbacks: list[pl.Callback] = [FrameBudget(), self._faults, MetricsFileRepair(), PreemptionCheckpoint()]
        bar = self.trainer.progress_bar_callback if attached_trainer(self) is not None else None
        if type(bar) is TQDMProgressBar and bar.refresh_rate == 1:
            callbacks.append(TQDMProgressBar(refresh_rate=20))
        return callbacks

    @override
    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        # Minibatches are cut from a batch already on the module's device: skip Lightning's copy.
        if isinstance(batch, TensorDictBase) and batch.device == device:
            return batch
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    @property
    def rank(self) -> int:
        return self.trainer.global_rank if attached_trainer(self) is not None else 0

    @property
    def world_size(self) -> int:
        """Processes sharing the global sizes (``num_envs``, ``frames_per_batch``, minibatches, episodes)."""
        return world_size_of(attached_trainer(self))

    def _get_sampler(self) -> Sampler:
        if self._sampler is None:
            sampler = DifferentiableSampler if self.collect_with_grad else Sampler
            self._sampler = sampler(
                self.task,
                self.policy_for_collection(),
                num_envs=self.num_envs // self.world_size,  # this process's share
                frames_per_batch=self.frames_per_batch // self.world_size,
                seed=self.seed,
                rank=self.rank,
                device=self.device,
                env_device=self.env_device,
                transforms=self.env_transforms(),
            )
        return self._sampler

    @override
    def val_dataloader(self) -> EvaluationBatches:
        return EvaluationBatches(self.evaluation_episodes, self.evaluation_batch_size, self.evaluation_seed,
                                 self.rank, self.world_size)

    @override
    def test_dataloader(self) -> EvaluationBatches:
        return EvaluationBatches(self.test_episodes, min(self.test_episodes, self.evaluation_batch_size),
                                 self.evaluation_seed, self.rank, self.world_size)

    # ------------------------------------------------------------------ collection
    def collect_batch(self) -> TensorDictBase:
        """Collect one iteration's frames, update counters and collection metrics, call hooks."""
        if self._restored is not None and "rng" in self._restored:
            set_rng_state(self._restored.pop("rng"))
        start = time.perf_counter()
        self._timer = {"iteration_start": start}
        batch = self._get_sampler().collect(self.iteration)
        self.frames += batch.numel() * self.world_size  # every process collects the same share
        self.record("timers/collection_time", time.perf_counter() - start)
        self._record_collection_metrics(batch)
        call_marl_hook(attached_trainer(self), self, "on_batch_collected", batch)
        return batch.detach() if self.collect_with_grad else batch  # the graph was for the hooks only

    def mark_training_start(self) -> None:
        self._timer["training_start"] = time.perf_counter()

    def on_batch_collected(self, batch: TensorDictBase) -> None:
        """Hook: called with every collected batch (override in a subclass)."""

    def on_evaluation_end(self, episodes: list[TensorDictBase]) -> None:
        """Hook: called with every evaluation's rollouts (override in a subclass)."""

    def _record_collection_metrics(self, batch: TensorDictBase) -> None:
        """Mean return of the episodes that ended in this batch, per group and over groups."""
        nxt = batch.get("next")
        returns = []
        for group in self.groups:
            done = nxt.get((group, "done"), None)
            if done is None:  # VMAS reports done once for all agents, at the root
                done = nxt.get("done")
            finished = done.reshape(*batch.batch_size, -1).any(-1)  # [*B]
            self.record(f"collection/{group}/reward/reward_mean", nxt.get((group, "reward")).mean())
            if finished.any():
                episode_reward = nxt.get((group, "episode_reward")).reshape(*batch.batch_size, -1).mean(-1)
                returns.append(episode_reward[finished].mean())
                self.record(f"collection/{group}/reward/episode_reward_mean", returns[-1])
        if returns:
            self.record("collection/reward/episode_reward_mean", torch.stack(returns).mean())

    # ------------------------------------------------------------------ training
    @override
    def training_step(self, batch: TensorDictBase, batch_idx: int) -> torch.Tensor | None:
        total, scalars, objective = None, {}, []
        for group in self.groups:
            terms = self.loss(group, self.group_batch(batch, group))
            for name, value in terms.items():
                if not isinstance(value, torch.Tensor) or value.numel() != 1:
                    continue
                scalars[f"train/{group}/{name}"] = value
                if name == "loss" or name.startswith("loss_"):
                    objective.append((group, name, value))
                    total = value if total is None else total + value
        if total is None:
            raise RuntimeError(f"{type(self).__name__}.loss returned no 'loss' or 'loss_*' term for any group")
        if not torch.isfinite(total.detach()):  # one check (one device sync) per optimizer step
            group, name, value = next(t for t in objective if not torch.isfinite(t[2].detach()))
            if self._numerical_fault(f"loss term {group}/{name} is {value.item()}", batch_idx):
                return None  # Lightning skips backward and the optimizer step
        for name, value in scalars.items():
            self.record(name, value)
        return total

    def _numerical_fault(self, what: str, batch_idx: int) -> bool:
        """A NaN/Inf in this optimizer step: True to skip it, else NumericalError (:class:`NumericalFaultPolicy`)."""
        return self._faults.fault(self, what, batch_idx)

    @override
    def configure_optimizers(self) -> torch.optim.Optimizer:
        groups = []
        for group in self.groups:
            for role, params in self.param_groups(group).items():
                params = [p for p in params if p.requires_grad]
                if params:
                    groups.append({"params": params, "name": f"{group}/{role}"})
        return torch.optim.Adam(groups, lr=self.lr, eps=self.adam_eps)

    @override
    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        """Clip each parameter group (= each loss's parameters) on its own, as BenchMARL does, and log
        the pre-clipping norm of each."""
        for param_group in optimizer.param_groups:
            params = [p for p in param_group["params"] if p.grad is not None]
            if not params:
                continue
            norm = torch.nn.utils.get_total_norm([p.grad for p in params])  # once: checked, clipped with, logged
            if not torch.isfinite(norm):
                if self._numerical_fault(f"gradient of {param_group['name']} is {norm.item()} (norm)",
                                         self.trainer.fit_loop.epoch_loop.batch_idx):
                    for group in optimizer.param_groups:  # Adam leaves parameters without a gradient alone
                        for p in group["params"]:
                            p.grad = None
                    return
            if gradient_clip_val is not None and gradient_clip_algorithm == "value":
                torch.nn.utils.clip_grad_value_(params, gradient_clip_val)
            elif gradient_clip_val is not None:
                torch.nn.utils.clip_grads_with_norm_(params, float(gradient_clip_val), norm)
            self.record(f"train/{param_group['name']}/grad_norm", norm)

    def record(self, name: str, value: torch.Tensor | float) -> None:
        """Accumulate a scalar; averaged and logged once per iteration (cheaper than self.log per step)."""
        if isinstance(value, torch.Tensor):
            value = value.detach()
        self._epoch_metrics[name].append(torch.as_tensor(value, dtype=torch.float32))

    @override
    def on_train_epoch_end(self) -> None:
        now = time.perf_counter()
        if "training_start" in self._timer:
            self.record("timers/training_time", now - self._timer["training_start"])
        if "iteration_start" in self._timer:
            self.record("timers/iteration_time", now - self._timer["iteration_start"])
        self.iteration += 1
        metrics = reduce_means(self._epoch_metrics)  # pooled over every DDP process
        self._epoch_metrics.clear()
        metrics["counters/frames"] = torch.tensor(float(self.frames))
        metrics["counters/iteration"] = torch.tensor(float(self.iteration))
        # as Lightning will log it (after the checkpoint callbacks): the step is the last optimizer step's index
        self.iteration_row = {"step": max(logged_step(self.trainer) - 1, 0), "epoch": int(self.trainer.current_epoch),
                              "metrics": {name: float(value) for name, value in metrics.items()}}
        shown = {"counters/frames", "collection/reward/episode_reward_mean"}
        for name, value in metrics.items():
            self.log(name, value, on_step=False, on_epoch=True, prog_bar=name in shown, sync_dist=False)

    # ------------------------------------------------------------------ evaluation
    @property
    def env_device(self) -> torch.device:
        """Where the environments step: ``sampling_device``, else the module's (training) device."""
        return torch.device(self.sampling_device) if self.sampling_device is not None else self.device

    @property
    def evaluation_policy(self) -> TensorDictModuleBase:
        """:attr:`policy` for envs on :attr:`env_device` (moving each step's data to the module's device and back)."""
        if self.env_device == self.device:
            return self.policy
        return _OnDevice(self.policy, self.device, self.env_device)

    def env_transforms(self) -> list[Transform]:
        """Transforms every env of this algorithm needs on top of the task's: with recurrent networks, the episode
        start flag ``is_init`` and zero hidden states from the first step."""
        specs: dict = {}
        for module in (*self.policies.values(), *self.critics.values()):
            specs.update(recurrent_state_specs(module))
        if not specs:
            return []
        return [InitTracker(), TensorDictPrimer(Composite({key: spec.to(self.env_device) for key, spec in specs.items()}),
                                                expand_specs=True)]

    def make_env(self, num_envs: int, seed: int | None = None) -> EnvBase:
        """The task's batched env with :meth:`env_transforms` (what collection and evaluation step)."""
        env = self.task.make_env(num_envs=num_envs, seed=seed, device=self.env_device)
        for transform in self.env_transforms():
            env.append_transform(transform)
        return env

    @property
    def evaluator(self) -> Evaluator:
        """The evaluation envs and seeded rollouts (validation, ``lit-marl test``, marl-eval JSON, videos)."""
        if self._evaluator is None:
            self._evaluator = Evaluator(self.task, lambda num_envs: self.make_env(num_envs, seed=self.evaluation_seed))
        return self._evaluator

    def evaluate(self, seed: int, num_envs: int) -> TensorDictBase:
        """Roll out ``num_envs`` seeded episodes with :attr:`evaluation_policy`; returns the rollout
        ``[num_envs, max_steps]`` with ``("episode", "mask")`` marking the steps of each env's first episode."""
        return self.evaluator.rollout(self.evaluation_policy, seed, num_envs, self.evaluation_deterministic)

    def episode_returns(self, rollout: TensorDictBase) -> dict[str, torch.Tensor]:
        """Return of each evaluated episode per group ``{group: [num_envs]}`` over ``evaluate``'s real steps."""
        return episode_returns(self.groups, rollout)

    def _evaluation_step(self, batch: dict[str, int], prefix: str) -> None:
        start = time.perf_counter()
        rollout = self.evaluate(int(batch["seed"]), int(batch["num_envs"]))
        mask = rollout.get(("episode", "mask"))
        n = int(batch["num_envs"])
        returns = self.episode_returns(rollout)
        for group, group_return in returns.items():
            self.log(f"{prefix}/{group}/return", group_return.mean(), batch_size=n, sync_dist=True)
        # as BenchMARL's episode_reward_mean: the mean over groups of each group's mean return
        mean_return = torch.stack(list(returns.values())).mean()
        self.log(f"{prefix}/return", mean_return, batch_size=n, sync_dist=True, prog_bar=prefix == "val")
        self.log(f"{prefix}/episode_len", mask.sum(-1).float().mean(), batch_size=n, sync_dist=True)
        self.log(f"timers/{prefix}_evaluation_time", time.perf_counter() - start, batch_size=n, reduce_fx="sum")
        self._eval_rollouts.append(rollout)

    @override
    def validation_step(self, batch: dict[str, int], batch_idx: int) -> None:
        self._evaluation_step(batch, "val")

    @override
    def test_step(self, batch: dict[str, int], batch_idx: int) -> None:
        self._evaluation_step(batch, "test")

    def _end_evaluation(self) -> None:
        rollouts, self._eval_rollouts = self._eval_rollouts, []
        call_marl_hook(attached_trainer(self), self, "on_evaluation_end", rollouts)

    @override
    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking:
            self._eval_rollouts = []
            return
        self.log("counters/frames", float(self.frames), sync_dist=False)
        self._end_evaluation()

    @override
    def on_test_epoch_end(self) -> None:
        self._end_evaluation()

    # ------------------------------------------------------------------ checkpoints
    @override
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint.setdefault("lit_marl", {}).update({
            "format_version": FORMAT_VERSION,
            "lit_marl_version": __version__,
            "algorithm": self.algorithm_name,
            "task": self.task.to_config(),
            "group_map": {g: list(a) for g, a in self.task.group_map.items()},
            "frames": int(self.frames),
            "iteration": int(self.iteration),
            "rng": rng_state(),
        })

    @override
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        meta = checkpoint.get("lit_marl")
        if meta is None:
            raise ConfigError("checkpoint: not a lit-marl checkpoint (no 'lit_marl' entry)")
        check_compatible(meta, self.algorithm_name, self.task.to_config(), "checkpoint", self.task.group_map)
        if "state_dict" in checkpoint:  # before Lightning's load_state_dict, which would fail inside PyTorch
            check_state_dict(checkpoint["state_dict"], self.state_dict(), "checkpoint")
        self.frames = int(meta["frames"])
        self.iteration = int(meta["iteration"])
        # RNG state is applied right before the next collection (after the envs are built).
        self._restored = dict(meta)

    # ------------------------------------------------------------------ teardown
    @override
    def teardown(self, stage: str) -> None:
        if self._sampler is not None:
            self._sampler.close()
            self._sampler = None
        if self._evaluator is not None:
            self._evaluator.close()
            self._evaluator = None


class OnPolicyAlgorithm(MarlAlgorithm):
    """Base of on-policy algorithms: each iteration trains ``n_minibatch_iters`` epochs of shuffled
    minibatches of ``minibatch_size`` frames on the frames just collected, then discards them."""

    on_policy: ClassVar[bool] = True
    #: set by the subclass's ``__init__`` (before ``super().__init__``)
    n_minibatch_iters: int
    minibatch_size: int

    @override
    def _validate_args(self) -> None:
        if self.minibatch_size > self.frames_per_batch:
            raise ConfigError(
                f"minibatch_size: {self.minibatch_size} is larger than frames_per_batch={self.frames_per_batch}; "
                f"allowed: 1..{self.frames_per_batch}"
            )

    @property
    def chunk_length(self) -> int | None:
        """Steps per training chunk where the algorithm trains on trajectory chunks (recurrent networks);
        None: minibatches of shuffled single steps."""
        return None

    @property
    def minibatches_per_iteration(self) -> int:
        if self.chunk_length is None:
            return self.n_minibatch_iters * (self.frames_per_batch // self.minibatch_size)
        chunks = self.frames_per_batch // self.chunk_length
        return self.n_minibatch_iters * (chunks // (self.minibatch_size // self.chunk_length))

    @override
    def train_dataloader(self) -> OnPolicyData:
        return OnPolicyData(self)
