"""Collection for a run: the training envs' :class:`~lit_marl.data.Sampler` (built lazily, on this process's share of
the envs), one batch of frames per iteration with the counters and ``collection/…`` metrics it moves, and the
``on_batch_collected`` hooks.

:class:`Collection` is a collaborator the run holds (``run.collection``), not a layer of its class: it reads what the
run sets (``task``, ``groups``, ``learners``, ``seed``, ``num_envs``, ``frames_per_batch``, ``collect_with_grad``,
``rank``, ``world_size``, the counters ``frames`` / ``iteration``) and moves the frame counter and ``record``s.
"""

from __future__ import annotations

import time
from typing import Any

from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase, TensorDictSequential

from lit_marl.callbacks import call_marl_hook
from lit_marl.data import Sampler
from lit_marl.data.collection import collection_metrics
from lit_marl.data.differentiable import DifferentiableSampler
from lit_marl.lightning_adapter import attached_trainer
from lit_marl.utils import set_rng_state


class Collection:
    """One iteration's frames from the training envs: :meth:`collect` (the training loops call it)."""

    def __init__(self, run: Any) -> None:
        #: the run (a :class:`~lit_marl.algorithms.MarlAlgorithm`) that holds this collection
        self.run = run
        self.sampler: Sampler | DifferentiableSampler | None = None
        #: when the current iteration's collection and its training started (``time.perf_counter``)
        self.timer: dict[str, float] = {}

    def policy(self) -> TensorDictModuleBase:
        """What steps the training envs: each learner's collection policy (off-policy learners add exploration)."""
        modules = [learner.collection_policy() for learner in self.run.learners.values()]
        return modules[0] if len(modules) == 1 else TensorDictSequential(*modules)

    def get_sampler(self) -> Sampler | DifferentiableSampler:
        """The training envs and their collector, built on first use."""
        if self.sampler is None:
            run = self.run
            sampler = DifferentiableSampler if run.collect_with_grad else Sampler
            self.sampler = sampler(
                run.task,
                self.policy(),
                num_envs=run.num_envs // run.world_size,  # this process's share
                frames_per_batch=run.frames_per_batch // run.world_size,
                seed=run.seed,
                rank=run.rank,
                device=run.device,
                env_device=run.env_device,
                transforms=run.env_transforms(),
            )
        return self.sampler

    def collect(self) -> TensorDictBase:
        """Collect one iteration's frames, update counters and collection metrics, call hooks."""
        run = self.run
        rng = run.restored("rng")  # a resumed run's RNG state, applied right before its first collection
        if rng is not None:
            set_rng_state(rng)
        start = time.perf_counter()
        self.timer = {"iteration_start": start}
        sampler = self.get_sampler()  # builds the collection policies (learners keep their random-action switches)
        for learner in run.learners.values():
            learner.prepare_collection(run.frames)
        batch = sampler.collect(run.iteration)
        collected = batch.numel() * run.world_size  # every process collects the same share
        for learner in run.learners.values():  # exploration anneals by every process's frames, as max_frames counts
            learner.after_collection(collected)
        run.frames += collected
        run.record("timers/collection_time", time.perf_counter() - start)
        for name, value in collection_metrics(run.groups, batch).items():
            run.record(name, value)
        call_marl_hook(attached_trainer(run), run, "on_batch_collected", batch)
        return batch.detach() if run.collect_with_grad else batch  # the graph was for the hooks only

    def mark_training_start(self) -> None:
        self.timer["training_start"] = time.perf_counter()

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.close()
            self.sampler = None
