"""Evaluation rollouts, beside training collection (:class:`~lit_marl.algorithms.collection.Sampler`).

An evaluation rollout is ``[num_envs, max_steps]``: batched simulators such as VMAS keep stepping an env after
its episode ended (it auto-resets), so ``("episode", "mask")`` marks the steps of each env's *first* episode, the
step that ended it included. Everything downstream (validation metrics, ``eval_info.json``, marl-eval JSON,
videos) reads real steps only, through that one mask.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torchrl.envs import EnvBase
from torchrl.envs.utils import ExplorationType, set_exploration_type

from lit_marl.envs.base import Task


def first_done(done_keys: Sequence, steps: TensorDictBase) -> torch.Tensor:
    """``[E, T]``: where any of ``done_keys`` is set for every agent (``steps`` is the ``"next"`` part)."""
    done = torch.zeros(steps.batch_size[:2], dtype=torch.bool, device=steps.device)
    for key in done_keys:
        done |= steps.get(key).reshape(*steps.batch_size[:2], -1).all(-1)
    return done


def first_episode_mask(done_keys: Sequence, rollout: TensorDictBase) -> torch.Tensor:
    """``[E, T]``: True on the steps of each env's first episode, the step that ended it included."""
    done = first_done(done_keys, rollout.get("next"))
    return (done.cumsum(-1) - done.long()) == 0


def episode_returns(groups: Sequence[str], rollout: TensorDictBase) -> dict[str, torch.Tensor]:
    """Return of each evaluated episode per group ``{group: [num_envs]}`` (mean over the group's agents of the
    summed reward), over the real steps of an evaluation rollout."""
    mask = rollout.get(("episode", "mask")).unsqueeze(-1)  # [E, T, 1]
    return {g: (rollout.get(("next", g, "reward")).squeeze(-1) * mask).sum(1).mean(-1) for g in groups}


class Evaluator:
    """Owns the evaluation envs (one per batch size, built on first use) and rolls out seeded batches of episodes.

    Each rollout runs inside the task's isolated RNG (``torch.random.fork_rng`` and the simulator's own generator),
    so how often a run evaluates never changes its training randomness, and the same ``seed`` gives the same
    episodes every time and for every checkpoint.

    Args:
        task: the benchmark task (its ``max_steps`` bounds a rollout).
        make_env: ``make_env(num_envs)`` builds a batched env with every transform the policy needs.
    """

    def __init__(self, task: Task, make_env: Callable[[int], EnvBase]) -> None:
        self.task = task
        self.make_env = make_env
        self._envs: dict[int, EnvBase] = {}

    def env(self, num_envs: int) -> EnvBase:
        if num_envs not in self._envs:
            with self.task.isolated_rng():
                self._envs[num_envs] = self.make_env(num_envs)
        return self._envs[num_envs]

    def rollout(self, policy: TensorDictModuleBase, seed: int, num_envs: int, deterministic: bool = True
                ) -> TensorDictBase:
        """``num_envs`` episodes from ``seed`` (the policy's mode, or sampled actions when not ``deterministic``),
        with ``("episode", "mask")``."""
        env = self.env(num_envs)
        with self.task.isolated_rng(seed), torch.no_grad(), set_exploration_type(_mode(deterministic)):
            env.set_seed(seed)
            rollout = env.rollout(self.task.max_steps, policy=policy, auto_reset=True, break_when_any_done=False)
        rollout.set(("episode", "mask"), first_episode_mask(env.done_keys, rollout))
        return rollout

    def render(self, policy: TensorDictModuleBase, seed: int, num_envs: int, env_indices: Sequence[int],
               deterministic: bool = True) -> tuple[dict[int, list], TensorDictBase]:
        """Replay the batch ``(seed, num_envs)`` as :meth:`rollout` does, rendering ``env_indices``.

        Returns ``({env_index: frames}, rollout)``: each env is rendered until its first episode ends, one frame
        per real step; the rollout carries ``("episode", "mask")`` so its returns can be checked against the
        evaluated ones. A fresh env (closed afterwards) keeps renderer state out of the cached evaluation envs."""
        task = self.task
        frames: dict[int, list] = {i: [] for i in env_indices}
        alive = set(env_indices)
        with task.isolated_rng():
            env = self.make_env(num_envs)
        try:
            with task.isolated_rng(seed), torch.no_grad(), set_exploration_type(_mode(deterministic)):
                env.set_seed(seed)
                td = env.reset()
                for i in env_indices:
                    frames[i].append(task.render(env, i))

                def render_next(_env, step: TensorDictBase) -> None:
                    # called after every step but the last, once finished envs were reset
                    done = first_done(env.done_keys, step.get("next").unsqueeze(-1)).squeeze(-1)
                    for i in sorted(alive):
                        if done[i]:
                            alive.discard(i)
                        else:
                            frames[i].append(task.render(env, i))

                rollout = env.rollout(task.max_steps, policy=policy, tensordict=td, auto_reset=False,
                                      break_when_any_done=False, callback=render_next)
        finally:
            env.close()
        rollout.set(("episode", "mask"), first_episode_mask(env.done_keys, rollout))
        return frames, rollout

    def close(self) -> None:
        for env in self._envs.values():
            if not env.is_closed:
                env.close()
        self._envs = {}


def _mode(deterministic: bool) -> ExplorationType:
    return ExplorationType.DETERMINISTIC if deterministic else ExplorationType.RANDOM
