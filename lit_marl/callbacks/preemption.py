"""Stopping cleanly: SIGTERM / SIGUSR1 / Ctrl-C finish the current iteration, save ``last.ckpt`` and stop; a
second Ctrl-C stops at once. ``last.ckpt`` is also brought up to date whenever training ends."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Checkpoint
from lightning.pytorch.utilities import rank_zero_info
from typing_extensions import override

from lit_marl.lightning_adapter import adopt_last_checkpoint, last_checkpoint_is_current, take_pending_sigterm
from lit_marl.sigint import Terminations


class Interrupts:
    """What Ctrl-C did in this process, for the CLI's last words (signals are per process, so is this)."""

    #: SIGINTs received while a lit-marl command ran
    count: int = 0
    #: of those, the ones a finished ``fit`` has acted on (a later ``fit`` in the same process ignores them)
    handled: int = 0
    #: the newest checkpoint written, which a second Ctrl-C leaves whole
    checkpoint: str | None = None

    @classmethod
    def reset(cls) -> None:
        cls.count, cls.handled, cls.checkpoint = 0, 0, None


def signal_label(signum: int) -> str:
    return "SIGINT (Ctrl-C)" if signum == signal.SIGINT else signal.Signals(signum).name


class PreemptionCheckpoint(Checkpoint):
    """SIGTERM and SIGUSR1 (what SLURM and most schedulers send before a kill) and the first Ctrl-C (SIGINT) finish
    the current iteration (collection, updates, a due evaluation), save ``last.ckpt`` (in ``ModelCheckpoint``'s
    folder) and stop; its ``stopped_by_signal`` and ``signal_checkpoint`` say so afterwards (the algorithm's properties
    of the same names read them; ``lit-marl fit`` exits 128 + the signal's number: 130 for Ctrl-C). A second Ctrl-C raises ``KeyboardInterrupt`` at once:
    every checkpoint already on disk is whole (they are written to a temporary file and renamed).

    Nothing interrupts torchrl or tensordict half-way: the first signal only sets a flag that the end of the
    iteration reads. Replaces Lightning's own SIGTERM handler, which outside SLURM stops at the next minibatch
    without saving; Lightning restores the SIGTERM/SIGUSR1 handlers when ``fit`` ends, this callback the SIGINT one.

    Whenever training ends (frame budget, ``max_epochs``, a signal), ``last.ckpt`` holds the last iteration:
    ``ModelCheckpoint`` alone writes it only with its periodic checkpoints, so a run ending between two of them would
    leave an older ``last.ckpt``, and one stopped by a signal before the first a second one, ``last-v1.ckpt``.
    A :class:`~lightning.pytorch.callbacks.Checkpoint` subclass, so its epoch-end hook runs after the module's (the
    iteration's counters are final) and after ``ModelCheckpoint``'s.
    """

    #: signals that make ``fit`` save a checkpoint at the end of the current iteration and stop (SIGHUP: the terminal
    #: that started the run was closed)
    STOP_SIGNALS: tuple[int, ...] = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT, signal.SIGHUP)
    #: of those, the ones whose handlers this callback restores (Lightning restores SIGTERM's and SIGUSR1's)
    RESTORED: tuple[int, ...] = (signal.SIGINT, signal.SIGHUP)

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, object] = {}
        #: the signal that stopped the last ``fit`` (after saving ``signal_checkpoint``), or None
        self.stopped_by_signal: int | None = None
        self.signal_checkpoint: str | None = None

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Before ``fit``: a SIGTERM or SIGHUP from now on is this run's to act on (held until training starts)."""
        if stage == "fit":  # SIGTERM/SIGHUP from here on are this run's to act on (lit_marl/sigint.py)
            Terminations.deferred = True

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Install the handlers of :attr:`STOP_SIGNALS` (the first signal sets a flag, a second Ctrl-C stops at once),
        and take a signal that arrived during start-up as received."""
        self.stopped_by_signal = self.signal_checkpoint = None
        self.received = None
        if threading.current_thread() is not threading.main_thread():
            return
        pending = Terminations.take()
        if take_pending_sigterm(trainer) or pending is not None:  # arrived before training started
            self.received = pending or signal.SIGTERM
        elif Interrupts.count > Interrupts.handled:
            # a Ctrl-C during start-up (restoring a checkpoint, building envs) whose KeyboardInterrupt some library
            # caught and dropped: the run would otherwise train to its end as if it had not been pressed
            self.received = signal.SIGINT
            rank_zero_info(f"\nlit-marl: received SIGINT (Ctrl-C) during start-up; finishing iteration "
                           f"{pl_module.iteration + 1}, saving last.ckpt, then stopping")

        def handler(signum, frame):
            if signum == signal.SIGINT:
                Interrupts.count += 1
                callback = trainer.checkpoint_callback
                Interrupts.checkpoint = getattr(callback, "last_model_path", None) or Interrupts.checkpoint
                if self.received is not None:  # a second Ctrl-C (or one after SIGTERM): stop now
                    raise KeyboardInterrupt
            if self.received is None:
                self.received = signum
                again = "; press Ctrl-C again to stop at once" if signum == signal.SIGINT else ""
                rank_zero_info(f"\nlit-marl: received {signal_label(signum)}; finishing iteration "
                               f"{pl_module.iteration + 1}, saving last.ckpt, then stopping{again}")

        self._previous = {signum: signal.getsignal(signum) for signum in self.RESTORED}
        for signum in self.STOP_SIGNALS:
            signal.signal(signum, handler)

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Where any process received a signal: save ``last.ckpt`` after this iteration and stop training."""
        if not trainer.strategy.reduce_boolean_decision(self.received is not None, all=False):  # on any process
            return
        path = self._save_last(trainer)
        self.stopped_by_signal = self.received or signal.SIGTERM
        self.signal_checkpoint = str(path)
        trainer.should_stop = True
        rank_zero_info(f"lit-marl: stopped by {signal_label(self.stopped_by_signal)} after iteration "
                       f"{pl_module.iteration} (frames {pl_module.frames}); resume with --ckpt_path {path}")

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Where training ended otherwise (frame budget, ``max_epochs``) and ``ModelCheckpoint`` keeps a last
        checkpoint, make ``last.ckpt`` hold the last iteration."""
        callback = trainer.checkpoint_callback
        if callback is not None and getattr(callback, "save_last", False) and self.stopped_by_signal is None:
            self._save_last(trainer)

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """After ``fit``: restore the previous SIGINT and SIGHUP handlers, and leave a signal that arrived too late to
        act on for ``lit-marl fit``'s exit status."""
        Interrupts.handled = Interrupts.count
        if stage != "fit":
            return
        Terminations.deferred = False
        late = Terminations.take()  # before training started, with nothing run to take it (an error ended the fit)
        if self.received is not None and self.stopped_by_signal is None:
            late = self.received  # after the last iteration's end: nothing read it
        if late is not None and late != signal.SIGINT:  # a late Ctrl-C is counted by the CLI as ever
            Terminations.late = late
        if threading.current_thread() is threading.main_thread():
            for signum, previous in self._previous.items():
                signal.signal(signum, previous)
        self._previous = {}

    @staticmethod
    def _save_last(trainer: pl.Trainer) -> Path:
        """Write ``last.ckpt`` unless ``ModelCheckpoint`` wrote it at this step, and make it that callback's own last
        checkpoint (so it neither writes it again nor versions a second one beside it)."""
        callback = trainer.checkpoint_callback
        if callback is not None and getattr(callback, "dirpath", None):
            path = Path(callback.dirpath) / f"{callback.CHECKPOINT_NAME_LAST}{callback.FILE_EXTENSION}"
        else:
            path = Path(trainer.log_dir or trainer.default_root_dir) / "checkpoints" / "last.ckpt"
        if last_checkpoint_is_current(callback, trainer):
            return Path(callback.last_model_path)
        trainer.save_checkpoint(path, weights_only=False)  # explicit: Lightning logs a line for the default
        adopt_last_checkpoint(callback, trainer, path)
        Interrupts.checkpoint = str(path)
        return path
