"""Pre-emption: SIGTERM / SIGUSR1 finish the current iteration, save ``last.ckpt`` and stop."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Checkpoint
from lightning.pytorch.utilities import rank_zero_info
from typing_extensions import override

from lit_marl.lightning_adapter import take_pending_sigterm


class PreemptionCheckpoint(Checkpoint):
    """SIGTERM and SIGUSR1 (what SLURM and most schedulers send before a kill) finish the current iteration, save
    ``last.ckpt`` (in ``ModelCheckpoint``'s folder) and stop; the module's ``stopped_by_signal`` and
    ``signal_checkpoint`` say so afterwards (``lit-marl fit`` exits 128 + the signal's number).

    Replaces Lightning's own SIGTERM handler, which outside SLURM stops at the next minibatch without saving;
    Lightning restores the previous handlers when ``fit`` ends. A :class:`Checkpoint` subclass, so its epoch-end hook
    runs after the module's (the iteration's counters are final) and with the other checkpoint callbacks.
    """

    #: signals that make ``fit`` save a checkpoint at the end of the current iteration and stop
    STOP_SIGNALS: tuple[int, ...] = (signal.SIGTERM, signal.SIGUSR1)

    def __init__(self) -> None:
        self.received: int | None = None

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        pl_module.stopped_by_signal = pl_module.signal_checkpoint = None
        self.received = None
        if threading.current_thread() is not threading.main_thread():
            return
        if take_pending_sigterm(trainer):  # arrived before training started
            self.received = signal.SIGTERM

        def handler(signum, frame):
            if self.received is None:
                self.received = signum
                rank_zero_info(f"lit-marl: received {signal.Signals(signum).name}; saving a checkpoint at the end "
                               f"of iteration {pl_module.iteration + 1}, then stopping")

        for signum in self.STOP_SIGNALS:
            signal.signal(signum, handler)

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.strategy.reduce_boolean_decision(self.received is not None, all=False):  # on any process
            return
        callback = trainer.checkpoint_callback
        if callback is not None and callback.dirpath:
            path = Path(callback.dirpath) / f"{callback.CHECKPOINT_NAME_LAST}{callback.FILE_EXTENSION}"
        else:
            path = Path(trainer.log_dir or trainer.default_root_dir) / "checkpoints" / "last.ckpt"
        trainer.save_checkpoint(path)
        pl_module.stopped_by_signal = self.received or signal.SIGTERM
        pl_module.signal_checkpoint = str(path)
        trainer.should_stop = True
        rank_zero_info(f"lit-marl: stopped by {signal.Signals(pl_module.stopped_by_signal).name} after iteration "
                       f"{pl_module.iteration} (frames {pl_module.frames}); resume with --ckpt_path {path}")
