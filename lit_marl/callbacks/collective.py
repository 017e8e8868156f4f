"""Melting Pot's ``COLLECTIVE_REWARD`` in the metrics: the team's reward, how Melting Pot scores a substrate.

:class:`~lit_marl.envs.MeltingPotTask` keeps each player's ``COLLECTIVE_REWARD`` observation (the sum of every
player's reward on that step) as ``(group, "info", "COLLECTIVE_REWARD")``; no network reads it. This callback logs

- ``collection/collective_reward/reward_mean``: its mean per env step over each iteration's collected frames;
- ``val/collective_return`` and ``test/collective_return``: its sum over each evaluation episode's real steps,
  averaged over the episodes.

Add it to a run with ``trainer.callbacks`` (every Melting Pot config in ``configs/`` does)::

    trainer:
      callbacks:
        - class_path: lit_marl.callbacks.CollectiveReward
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from tensordict import TensorDictBase
from typing_extensions import override

from lit_marl.callbacks.hooks import MarlCallback
from lit_marl.errors import ConfigError

COLLECTIVE_REWARD = "COLLECTIVE_REWARD"


def collective_reward(task, steps: TensorDictBase) -> torch.Tensor:
    """``[*B]``: the collective reward of each step (every player holds the same value: the first one's is read).
    ``steps`` is the ``"next"`` part of a batch or rollout."""
    for group in task.group_map:
        key = (group, "info", COLLECTIVE_REWARD)
        if key in steps.keys(include_nested=True):
            value = steps.get(key)  # [*B, n_agents, 1]
            return value[..., 0, 0]
    raise ConfigError(f"trainer.callbacks: CollectiveReward needs ('<group>', 'info', {COLLECTIVE_REWARD!r}), which "
                      f"task {task.name} does not report; allowed: Melting Pot tasks (MeltingPotTask)")


class CollectiveReward(MarlCallback):
    """Logs Melting Pot's collective reward per collected step and per evaluation episode (module docstring)."""

    def __init__(self) -> None:
        self._sum = 0.0
        self._count = 0

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Refuse by name, before the first collection, a task whose observations hold no collective reward to read."""
        # the task is checked before the first collection, not after it
        collective_reward(pl_module.task, pl_module.task.specs.observation_spec.zero())

    @override
    def on_batch_collected(self, trainer: pl.Trainer, pl_module, batch: TensorDictBase) -> None:
        reward = collective_reward(pl_module.task, batch.get("next"))
        self._sum += float(reward.sum())
        self._count += reward.numel()

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Log the iteration's mean collective reward per step (``collection/collective_reward/reward_mean``)."""
        if self._count:
            pl_module.log("collection/collective_reward/reward_mean", self._sum / self._count, on_step=False,
                          on_epoch=True, sync_dist=True)
        self._sum, self._count = 0.0, 0

    @override
    def on_evaluation_end(self, trainer: pl.Trainer, pl_module, episodes: list[TensorDictBase]) -> None:
        if not episodes:
            return
        returns = []
        for rollout in episodes:
            mask = rollout.get(("episode", "mask"))  # [E, T]: the steps of each env's first episode
            returns.append((collective_reward(pl_module.task, rollout.get("next")) * mask).sum(-1))
        value = torch.cat(returns).mean()
        prefix = "test" if trainer.testing else "val"
        pl_module.log(f"{prefix}/collective_return", value, sync_dist=True)
