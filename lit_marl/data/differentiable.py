"""Collection that keeps the autograd graph through a differentiable simulator (``collect_with_grad``).

torchrl's :class:`~torchrl.collectors.Collector` steps its policy without grad. With ``collect_with_grad`` the
training envs are built with gradients enabled (VMAS: ``grad_enabled=True``, so actions are not detached) and stepped
with ``env.rollout`` under grad, as BenchMARL does: the collected batch then carries the graph from every group's
policy parameters through the actions and the simulator's physics to the next observations and rewards. The batch
reaches ``on_batch_collected`` (the algorithm's hook and every callback's) with that graph, where research code can
backpropagate through the simulator; the algorithm trains on a detached copy.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torchrl.envs import Transform
from torchrl.envs.utils import ExplorationType, set_exploration_type, step_mdp

from lit_marl.data.replay import TRAJECTORY_KEY
from lit_marl.envs.base import Task
from lit_marl.utils import derived_seed, isolated_rng


class DifferentiableSampler:
    """What :class:`~lit_marl.algorithms.collection.Sampler` does (same arguments, same seeded resets at episode
    boundaries, same ``[num_envs, frames_per_batch // num_envs]`` batches), with rollouts that keep the graph.

    Episodes in flight continue into the next batch from a detached copy of the last step, so each batch's graph
    starts at its own first step and no graph outlives its batch.
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
        self.policy = policy
        self.seed = seed
        self.rank = rank
        self.steps = frames_per_batch // num_envs
        self.device = torch.device(device)
        with task.isolated_rng():
            self.env = task.make_env(num_envs=num_envs, seed=seed, device=device if env_device is None else env_device,
                                     grad_enabled=True)
            for transform in transforms:  # e.g. the algorithm's recurrent-state primer
                self.env.append_transform(transform)
        self._carry: TensorDictBase | None = None
        self._trajectory = torch.arange(num_envs)  # each env's current episode number
        self._next_trajectory = num_envs

    def collect(self, iteration: int) -> TensorDictBase:
        """One batch shaped ``[num_envs, frames_per_batch // num_envs]`` whose entries keep the graph."""
        if self._carry is None:
            with isolated_rng():  # as Sampler: the reset seed does not change the policy's sampling stream
                self.env.set_seed(derived_seed(self.seed, self.rank, iteration))
                self._carry = self.env.reset()
        with torch.enable_grad(), set_exploration_type(ExplorationType.RANDOM):
            batch = self.env.rollout(self.steps, self.policy, auto_reset=False, tensordict=self._carry,
                                     break_when_any_done=False, auto_cast_to_device=True,
                                     storing_device=self.device)
        dones = [batch.get(("next", *_as_tuple(k))) for k in self.env.done_keys if _as_tuple(k)[-1] == "done"]
        batch.set(TRAJECTORY_KEY, self._trajectory_ids(dones, batch.batch_size).to(self.device))
        if all(bool(done[..., -1, :].all()) for done in dones):
            self._carry = None  # every episode ended on this batch's last step: the next batch starts seeded
        else:
            self._carry = step_mdp(batch[..., -1].detach(), reward_keys=self.env.reward_keys,
                                   action_keys=self.env.action_keys, done_keys=self.env.done_keys)
        return batch

    def _trajectory_ids(self, dones: list[torch.Tensor], shape: torch.Size) -> torch.Tensor:
        """``[num_envs, steps]`` episode numbers: an env's number changes after each step that ends its episode."""
        ended = torch.stack([d.reshape(*shape, -1).any(-1) for d in dones]).any(0).cpu()  # [num_envs, steps]
        ids = torch.empty(shape, dtype=torch.int64)
        for t in range(shape[-1]):
            ids[:, t] = self._trajectory
            n = int(ended[:, t].sum())
            self._trajectory[ended[:, t]] = torch.arange(self._next_trajectory, self._next_trajectory + n)
            self._next_trajectory += n
        return ids

    def close(self) -> None:
        if not self.env.is_closed:
            self.env.close()


def _as_tuple(key) -> tuple:
    return key if isinstance(key, tuple) else (key,)
