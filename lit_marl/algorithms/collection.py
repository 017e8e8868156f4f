"""Collection of a MARL LightningModule: the training envs' :class:`~lit_marl.data.Sampler` (built lazily, on this
process's share of the envs), one batch of frames per iteration with the counters and ``collection/…`` metrics it
moves, and the ``on_batch_collected`` hooks.

:class:`CollectionLoop` is the layer of :class:`~lit_marl.algorithms.MarlAlgorithm` between its evaluation loops and
its training step. It reads what :class:`MarlAlgorithm` sets: ``task``, ``groups``, ``learners``, ``seed``,
``num_envs``, ``frames_per_batch``, ``collect_with_grad``, the counters ``frames`` / ``iteration`` and ``record``.
"""

from __future__ import annotations

import time
from typing import Any

from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase, TensorDictSequential
from typing_extensions import override

from lit_marl.algorithms.evaluation import EvaluationLoops
from lit_marl.callbacks import call_marl_hook
from lit_marl.data import Sampler
from lit_marl.data.collection import collection_metrics
from lit_marl.data.differentiable import DifferentiableSampler
from lit_marl.distributed import world_size_of
from lit_marl.lightning_adapter import attached_trainer
from lit_marl.utils import set_rng_state


class CollectionLoop(EvaluationLoops):
    """One iteration's frames from the training envs: :meth:`collect_batch` (the training iterables call it)."""

    _sampler: Sampler | DifferentiableSampler | None
    _restored: dict[str, Any] | None
    _timer: dict[str, float]

    def policy_for_collection(self) -> TensorDictModuleBase:
        """What steps the training envs: each learner's collection policy (off-policy learners add exploration)."""
        modules = [learner.collection_policy() for learner in self.learners.values()]
        return modules[0] if len(modules) == 1 else TensorDictSequential(*modules)

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

    def collect_batch(self) -> TensorDictBase:
        """Collect one iteration's frames, update counters and collection metrics, call hooks."""
        if self._restored is not None and "rng" in self._restored:
            set_rng_state(self._restored.pop("rng"))
        start = time.perf_counter()
        self._timer = {"iteration_start": start}
        sampler = self._get_sampler()  # builds the collection policies (learners keep their random-action switches)
        for learner in self.learners.values():
            learner.prepare_collection(self.frames)
        batch = sampler.collect(self.iteration)
        collected = batch.numel() * self.world_size  # every process collects the same share
        for learner in self.learners.values():  # exploration anneals by every process's frames, as max_frames counts
            learner.after_collection(collected)
        self.frames += collected
        self.record("timers/collection_time", time.perf_counter() - start)
        for name, value in collection_metrics(self.groups, batch).items():
            self.record(name, value)
        call_marl_hook(attached_trainer(self), self, "on_batch_collected", batch)
        return batch.detach() if self.collect_with_grad else batch  # the graph was for the hooks only

    def mark_training_start(self) -> None:
        self._timer["training_start"] = time.perf_counter()

    def on_batch_collected(self, batch: TensorDictBase) -> None:
        """Hook: called with every collected batch (override in a subclass)."""

    @override
    def teardown(self, stage: str) -> None:
        if self._sampler is not None:
            self._sampler.close()
            self._sampler = None
        super().teardown(stage)
