"""The run: the LightningModule every MARL algorithm is (:class:`MarlAlgorithm`, whose docstring tells how it is
built; docs/concepts/architecture.md tells why)."""

from __future__ import annotations

import tempfile
import time
import uuid
from abc import ABC
from collections import defaultdict
from pathlib import Path
from typing import Any, ClassVar, Literal

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import TQDMProgressBar
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase, TensorDictSequential
from torch import nn
from torchrl.data import TensorDictReplayBuffer
from typing_extensions import override

from lit_marl.algorithms.arguments import build_learner, compose
from lit_marl.algorithms.collection import Collection
from lit_marl.algorithms.evaluation import Evaluation, evaluation_settings
from lit_marl.algorithms.learner import GroupLearner, RunFacts, adam, clip_per_loss
from lit_marl.algorithms.loops import TrainingLoop, build_loop, loop_sizes
from lit_marl.algorithms.registry import register
from lit_marl.callbacks import FrameBudget, MetricsFileRepair, NumericalFaultPolicy, PreemptionCheckpoint
from lit_marl.callbacks.numerics import NAN_POLICIES
from lit_marl.checkpoint import load_run_state, prepare_checkpoints, save_run_state
from lit_marl.data import EvaluationBatches
from lit_marl.data.replay import group_buffers
from lit_marl.distributed import check_shares, check_strategy, reduce_means, world_size_of
from lit_marl.envs.base import Task
from lit_marl.errors import ConfigError, check_gradient_clipping, device_name, one_of, positive_int, seed_value
from lit_marl.resources import check_resources
from lit_marl.lightning_adapter import attached_trainer, logged_step, save_hyperparameters
from lit_marl.utils import Configurable, deepcopy_keeping_shared_tensors, instantiate


class MarlAlgorithm(pl.LightningModule, ABC):
    """Base of every lit-marl algorithm: the run, holding one learner per agent group.

    The run owns what Lightning drives: one optimizer, clipping per loss, metrics, replay buffers, checkpoints and
    counters. Each group's :class:`~lit_marl.algorithms.GroupLearner` (:attr:`learners`) owns what that group learns,
    and three collaborators the rest: the training loop (:attr:`loop`, Lightning's training data; one epoch is one
    collection iteration), the collection (:attr:`collection`: the training envs) and the evaluation
    (:attr:`evaluation`). A concrete algorithm names its learner (``class MAPPO(MarlAlgorithm): learner_class = PPO``);
    its constructor takes the learner's, the loop's and the run's arguments, each declared once.

    Lightning's hooks: ``setup`` refuses by name what the Trainer cannot run, before anything is built;
    ``train_dataloader`` is :attr:`loop`; ``training_step`` returns the sum of every group's ``loss``/``loss_*`` terms
    (None, no step, for HATRPO's own update or a skipped NaN/Inf); ``on_after_backward`` is the loop's turn;
    ``on_train_epoch_end`` logs the iteration's means and counters; ``val_dataloader``, ``validation_step``,
    ``on_validation_epoch_end``, ``test_dataloader``, ``test_step`` and ``on_test_epoch_end`` hand their work to
    :attr:`evaluation`; ``on_save_checkpoint`` and ``on_load_checkpoint`` carry the counters, replay buffers and
    learners' states; ``transfer_batch_to_device`` leaves minibatches where they are; ``teardown`` closes the envs.

    Args:
        task: the benchmark task (e.g. ``VmasTask("balance")``).
        frames_per_batch: environment steps collected per iteration (all envs together).
        num_envs: parallel (vectorised) training environments.
        max_frames: frame budget; training stops after the iteration that reaches it.
        evaluation_episodes: episodes per evaluation (validation loop).
        evaluation_batch_size: episodes rolled out in parallel per evaluation batch (default: all).
        evaluation_deterministic: evaluate the policy's mode instead of sampling actions.
        evaluation_seed: seed of the first evaluation batch (default ``seed + 10_000``): the same episodes every time.
        test_episodes: episodes rolled out by ``lit-marl test``.
        test_videos: of those, how many ``lit-marl test`` renders to mp4 (the first ones; needs a task that renders).
        sampling_device: where the environments step, when not where the networks train (e.g. ``cuda`` for VMAS
            on the GPU, or ``cpu`` for a CPU simulator beside a GPU learner); default: the module's device. The
            training device is the Trainer's (``trainer.accelerator``/``devices``); replay buffers: ``buffer_device``.
        seed: base seed of the training envs (linked to ``seed_everything`` on the command line).
        compile: run each group's loss, forward and backward, through ``torch.compile`` (on CUDA with CUDA graphs,
            ``mode="reduce-overhead"``). Off by default: on CPUs it does not pay at BenchMARL's sizes (see
            ``docs/results/speed.md``); the first steps pay the compilation (tens of seconds).
        collect_with_grad: collect with rollouts that keep the autograd graph through a differentiable simulator
            (VMAS), as BenchMARL's ``collect_with_grad``: ``on_batch_collected`` hooks get the batch with the graph
            from the policies' parameters through actions and physics to observations and rewards; training reads a
            detached copy (see :mod:`lit_marl.data.differentiable`).
        nan_policy: what a NaN/Inf loss term or gradient does: ``stop`` training with a NumericalError naming the
            group, term and iteration (the last checkpoint is kept), or ``skip`` that update (counted in
            ``train/skipped_updates``); on the command line ``lit-marl fit --nan_policy skip``.
    """

    #: name written into checkpoints (a checkpoint only loads into the same algorithm); empty on bases
    algorithm_name: ClassVar[str] = ""
    #: what each group learns (None on bases, and on an Ensemble, whose groups name their own)
    learner_class: ClassVar[type[GroupLearner] | None] = None
    #: arguments of ``learner_class`` fixed by the algorithm (e.g. MAPPO's centralised critic), not the user's
    learner_settings: ClassVar[dict[str, Any]] = {}
    #: trains on the frames just collected (True) or on a replay buffer (False)
    on_policy: ClassVar[bool] = False
    #: the learner's capabilities (copied from ``learner_class``; the registry suggests algorithms by them)
    supports_recurrent: ClassVar[bool] = False
    supports_continuous_actions: ClassVar[bool] = True
    supports_discrete_actions: ClassVar[bool] = True
    __deepcopy__ = deepcopy_keeping_shared_tensors  # a copy's losses read the tensors its optimizer updates

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        learner = cls.learner_class
        if learner is not None:  # unless the class says otherwise itself
            for flag in ("on_policy", "supports_recurrent", "supports_continuous_actions", "supports_discrete_actions"):
                if flag not in cls.__dict__:
                    setattr(cls, flag, getattr(learner, flag))
        if cls.algorithm_name:  # concrete: one flat constructor of the learner's and the run's arguments
            compose(cls, learner)
            register(cls)

    def __init__(
        self,
        task: Task,
        frames_per_batch: int = 6000,
        num_envs: int = 10,
        max_frames: int = 3_000_000,
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
        nan_policy: Literal["stop", "skip"] = "stop",
        **learner_arguments: Any,
    ) -> None:
        super().__init__()
        if not self.algorithm_name:
            concrete = ", ".join(c.__name__ for c in type(self).__subclasses__()) or "one of its subclasses"
            raise TypeError(f"{type(self).__name__} is a base class without an algorithm_name; use {concrete}")
        self.task = instantiate(task, Task, "task")
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
        for name, value in evaluation_settings(evaluation_episodes, evaluation_batch_size, evaluation_deterministic,
                                               evaluation_seed, test_episodes, test_videos, seed).items():
            setattr(self, name, value)
        self.sampling_device = device_name("sampling_device", sampling_device)
        self.seed = seed_value("seed", seed)  # numpy's range: the training envs are seeded from it
        self.compile_losses = bool(compile)  # not ``self.compile``: that is nn.Module's method
        self.collect_with_grad = bool(collect_with_grad)
        self.nan_policy = one_of("nan_policy", nan_policy, NAN_POLICIES)
        if self.collect_with_grad and not self.task.differentiable:
            raise ConfigError(f"collect_with_grad: true needs a differentiable simulator, and the task {self.task.name} "
                              f"({type(self.task).__name__}) is not one; allowed: false, or a VmasTask")
        #: how the run trains on each iteration's frames (the loop its learners name; Lightning's training data)
        self.loop = self.build_loop(learner_arguments)
        self.loop.validate()
        self._validate_args()
        save_hyperparameters(self, {name: value.to_config() if isinstance(value, Configurable) else value
                                    for name, value in getattr(self, "_arguments", {}).items()})

        # Counters (saved in checkpoint["lit_marl"]).
        self.frames = 0
        self.iteration = 0

        self.check_learners(learner_arguments)  # before any env (even the probe that finds the groups) is built
        self.groups: list[str] = list(self.task.specs.group_map)
        #: what each group learns, by group
        self.learners = nn.ModuleDict(self.build_learners(learner_arguments, self.groups))
        for learner in self.learners.values():
            learner.compile_objective = self.compile_losses

        # Runtime state: plain attributes (not submodules), rebuilt lazily.
        #: the training envs and one batch of frames per iteration (:class:`~lit_marl.algorithms.collection.Collection`)
        self.collection = Collection(self)
        #: the validation and test rollouts (:class:`~lit_marl.algorithms.evaluation.Evaluation`)
        self.evaluation = Evaluation(self)
        self._restored: dict[str, Any] | None = None
        self._epoch_metrics: dict[str, list[torch.Tensor]] = defaultdict(list)
        self._replay_buffer_map: dict[str, TensorDictReplayBuffer] | None = None
        self._replay_buffers_id = uuid.uuid4().hex  # these buffers, told apart from any other run's in one process
        #: the last iteration's training row as logged, ``{"step", "epoch", "metrics"}`` (checkpoints carry it)
        self.iteration_row: dict[str, Any] | None = None
        # the run's own callbacks (configure_callbacks), which keep their state; the properties below read it
        self._faults, self._preemption = NumericalFaultPolicy(), PreemptionCheckpoint()

    update_skipped = property(lambda self: self._faults.update_skipped,
                              doc="Whether the current optimizer step was skipped for a NaN/Inf (nan_policy skip).")
    stopped_by_signal = property(lambda self: self._preemption.stopped_by_signal,
                                 doc="The signal that stopped the last fit (after saving signal_checkpoint), or None.")
    signal_checkpoint = property(lambda self: self._preemption.signal_checkpoint,
                                 doc="The checkpoint saved when a signal stopped the last fit, or None.")

    def _validate_args(self) -> None:
        """Subclasses check their arguments against the run's here (before any learner is built)."""

    def build_loop(self, arguments: dict[str, Any]) -> TrainingLoop:
        """The loop ``learner_class`` names, sized by the loop's arguments (taken out of ``arguments``)."""
        sizes = {name: arguments.pop(name) for name in loop_sizes(self.learner_class.loop) if name in arguments}
        return build_loop(self, self.learner_class, sizes)

    def run_facts(self) -> RunFacts:
        """What each learner may read of this run."""
        return RunFacts(max_frames=self.max_frames, frames_per_batch=self.frames_per_batch, num_envs=self.num_envs,
                        batch_size=self.loop.batch_size, collect_with_grad=self.collect_with_grad)

    def check_learners(self, arguments: dict[str, Any]) -> None:
        """The learner's arguments checked before the groups are known (:func:`~arguments.build_learner`)."""
        build_learner(type(self), self.task, None, self.run_facts(), arguments)

    def build_learners(self, arguments: dict[str, Any], groups: list[str]) -> dict[str, GroupLearner]:
        """One ``learner_class`` per group with the user's ``arguments`` (an Ensemble builds a class per group)."""
        return {g: build_learner(type(self), self.task, g, self.run_facts(), arguments) for g in groups}

    # ------------------------------------------------------------------ the groups' parts, by group
    def _by_group(self, part: str) -> nn.ModuleDict:
        """A view of one part of every group's learner, for the groups whose learner has it."""
        return nn.ModuleDict({g: m for g, learner in self.learners.items() if (m := getattr(learner, part, None))
                              is not None})

    policies = property(lambda self: self._by_group("policy"), doc="Each group's policy (a view of the learners').")
    critics = property(lambda self: self._by_group("critic"), doc="Each group's critic, where it has one (a view).")
    losses = property(lambda self: self._by_group("objective"), doc="Each group's torchrl loss (a view).")
    explorations = property(lambda self: self._by_group("exploration"), doc="Each group's exploration module (a view).")

    def process_batch(self, batch: TensorDictBase) -> TensorDictBase:
        """Every learner's :meth:`~GroupLearner.process_batch`, in group order (each reads and writes its group's)."""
        for learner in self.learners.values():
            batch = learner.process_batch(batch)
        return batch

    def loss(self, group: str, batch: TensorDictBase) -> TensorDictBase:
        """``group``'s loss terms on its part of a minibatch (its learner's :meth:`~GroupLearner.loss`)."""
        return self.learners[group].loss(batch)

    def group_batch(self, batch: TensorDictBase, group: str) -> TensorDictBase:
        """The part of a training minibatch that ``group``'s loss reads."""
        return self.learners[group].group_batch(batch)

    def training_keys(self) -> list:
        """Keys of a processed batch that training reads (the rest is dropped before minibatching)."""
        return list(dict.fromkeys(key for learner in self.learners.values() for key in learner.training_keys()))

    @property
    def chunk_length(self) -> int | None:
        """Steps per training slice where the learners train on sequences (the same in every group); else None."""
        return next(iter(self.learners.values())).chunk_length

    # ------------------------------------------------------------------ policies
    @property
    def policy(self) -> TensorDictModuleBase:
        """All groups' policies as one module (reads observations, writes every group's action)."""
        if len(self.groups) == 1:  # no wrapper: it costs a few percent of collection time
            return self.learners[self.groups[0]].policy
        return TensorDictSequential(*[self.learners[g].policy for g in self.groups])

    # ------------------------------------------------------------------ processes and devices
    rank = property(lambda self: self.trainer.global_rank if attached_trainer(self) is not None else 0,
                    doc="This process's index among the run's processes (0 outside a Trainer).")
    world_size = property(lambda self: world_size_of(attached_trainer(self)), doc="Processes sharing the global sizes "
                          "(``num_envs``, ``frames_per_batch``, minibatches, episodes).")

    @property
    def env_device(self) -> torch.device:
        """Where the environments step (``sampling_device``, else the module's training device)."""
        return torch.device(self.sampling_device) if self.sampling_device is not None else self.device

    # ------------------------------------------------------------------ Lightning: evaluation (``self.evaluation``)
    def evaluate(self, seed: int, num_envs: int) -> TensorDictBase:
        """Roll out ``num_envs`` episodes seeded from ``seed`` with the evaluation settings; returns the rollout
        ``[num_envs, max_steps]`` with ``("episode", "mask")`` marking each env's first episode."""
        return self.evaluation.rollout(seed, num_envs)

    def on_evaluation_end(self, episodes: list[TensorDictBase]) -> None:
        """Hook: called with every evaluation's rollouts (override in a subclass)."""

    @override
    def val_dataloader(self) -> EvaluationBatches:
        return self.evaluation.batches("val")

    @override
    def test_dataloader(self) -> EvaluationBatches:
        return self.evaluation.batches("test")

    @override
    def validation_step(self, batch: dict[str, int], batch_idx: int) -> None:
        self.evaluation.step(batch, "val")

    @override
    def test_step(self, batch: dict[str, int], batch_idx: int) -> None:
        self.evaluation.step(batch, "test")

    @override
    def on_validation_epoch_end(self) -> None:
        self.evaluation.end("val")

    @override
    def on_test_epoch_end(self) -> None:
        self.evaluation.end("test")

    # ------------------------------------------------------------------ replay buffers
    def replay_buffers(self) -> dict[str, TensorDictReplayBuffer]:
        """One replay buffer per group of an off-policy learner (:func:`~lit_marl.data.replay.replay_buffer`), built on
        first use, then filled from a checkpoint if resuming."""
        if self._replay_buffer_map is None:
            trainer = attached_trainer(self)
            root = (trainer.log_dir or trainer.default_root_dir) if trainer is not None else tempfile.mkdtemp()
            restored = self.restored("replay_buffers")
            shapes = {g: learner.replay_shape() for g, learner in self.learners.items() if not learner.on_policy}
            self._replay_buffer_map = group_buffers(shapes, self.device, Path(root) / "replay_buffers", restored)
        return self._replay_buffer_map

    # ------------------------------------------------------------------ Lightning: setup and data
    @override
    def setup(self, stage: str) -> None:
        if self.trainer is None:
            return
        check_strategy(self.trainer)
        check_gradient_clipping(self.trainer.gradient_clip_val, self.trainer.gradient_clip_algorithm)
        check_shares(self, self.world_size, stage)
        check_resources(self, self.trainer, stage)  # fit: its memory and disk; validate, test: the rollouts' memory
        prepare_checkpoints(self.trainer, self)

    @override
    def configure_callbacks(self) -> list[pl.Callback]:
        """The callbacks every run of an algorithm needs, so a plain ``Trainer`` gets them too: the frame budget,
        the NaN/Inf policy, ``metrics.csv`` repair and pre-emption signals. Also refreshes Lightning's default
        progress bar every 20 steps instead of every step: hundreds of minibatch steps per iteration make a per-step
        refresh cost ~1% of training time."""
        callbacks: list[pl.Callback] = [FrameBudget(), self._faults, MetricsFileRepair(), self._preemption]
        bar = self.trainer.progress_bar_callback if attached_trainer(self) is not None else None
        if type(bar) is TQDMProgressBar and bar.refresh_rate == 1:
            callbacks.append(TQDMProgressBar(refresh_rate=20))
        return callbacks

    @override
    def train_dataloader(self) -> TrainingLoop:
        return self.loop

    @override
    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        # Minibatches are cut from a batch already on the module's device: skip Lightning's copy.
        if isinstance(batch, TensorDictBase) and batch.device == device:
            return batch
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    # ------------------------------------------------------------------ training
    @override
    def training_step(self, batch: TensorDictBase, batch_idx: int) -> torch.Tensor | None:
        for group, learner in self.learners.items():  # a learner that moves itself on this minibatch (HATRPO's actor)
            if (done := learner.own_update(batch)) is not None:
                for name, value in done.items():
                    self.record(f"train/{group}/{name}", value)
                return None  # no gradient step
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
        if self._faults.loss_fault(self, objective, total, batch_idx):
            return None  # Lightning skips backward and the optimizer step
        for name, value in scalars.items():
            self.record(name, value)
        return total

    @override
    def configure_optimizers(self) -> torch.optim.Optimizer:
        """One Adam over every group's parameter groups, each with its learner's settings (:func:`~learner.adam`)."""
        return adam(self.learners)

    @override
    def on_after_backward(self) -> None:
        self.loop.after_backward()

    def on_batch_collected(self, batch: TensorDictBase) -> None:
        """Hook: called with every collected batch (override in a subclass)."""

    def restored(self, key: str) -> Any:
        """What the checkpoint this run resumes from restored for ``key`` (``rng``, ``replay_buffers``), once."""
        return self._restored.pop(key, None) if self._restored is not None else None

    @override
    def on_train_batch_end(self, outputs: Any, batch: TensorDictBase, batch_idx: int) -> None:
        """After each optimizer step taken: each learner's per-step work (target networks), and the new priorities of
        the transitions it sampled."""
        if self.update_skipped or not self.loop.closes_update(batch):  # a skipped step's TD errors are no priorities
            return
        for group, learner in self.learners.items():
            priorities = learner.after_step(batch.get(group) if not learner.on_policy else batch)
            if priorities is not None:
                self.replay_buffers()[group].update_priority(batch.get(group).get("index"), priorities)

    @override
    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        """Clip the parameters of each loss on their own (each learner's ``clip_group``: each role, or QMIX's Q-network
        and mixer together), as BenchMARL does, and log the pre-clipping norm of each."""
        def skip(what: str) -> bool:
            return self._faults.fault(self, what, self.trainer.fit_loop.epoch_loop.batch_idx)  # NaN policy

        for name, norm in clip_per_loss(optimizer, gradient_clip_val, gradient_clip_algorithm, skip).items():
            self.record(f"train/{name}/grad_norm", norm)

    def record(self, name: str, value: torch.Tensor | float) -> None:
        """Accumulate a scalar; averaged and logged once per iteration (cheaper than self.log per step)."""
        if isinstance(value, torch.Tensor):
            value = value.detach()
        self._epoch_metrics[name].append(torch.as_tensor(value, dtype=torch.float32))

    @override
    def on_train_epoch_end(self) -> None:
        for name, seconds in self.collection.timings(time.perf_counter()).items():
            self.record(name, seconds)
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

    @override
    def teardown(self, stage: str) -> None:
        self.collection.close()
        self.evaluation.close()
        super().teardown(stage)

    # ------------------------------------------------------------------ checkpoints
    @override
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        save_run_state(checkpoint, self, self._replay_buffer_map, self._replay_buffers_id)

    @override
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # the counters and learners' states now; the RNG state and buffers (``restored``) when collection starts
        self._restored = load_run_state(checkpoint, self)
