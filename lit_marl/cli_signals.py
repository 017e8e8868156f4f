"""What the command line says when a signal ends a command (Ctrl-C, SIGTERM, SIGHUP outside training), and the
Ctrl-C counting it relies on (lit_marl/cli.py's ``main``)."""

from __future__ import annotations

import signal
import threading

from lit_marl.callbacks.preemption import Interrupts
from lit_marl.run_folders import NEW_RUN_FOLDERS


def what_was_left(command: str) -> str:
    """What a Ctrl-C, SIGTERM or SIGHUP left on disk, truly: the checkpoint this process wrote as it stopped, else the
    run's last one; for ``benchmark`` and ``tune``, whose runs checkpoint in processes of their own, how to continue
    them; for ``validate`` and ``test``, that their results were not written."""
    if command in ("validate", "test"):
        return f"the {command} did not finish and its results were not written; run it again"
    if command == "benchmark":
        return ("every run's checkpoints on disk are whole; the same command continues the grid (finished runs are "
                "skipped, interrupted ones resume from their last.ckpt)")
    if command == "tune":
        return "the study's journal is whole and its running trials were queued again; the same command continues it"
    last = Interrupts.checkpoint
    if last is None:
        found = [folder / "checkpoints" / "last.ckpt" for folder in NEW_RUN_FOLDERS]
        last = next((str(path) for path in found if path.is_file()), None)
    if last is None:
        return "no checkpoint of this run was written"
    return f"the last checkpoint, {last}, is whole; resume with --ckpt_path {last}"


def count_interrupts():
    """Count Ctrl-Cs for :func:`main` (a SIGINT still raises KeyboardInterrupt, as Python's default does; in
    training :class:`PreemptionCheckpoint` handles it instead); returns the handler to restore, or None."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):
        Interrupts.count += 1
        raise KeyboardInterrupt

    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, handler)
    return previous
