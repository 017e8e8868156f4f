"""The hooks lit-marl adds to Lightning's callbacks: :class:`MarlCallback` and how the algorithm calls them."""

from __future__ import annotations

from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from tensordict import TensorDictBase


class MarlCallback(Callback):
    """A Lightning callback with lit-marl's collection and evaluation hooks (no-ops by default)."""

    def on_batch_collected(self, trainer: Trainer, pl_module: LightningModule, batch: TensorDictBase) -> None:
        """Called with every collected batch."""

    def on_evaluation_end(self, trainer: Trainer, pl_module: LightningModule, episodes: list[TensorDictBase]) -> None:
        """Called with the rollouts of every evaluation."""


def call_marl_hook(trainer: Trainer | None, pl_module: LightningModule, name: str, *args: Any) -> None:
    """Call hook ``name`` with ``args`` on ``pl_module``, then on every callback of ``trainer`` that defines it (with
    ``trainer, pl_module`` first, as Lightning calls its hooks); with no ``trainer``, on the module only."""
    getattr(pl_module, name)(*args)
    if trainer is None:
        return
    for callback in trainer.callbacks:
        hook = getattr(callback, name, None)
        if callable(hook):
            hook(trainer, pl_module, *args)
