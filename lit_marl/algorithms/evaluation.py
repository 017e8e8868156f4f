"""The validation and test loops of a MARL LightningModule: seeded evaluation rollouts and what is logged of them.

:class:`EvaluationLoops` is the part of :class:`~lit_marl.algorithms.MarlAlgorithm` that evaluates: it builds the
envs every rollout steps (the task's plus :meth:`EvaluationLoops.env_transforms`), hands rollouts to the
:class:`~lit_marl.data.evaluator.Evaluator` (which owns the evaluation envs, seeds and the first-episode mask) and logs
``val/…`` / ``test/…`` returns. It reads what :class:`MarlAlgorithm` sets: ``task``, ``groups``, ``policy``,
``policies``, ``critics``, ``sampling_device`` and the ``evaluation_*`` / ``test_*`` arguments; it says which process
this is (``rank``) of how many (``world_size``).
"""

from __future__ import annotations

import time

import lightning.pytorch as pl
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torchrl.data import Composite
from torchrl.envs import EnvBase, InitTracker, TensorDictPrimer, Transform
from typing_extensions import override

from lit_marl.callbacks import call_marl_hook
from lit_marl.data import EvaluationBatches
from lit_marl.data.evaluator import Evaluator, episode_returns
from lit_marl.distributed import world_size_of
from lit_marl.errors import ConfigError, positive_int
from lit_marl.lightning_adapter import attached_trainer
from lit_marl.models.recurrent import recurrent_state_specs


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


class EvaluationLoops(pl.LightningModule):
    """Validation (``val/…``, every ``check_val_every_n_epoch`` iterations) and ``lit-marl test`` (``test/…``):
    ``evaluation_episodes`` / ``test_episodes`` seeded episodes in batches of ``evaluation_batch_size``, the same
    episodes every time (seeds from ``evaluation_seed``), split over DDP processes."""

    _evaluator: Evaluator | None
    _eval_rollouts: list[TensorDictBase]

    def _set_evaluation_args(self, evaluation_episodes: int, evaluation_batch_size: int | None,
                             evaluation_deterministic: bool, evaluation_seed: int | None, test_episodes: int,
                             test_videos: int, seed: int) -> None:
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

    def on_evaluation_end(self, episodes: list[TensorDictBase]) -> None:
        """Hook: called with every evaluation's rollouts (override in a subclass)."""

    @property
    def rank(self) -> int:
        return self.trainer.global_rank if attached_trainer(self) is not None else 0

    @property
    def world_size(self) -> int:
        """Processes sharing the global sizes (``num_envs``, ``frames_per_batch``, minibatches, episodes)."""
        return world_size_of(attached_trainer(self))

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

    @override
    def val_dataloader(self) -> EvaluationBatches:
        return EvaluationBatches(self.evaluation_episodes, self.evaluation_batch_size, self.evaluation_seed,
                                 self.rank, self.world_size)

    @override
    def test_dataloader(self) -> EvaluationBatches:
        return EvaluationBatches(self.test_episodes, min(self.test_episodes, self.evaluation_batch_size),
                                 self.evaluation_seed, self.rank, self.world_size)

    @override
    def teardown(self, stage: str) -> None:
        if self._evaluator is not None:
            self._evaluator.close()
            self._evaluator = None
        super().teardown(stage)
