"""``metrics.csv`` that survives kills: atomic rewrites, and the training row a kill can cost, recovered."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_info
from typing_extensions import override

from lit_marl.lightning_adapter import atomic_csv_rewrites


class MetricsFileRepair(pl.Callback):
    """Keeps every iteration's training row in ``metrics.csv`` across kills and resumes.

    Lightning rewrites ``metrics.csv`` in place when a column appears (made atomic here), and writes an iteration's
    training row to the loggers only after ``ModelCheckpoint`` saved (docs/concepts/design-notes.md, note 21): a run
    killed between the two leaves a checkpoint whose row exists nowhere, and the resumed run starts with the next
    iteration. So every
    checkpoint carries the module's last ``iteration_row`` (``checkpoint["lit_marl"]["iteration_row"]``), and a
    resumed run whose checkpoint's own run folder lacks that row logs it first, at its original step.
    """

    def __init__(self) -> None:
        self._restored_row: dict[str, Any] | None = None

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Make every CSV logger's rewrites of ``metrics.csv`` atomic (a new file renamed over the old)."""
        for logger in trainer.loggers:
            atomic_csv_rewrites(logger)

    @override
    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
                           ) -> None:
        """Store the module's last training row in the checkpoint (``checkpoint["lit_marl"]["iteration_row"]``)."""
        if pl_module.iteration_row is not None:
            checkpoint.setdefault("lit_marl", {})["iteration_row"] = pl_module.iteration_row

    @override
    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
                           ) -> None:
        """Keep the checkpoint's training row for :meth:`on_train_start`."""
        self._restored_row = checkpoint.get("lit_marl", {}).get("iteration_row")

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Log the checkpoint's training row at its original step where the checkpoint's own run folder's
        ``metrics.csv`` lacks it (the previous run was killed between the checkpoint and the row)."""
        row, self._restored_row = self._restored_row, None
        ckpt_path = trainer.ckpt_path
        if not row or not ckpt_path or not trainer.loggers:
            return
        source = Path(str(ckpt_path)).resolve().parent.parent / "metrics.csv"
        if Path(str(ckpt_path)).resolve().parent.name != "checkpoints" or not source.is_file():
            return
        with open(source, newline="") as f:
            iteration = str(float(row["metrics"].get("counters/iteration", -1)))
            if any(r.get("counters/iteration") == iteration for r in csv.DictReader(f)):
                return
        rank_zero_info(f"lit-marl: {source} lacks iteration {pl_module.iteration}'s training row (killed while "
                       f"writing it); logging it from the checkpoint")
        for logger in trainer.loggers:
            logger.log_metrics({**row["metrics"], "epoch": row["epoch"]}, step=row["step"])
            logger.save()
