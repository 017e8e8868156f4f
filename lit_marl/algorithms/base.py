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
from typing_extensions import override

from lit_marl.algorithms.collection import CollectionLoop
from lit_marl.algorithms.registry import check_fits
from lit_marl.callbacks import FrameBudget, MetricsFileRepair, NumericalFaultPolicy, PreemptionCheckpoint
from lit_marl.checkpoint import AtomicCheckpointIO, check_compatible, checked_meta, read_checkpoint, run_meta
from lit_marl.data import Sampler
from lit_marl.data.evaluator import Evaluator
from lit_marl.distributed import check_shares, check_strategy, reduce_means
from lit_marl.envs.base import Task
from lit_marl.errors import (
    ConfigError,
    check_gradient_clipping,
    check_types,
    device_name,
    positive_float,
    positive_int,
    unit_interval,
)
from lit_marl.lightning_adapter import attached_trainer, logged_step
from lit_marl.models import ModelConfig, Mlp
from lit_marl.utils import deepcopy_keeping_shared_tensors, instantiate


class MarlAlgorithm(CollectionLoop, ABC):
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
        compile: run each group's loss, forward and backward, through ``torch.compile`` (on CUDA with CUDA graphs,
            ``mode="reduce-overhead"``). Off by default: on CPUs it does not pay at BenchMARL's sizes (see
            ``benchmarks/README.md``); the first steps pay the compilation (tens of seconds).
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
    __deepcopy__ = deepcopy_keeping_shared_tensors  # a copy's losses read the tensors its optimizer updates

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
        compile: bool = False,
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
        self.frames_per_batch = positive_int("frames_per_batch", frames_per_batch)
        self.num_envs = positive_int("num_envs", num_envs)
        if frames_per_batch % num_envs:
            raise ConfigError(
                f"frames_per_batch: {frames_per_batch} is not a multiple of num_envs={num_envs}; "
                f"allowed: multiples such as {max(1, frames_per_batch // num_envs) * num_envs}"
            )
        self.max_frames = positive_int("max_frames", max_frames)
        if max_frames < frames_per_batch:  # one iteration collects frames_per_batch: the budget would be overrun
            raise ConfigError(f"max_frames: {max_frames} is smaller than frames_per_batch={frames_per_batch} (one "
                              f"iteration collects frames_per_batch frames); allowed: max_frames >= frames_per_batch")
        self.lr = positive_float("lr", lr)
        self.adam_eps = positive_float("adam_eps", adam_eps)
        self.gamma = unit_interval("gamma", gamma)
        self._set_evaluation_args(evaluation_episodes, evaluation_batch_size, evaluation_deterministic,
                                  evaluation_seed, test_episodes, test_videos, seed)
        self.share_policy_params = bool(share_policy_params)
        self.sampling_device = device_name("sampling_device", sampling_device)
        self.seed = int(seed)
        self.compile_losses = bool(compile)  # not ``self.compile``: that is nn.Module's method
        self.collect_with_grad = bool(collect_with_grad)
        if self.collect_with_grad and not self.task.differentiable:
            raise ConfigError(f"collect_with_grad: true needs a differentiable simulator, and the task {self.task.name} "
                              f"({type(self.task).__name__}) is not one; allowed: false, or a VmasTask")
        self._check_fits()
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
        self._compiled_losses: dict[str, Any] = {}

    @staticmethod
    def base_init_args(values: dict[str, Any]) -> dict[str, Any]:
        """The arguments of :class:`MarlAlgorithm` found in ``values`` (a subclass's ``locals()``), so a
        subclass with an explicit signature can forward them without listing them twice."""
        if isinstance(values.get("self"), MarlAlgorithm):  # the subclass's own arguments against its annotations
            check_types(type(values["self"]).__init__, values)
        names = inspect.signature(MarlAlgorithm.__init__).parameters
        return {name: values[name] for name in names if name != "self" and name in values}

    # ------------------------------------------------------------------ checks
    def _check_fits(self) -> None:
        """Refuse a task or models this algorithm cannot train (:func:`~lit_marl.algorithms.registry.check_fits`)."""
        check_fits(type(self), self.task, self.actor_model, self.critic_model)

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

    def clip_group(self, group: str, role: str) -> str:
        """The name of the parameters ``role``'s gradients are clipped together with (by their joint norm, logged as
        ``train/<name>/grad_norm``): by default each role alone, as BenchMARL clips each loss's parameters."""
        return f"{group}/{role}"

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
        return self.loss_module(group)(batch)

    def loss_module(self, group: str) -> nn.Module:
        """``group``'s loss as training calls it: the torchrl loss, or its ``torch.compile``d form (``compile``)."""
        if not self.compile_losses:
            return self.losses[group]
        if group not in self._compiled_losses:  # kept out of the module tree: the same parameters, no new state
            compiled = torch.compile(self.losses[group], mode="reduce-overhead" if self.device.type == "cuda" else None,
                                     dynamic=False)
            self._compiled_losses[group] = _CudaGraphOutputs(compiled) if self.device.type == "cuda" else compiled
        return self._compiled_losses[group]

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

    # ------------------------------------------------------------------ Lightning: setup and data
    @override
    def setup(self, stage: str) -> None:
        if self.trainer is None:
            return
        # Checkpoints written atomically unless the user chose their own CheckpointIO.
        strategy = self.trainer.strategy
        check_strategy(self.trainer)
        check_gradient_clipping(self.trainer.gradient_clip_val, self.trainer.gradient_clip_algorithm)
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
                    groups.append({"params": params, "name": f"{group}/{role}", "clip": self.clip_group(group, role)})
        # the fused kernel updates every tensor of a group in one call (~0.6 ms less per step than the per-tensor
        # loop for MLPs 256-256 on a CPU core; the same update to within one float rounding)
        fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for g in groups for p in g["params"])
        return torch.optim.Adam(groups, lr=self.lr, eps=self.adam_eps, fused=fused or None)

    @override
    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        """Clip the parameters of each loss on their own (:meth:`clip_group`: each role, or QMIX's Q-network and
        mixer together), as BenchMARL does, and log the pre-clipping norm of each."""
        clip_groups: dict[str, list[torch.Tensor]] = {}
        for param_group in optimizer.param_groups:
            name = param_group.get("clip", param_group.get("name"))
            clip_groups.setdefault(name, []).extend(p for p in param_group["params"] if p.grad is not None)
        for name, params in clip_groups.items():
            if not params:
                continue
            norm = torch.nn.utils.get_total_norm([p.grad for p in params])  # once: checked, clipped with, logged
            if not torch.isfinite(norm):
                if self._numerical_fault(f"gradient of {name} is {norm.item()} (norm)",
                                         self.trainer.fit_loop.epoch_loop.batch_idx):
                    for group in optimizer.param_groups:  # Adam leaves parameters without a gradient alone
                        for p in group["params"]:
                            p.grad = None
                    return
            # None or 0: no clipping, as in Lightning (negative values are refused in setup)
            if gradient_clip_val and gradient_clip_algorithm == "value":
                torch.nn.utils.clip_grad_value_(params, gradient_clip_val)
            elif gradient_clip_val:
                torch.nn.utils.clip_grads_with_norm_(params, float(gradient_clip_val), norm)
            self.record(f"train/{name}/grad_norm", norm)

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

    # ------------------------------------------------------------------ checkpoints
    @override
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint.setdefault("lit_marl", {}).update(run_meta(self.algorithm_name, self.task, self.frames,
                                                              self.iteration))

    @override
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        meta = checked_meta(checkpoint, self.algorithm_name, self.task, self.state_dict())
        self.frames = int(meta["frames"])
        self.iteration = int(meta["iteration"])
        # RNG state is applied right before the next collection (after the envs are built).
        self._restored = dict(meta)


class _CudaGraphOutputs:
    """A loss compiled with CUDA graphs (``reduce-overhead``) whose outputs outlive the next call: CUDA graphs reuse
    their output memory at every replay, so loss terms kept for the iteration's metrics (or a second group's loss in
    the same step) would read overwritten memory. Each call starts a new graph step and clones the terms (scalars:
    the clone is free, and differentiable)."""

    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled

    def __call__(self, batch: TensorDictBase) -> TensorDictBase:
        torch.compiler.cudagraph_mark_step_begin()
        return self.compiled(batch).clone()
