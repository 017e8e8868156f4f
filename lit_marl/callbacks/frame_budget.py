"""The frame budget: training ends with the iteration whose collection reaches ``max_frames``."""

from __future__ import annotations

import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_info
from typing_extensions import override


class FrameBudget(pl.Callback):
    """Stops ``fit`` once the algorithm's ``frames`` counter (every process's collected frames) reaches its
    ``max_frames``: after the iteration that reached it, or at once when a resumed run has already spent it.
    Iterations are whole, so a run may end up to ``frames_per_batch - 1`` frames past the budget, as BenchMARL's."""

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Stop at once when a resumed run has already spent its budget."""
        if pl_module.frames >= pl_module.max_frames:
            rank_zero_info(f"lit-marl: frame budget max_frames={pl_module.max_frames} already reached "
                           f"({pl_module.frames})")
            trainer.should_stop = True

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Stop after the iteration whose collection reached ``max_frames``."""
        if pl_module.frames >= pl_module.max_frames:
            trainer.should_stop = True
