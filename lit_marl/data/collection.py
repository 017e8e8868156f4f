"""Stepping environments with the current policy: one batch of frames per iteration."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torchrl.collectors import Collector
from torchrl.envs import Transform

from lit_marl.envs.base import Task

from lit_marl.utils import derived_seed, isolated_rng


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
    """Per group the mean reward of a collected batch and the mean return of the episodes that ended in it, and
    the mean of those returns over groups (``collection/…``)."""
    nxt = batch.get("next")
    metrics, returns = {}, []
    for group in groups:
        done = nxt.get((group, "done"), None)
        if done is None:  # VMAS reports done once for all agents, at the root
            done = nxt.get("done")
        finished = done.reshape(*batch.batch_size, -1).any(-1)  # [*B]
        metrics[f"collection/{group}/reward/reward_mean"] = nxt.get((group, "reward")).mean()
        if finished.any():
            episode_reward = nxt.get((group, "episode_reward")).reshape(*batch.batch_size, -1).mean(-1)
            returns.append(episode_reward[finished].mean())
            metrics[f"collection/{group}/reward/episode_reward_mean"] = returns[-1]
    if returns:
        metrics["collection/reward/episode_reward_mean"] = torch.stack(returns).mean()
    return metrics
