"""The one place where lit-marl reaches into Lightning's private attributes (checked on lightning 2.6).

Each function names what it needs and why the public API does not give it, so a Lightning upgrade that moves
one of these breaks here, visibly, and nowhere else.
"""

from __future__ import annotations

import copy
import csv
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.fabric.loggers.csv_logs import _ExperimentWriter
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger

from lit_marl.atomic import atomic_target


def attached_trainer(module: pl.LightningModule) -> pl.Trainer | None:
    """The module's Trainer, or None outside one (``module.trainer`` raises when there is none)."""
    return module._trainer


def save_hyperparameters(module: pl.LightningModule, hparams: dict[str, Any]) -> None:
    """``module.save_hyperparameters(hparams)`` as Lightning does it, without its search of the callers' frames for
    ``__init__`` arguments (a run's arguments are declared once and known: its ``_arguments``)."""
    module._set_hparams(hparams)
    module._hparams_initial = copy.deepcopy(module._hparams)
    module._log_hyperparams = True


def logged_step(trainer: pl.Trainer | None) -> int:
    """The step Lightning logs epoch-level metrics at (``LoggerConnector`` uses the optimizer steps taken so far,
    ``_batches_that_stepped``, not ``global_step``, which can differ under manual optimization)."""
    return trainer.fit_loop.epoch_loop._batches_that_stepped if trainer is not None else 0


def take_pending_sigterm(trainer: pl.Trainer) -> bool:
    """Whether Lightning's own SIGTERM handler already caught a SIGTERM (sent before training started); clears it,
    so the signal is handled once, by lit-marl's pre-emption callback."""
    connector = getattr(trainer, "_signal_connector", None)
    if connector is None or not connector.received_sigterm:
        return False
    connector.received_sigterm = False
    return True


def _atomic_csv_rewrite(self, fieldnames: list[str]) -> None:
    """``_ExperimentWriter._rewrite_with_new_header`` through a temporary file and a rename (Lightning truncates
    ``metrics.csv`` and writes it again in place, so a kill in between would cut every row written before)."""
    path = Path(self.metrics_file_path)
    with open(path, newline="") as f:
        metrics = list(csv.DictReader(f))
    with atomic_target(path) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fieldnames)
        writer.writeheader()
        writer.writerows(metrics)


def atomic_csv_rewrites(logger: Any) -> None:
    """Make a Lightning ``CSVLogger`` on a local file system replace ``metrics.csv`` atomically when a new column
    appears (the first evaluation, the first finished episode); appends stay as Lightning writes them."""
    if not isinstance(logger, CSVLogger) or getattr(logger._fs, "protocol", "file") not in ("file", ("file", "local")):
        return
    experiment = logger.experiment
    if isinstance(experiment, _ExperimentWriter) and not getattr(experiment, "_lit_marl_atomic", False):
        experiment._rewrite_with_new_header = _atomic_csv_rewrite.__get__(experiment)
        experiment._lit_marl_atomic = True


def last_checkpoint_is_current(callback: Any, trainer: pl.Trainer) -> bool:
    """Whether ``ModelCheckpoint`` already wrote its ``last`` checkpoint at this optimizer step (its private
    ``_last_global_step_saved`` is the only record of when it last saved)."""
    return (isinstance(callback, ModelCheckpoint) and bool(callback.last_model_path)
            and Path(callback.last_model_path).stem.startswith(callback.CHECKPOINT_NAME_LAST)
            and callback._last_global_step_saved == trainer.global_step and trainer.global_step > 0)


def adopt_last_checkpoint(callback: Any, trainer: pl.Trainer, path: Path) -> None:
    """Make ``path`` (written by lit-marl at the end of training) ``ModelCheckpoint``'s own last checkpoint: its
    ``on_train_end`` would otherwise write it again, or, finding a file it did not write, a second ``last-v1.ckpt``
    (it reads the private ``_last_checkpoint_saved`` and ``_last_global_step_saved`` for that)."""
    if isinstance(callback, ModelCheckpoint):
        callback.last_model_path = str(path)
        callback._last_checkpoint_saved = str(path)
        callback._last_global_step_saved = trainer.global_step
