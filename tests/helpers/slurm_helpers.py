"""Callbacks the SLURM tests add to their tiny runs (``trainer.callbacks`` in a grid's overrides): what Lightning saw
inside an array task, and a first attempt slow enough to be interrupted at a known point whatever the machine's
speed (a resumed attempt runs at full speed)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import lightning.pytorch as pl
from typing_extensions import override


class RecordEnvironment(pl.Callback):
    """Writes ``environment.json`` in the run's log folder: the Trainer's world size, number of nodes and cluster
    environment, at train start."""

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        environment = trainer._accelerator_connector.cluster_environment  # what Lightning detected (SLURM or not)
        (Path(trainer.log_dir) / "environment.json").write_text(json.dumps({
            "world_size": trainer.world_size, "num_nodes": trainer.num_nodes,
            "cluster_environment": type(environment).__name__ if environment is not None else None,
        }))


class SlowFirstAttempt(pl.Callback):
    """Sleeps ``seconds`` after each iteration of a run that did not resume from a checkpoint."""

    def __init__(self, seconds: float = 1.0) -> None:
        self.seconds = seconds

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.ckpt_path is None:
            time.sleep(self.seconds)
