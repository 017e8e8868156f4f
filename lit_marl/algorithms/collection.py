"""Collection for a run: how every env of the run is built, the training envs and their torchrl ``Collector``
(:class:`Sampler`, seeded resets at episode boundaries), one batch of frames per iteration with the counters and
``collection/…`` metrics it moves, and the ``on_batch_collected`` hooks.

:class:`Collection` is a collaborator the run holds (``run.collection``), not a layer of its class: it reads what the
run sets (``task``, ``groups``, ``learners``, ``policies``, ``critics``, ``seed``, ``num_envs``, ``frames_per_batch``,
``collect_with_grad``, ``env_device``, ``rank``, ``world_size``, the counters ``frames`` / ``iteration``) and moves the
frame counter and ``record``s. With ``collect_with_grad`` the :class:`~lit_marl.data.differentiable.DifferentiableSampler`
stands in for the :class:`Sampler`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase, TensorDictSequential
from torchrl.collectors import Collector
from torchrl.data import Composite
from torchrl.envs import EnvBase, InitTracker, TensorDictPrimer, Transform

from lit_marl.callbacks import call_marl_hook
from lit_marl.data.differentiable import DifferentiableSampler
from lit_marl.envs.base import Task
from lit_marl.lightning_adapter import attached_trainer
from lit_marl.models.recurrent import recurrent_state_specs
from lit_marl.utils import derived_seed, isolated_rng, set_rng_state


class Sampler:
    """Owns the training envs and their torchrl :class:`~torchrl.collectors.Collector`.

    Built lazily (on the module's device) and never a submodule of the LightningModule.
    Whenever every episode ended on the last step of a batch (and at the very first batch, or
    after a resume), the envs are reset from a seed derived from ``(seed, rank, iteration)``:
    an interrupted run then restarts exactly where an uninterrupted one would continue.
    """

    def __init__(
        self,
        task: Task,
        policy: TensorDictModuleBase,
        num_envs: int,
        frames_per_batch: int,
        seed: int,
        rank: int = 0,
        device: torch.device | str = "cpu",
        transforms: Sequence[Transform] = (),
        env_device: torch.device | str | None = None,
    ) -> None:
        self.task = task
        self.seed = seed
        self.rank = rank
        with task.isolated_rng():
            env_device = device if env_device is None else env_device
            self.env = task.make_env(num_envs=num_envs, seed=seed, device=env_device)
            for transform in transforms:  # e.g. the algorithm's recurrent-state primer
                self.env.append_transform(transform)
            self.collector = Collector(
                self.env,
                policy,
                frames_per_batch=frames_per_batch,
                total_frames=-1,
                env_device=env_device,  # where the envs step
                policy_device=device,  # where the policy runs, and the batch is stored for training
                storing_device=device,
                auto_register_policy_transforms=False,
            )
        self._at_episode_boundary = True

    def collect(self, iteration: int) -> TensorDictBase:
        """One batch shaped ``[num_envs, frames_per_batch // num_envs]``."""
        if self._at_episode_boundary:
            # isolated, so the reset seed does not change the policy's sampling stream; the simulator's
            # own generator deliberately continues from this seed for the rest of the iteration
            with isolated_rng():
                self.env.set_seed(derived_seed(self.seed, self.rank, iteration))
                self.collector.reset()
        batch = self.collector.next()
        last = batch[..., -1]
        # "done" entries only: an episode that ended by truncation (PettingZoo's max_cycles) is not terminated
        self._at_episode_boundary = all(bool(last.get(("next", *_as_tuple(k))).all()) for k in self.env.done_keys
                                        if _as_tuple(k)[-1] == "done")
        return batch

    def close(self) -> None:
        self.collector.shutdown()
        if not self.env.is_closed:
            self.env.close()


def _as_tuple(key) -> tuple:
    return key if isinstance(key, tuple) else (key,)


def collection_metrics(groups: Sequence[str], batch: TensorDictBase) -> dict[str, torch.Tensor]:
    """Per group the mean reward of a collected batch and the mean return of the episodes that ended in it, the mean
    of those returns over groups, and how many episodes ended in the batch (``collection/episodes``: the envs'
    episodes, from the root ``done`` where the env has one, else where any group's ended; under DDP each process
    counts its own batch and the logged value is their mean, as for every metric)."""
    nxt = batch.get("next")
    root = nxt.get("done", None)
    env_ended = None if root is None else root.reshape(*batch.batch_size, -1).any(-1)  # [*B]
    metrics, returns, ended = {}, [], []
    for group in groups:
        done = nxt.get((group, "done"), None)
        # VMAS reports done once for all agents, at the root
        finished = env_ended if done is None else done.reshape(*batch.batch_size, -1).any(-1)  # [*B]
        ended.append(finished)
        metrics[f"collection/{group}/reward/reward_mean"] = nxt.get((group, "reward")).mean()
        if finished.any():
            episode_reward = nxt.get((group, "episode_reward")).reshape(*batch.batch_size, -1).mean(-1)
            returns.append(episode_reward[finished].mean())
            metrics[f"collection/{group}/reward/episode_reward_mean"] = returns[-1]
    if returns:
        metrics["collection/reward/episode_reward_mean"] = torch.stack(returns).mean()
    metrics["collection/episodes"] = (env_ended if env_ended is not None else torch.stack(ended).any(0)).sum()
    return metrics


class Collection:
    """One iteration's frames from the training envs: :meth:`collect` (the training loops call it)."""

    def __init__(self, run: Any) -> None:
        #: the run (a :class:`~lit_marl.algorithms.MarlAlgorithm`) that holds this collection
        self.run = run
        self.sampler: Sampler | DifferentiableSampler | None = None
        #: when the current iteration's collection and its training started (``time.perf_counter``)
        self.timer: dict[str, float] = {}

    def env_transforms(self) -> list[Transform]:
        """Transforms every env of this run needs on top of the task's: with recurrent networks, the episode start
        flag ``is_init`` and zero hidden states from the first step."""
        specs: dict = {}
        for module in (*self.run.policies.values(), *self.run.critics.values()):
            specs.update(recurrent_state_specs(module))
        if not specs:
            return []
        specs = Composite({key: spec.to(self.run.env_device) for key, spec in specs.items()})
        return [InitTracker(), TensorDictPrimer(specs, expand_specs=True)]

    def make_env(self, num_envs: int, seed: int | None = None) -> EnvBase:
        """The task's batched env with :meth:`env_transforms` (what evaluation steps; the Sampler builds the same)."""
        env = self.run.task.make_env(num_envs=num_envs, seed=seed, device=self.run.env_device)
        for transform in self.env_transforms():
            env.append_transform(transform)
        return env

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
                transforms=self.env_transforms(),
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

    def timings(self, now: float) -> dict[str, float]:
        """Seconds since this iteration's collection and its training started (``timers/…``), where they did."""
        return {f"timers/{what}_time": now - self.timer[f"{what}_start"] for what in ("training", "iteration")
                if f"{what}_start" in self.timer}

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.close()
            self.sampler = None
