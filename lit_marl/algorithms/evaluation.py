"""Evaluation for a run: seeded validation and test rollouts, and what is logged of them.

:class:`Evaluation` is a collaborator the run holds (``run.evaluation``), as it holds its collection and its loop, not a
layer of its class: the run's Lightning hooks (``val_dataloader``, ``validation_step``, ``on_validation_epoch_end`` and
their test twins) hand their work to it. It hands rollouts to the :class:`~lit_marl.data.evaluator.Evaluator` (which
owns the evaluation envs, seeds and the first-episode mask) and logs ``val/…`` / ``test/…`` returns through the run. It
reads what the run sets: ``task``, ``groups``, ``policy``, ``collection.make_env``, ``env_device``, ``rank``, ``world_size``,
``frames`` and the ``evaluation_*`` / ``test_*`` arguments (checked by :func:`evaluation_settings`).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from typing_extensions import override

from lit_marl.callbacks import call_marl_hook
from lit_marl.data import EvaluationBatches
from lit_marl.data.evaluator import Evaluator, episode_returns
from lit_marl.errors import MAX_SEED, ConfigError, positive_int, seed_value
from lit_marl.lightning_adapter import attached_trainer

#: the two evaluations a run makes: validation during ``fit``, and ``lit-marl test``
PREFIXES = ("val", "test")


def evaluation_settings(evaluation_episodes: int, evaluation_batch_size: int | None, evaluation_deterministic: bool,
                        evaluation_seed: int | None, test_episodes: int, test_videos: int, seed: int) -> dict[str, Any]:
    """The run's evaluation arguments, checked (each refused by name), as the run's attributes of the same names.
    Seeds are numpy's (0..2**32-1); the evaluation's seeds are ``evaluation_seed`` (default ``seed + 10_000``) and the
    numbers after it, one per batch of episodes."""
    test_episodes = positive_int("test_episodes", test_episodes)  # before test_videos, whose range it sets
    if not isinstance(test_videos, int) or isinstance(test_videos, bool) or not 0 <= test_videos <= test_episodes:
        raise ConfigError(f"test_videos: must be an integer in 0..test_episodes={test_episodes}, got {test_videos!r}")
    evaluation_episodes = positive_int("evaluation_episodes", evaluation_episodes)
    batches = max(evaluation_episodes, test_episodes)  # at most one seed per episode
    if evaluation_seed is None:
        evaluation_seed = seed_value("seed", seed) + 10_000
        if evaluation_seed + batches - 1 > MAX_SEED:
            raise ConfigError(f"evaluation_seed: unset, so seed + 10000 = {evaluation_seed}, and its batches' seeds up "
                              f"to {evaluation_seed + batches - 1} pass numpy's {MAX_SEED}; allowed: an "
                              f"evaluation_seed in 0..{MAX_SEED - batches + 1}, or a smaller seed")
    elif seed_value("evaluation_seed", evaluation_seed) + batches - 1 > MAX_SEED:
        raise ConfigError(f"evaluation_seed: {evaluation_seed} and its batches' seeds up to "
                          f"{evaluation_seed + batches - 1} pass numpy's {MAX_SEED}; allowed: "
                          f"0..{MAX_SEED - batches + 1}")
    return {
        "evaluation_episodes": evaluation_episodes,
        "evaluation_batch_size": positive_int("evaluation_batch_size", evaluation_batch_size
                                              if evaluation_batch_size is not None else evaluation_episodes),
        "evaluation_deterministic": bool(evaluation_deterministic),
        "evaluation_seed": int(evaluation_seed),
        "test_episodes": test_episodes,
        "test_videos": test_videos,
    }


class _OnDevice(TensorDictModuleBase):
    """Runs ``policy`` on ``policy_device`` for data that lives on ``env_device``."""

    def __init__(self, policy: TensorDictModuleBase, policy_device: torch.device, env_device: torch.device) -> None:
        super().__init__()
        self.policy, self.policy_device, self.env_device = policy, policy_device, env_device
        self.in_keys, self.out_keys = policy.in_keys, policy.out_keys

    @override
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        out = self.policy(tensordict.to(self.policy_device))
        return tensordict.update(out.select(*self.out_keys, strict=False).to(self.env_device))


class Evaluation:
    """Validation (``val/…``, every ``check_val_every_n_epoch`` iterations) and ``lit-marl test`` (``test/…``):
    ``evaluation_episodes`` / ``test_episodes`` seeded episodes in batches of ``evaluation_batch_size``, the same
    episodes every time (seeds from ``evaluation_seed``), split over DDP processes."""

    def __init__(self, run: Any) -> None:
        #: the run (a :class:`~lit_marl.algorithms.MarlAlgorithm`) that holds this evaluation
        self.run = run
        self._evaluator: Evaluator | None = None
        #: the rollouts of the evaluation in progress, one per batch (callbacks read the newest)
        self.rollouts: list[TensorDictBase] = []

    @property
    def evaluator(self) -> Evaluator:
        """The evaluation envs and seeded rollouts (validation, ``lit-marl test``, marl-eval JSON, videos)."""
        if self._evaluator is None:
            run = self.run
            self._evaluator = Evaluator(run.task, lambda num_envs: run.collection.make_env(num_envs, seed=run.evaluation_seed))
        return self._evaluator

    @property
    def policy(self) -> TensorDictModuleBase:
        """The run's policy for envs on its ``env_device`` (moving each step's data to the module's device and back)."""
        run = self.run
        return run.policy if run.env_device == run.device else _OnDevice(run.policy, run.device, run.env_device)

    def rollout(self, seed: int, num_envs: int) -> TensorDictBase:
        """Roll out ``num_envs`` seeded episodes with :attr:`policy`; returns the rollout ``[num_envs, max_steps]``
        with ``("episode", "mask")`` marking the steps of each env's first episode."""
        return self.evaluator.rollout(self.policy, seed, num_envs, self.run.evaluation_deterministic)

    def batches(self, prefix: str) -> EvaluationBatches:
        """This process's batches of episodes: ``evaluation_episodes`` for ``val``, ``test_episodes`` for ``test``."""
        run = self.run
        episodes = run.evaluation_episodes if prefix == "val" else run.test_episodes
        return EvaluationBatches(episodes, min(episodes, run.evaluation_batch_size), run.evaluation_seed, run.rank,
                                 run.world_size)

    def step(self, batch: dict[str, int], prefix: str) -> None:
        """Roll out one batch of episodes and log its returns (per group and their mean) and episode lengths."""
        run, start, n = self.run, time.perf_counter(), int(batch["num_envs"])
        rollout = self.rollout(int(batch["seed"]), n)
        returns = episode_returns(run.groups, rollout)
        for group, group_return in returns.items():
            run.log(f"{prefix}/{group}/return", group_return.mean(), batch_size=n, sync_dist=True)
        # as BenchMARL's episode_reward_mean: the mean over groups of each group's mean return
        mean_return = torch.stack(list(returns.values())).mean()
        run.log(f"{prefix}/return", mean_return, batch_size=n, sync_dist=True, prog_bar=prefix == "val")
        run.log(f"{prefix}/episode_len", rollout.get(("episode", "mask")).sum(-1).float().mean(), batch_size=n,
                sync_dist=True)
        run.log(f"timers/{prefix}_evaluation_time", time.perf_counter() - start, batch_size=n, reduce_fx="sum")
        self.rollouts.append(rollout)

    def end(self, prefix: str) -> None:
        """After the last batch: the frame counter beside the validation metrics, and the rollouts to every
        ``on_evaluation_end`` hook (none after Lightning's sanity check)."""
        run = self.run
        rollouts, self.rollouts = self.rollouts, []
        if prefix == "val":
            if run.trainer.sanity_checking:
                return
            run.log("counters/frames", float(run.frames), sync_dist=False)
        call_marl_hook(attached_trainer(run), run, "on_evaluation_end", rollouts)

    def close(self) -> None:
        if self._evaluator is not None:
            self._evaluator.close()
            self._evaluator = None
