"""Signals outside training: a process that caught Ctrl-C's ``KeyboardInterrupt`` ends with the exit code it chose
(130), not by SIGINT; SIGTERM and SIGHUP (a scheduler's stop, a closed terminal) end any command with one true line
and 128 + the signal's number instead of a silent death by the signal (training itself saves and stops on them:
:class:`~lit_marl.callbacks.preemption.PreemptionCheckpoint`)."""

from __future__ import annotations

import signal
import sys
import threading
from typing import NoReturn

#: the stop signals handled outside training (SIGINT has its own path: Python's KeyboardInterrupt)
TERMINATING = (signal.SIGTERM, signal.SIGHUP)


class Terminated(BaseException):
    """Raised by :func:`raise_on_termination`'s handlers: the process was sent ``signum`` (a ``BaseException``, as
    ``KeyboardInterrupt`` is, so that no ``except Exception`` swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class Terminations:
    """While a ``fit`` runs (:class:`~lit_marl.callbacks.preemption.PreemptionCheckpoint` sets :attr:`deferred` from
    its ``setup``), SIGTERM and SIGHUP are not raised but kept in :attr:`pending`: its first iteration takes them,
    finishes, saves ``last.ckpt`` and stops (a signal during start-up still leaves a checkpoint)."""

    deferred: bool = False
    pending: list[int] = []
    #: a stop signal that reached a ``fit`` after its last iteration had ended (the run finished): the CLI exits with
    #: 128 + its number all the same, saying so
    late: int | None = None

    @classmethod
    def reset(cls) -> None:
        cls.deferred, cls.pending, cls.late = False, [], None

    @classmethod
    def take(cls) -> int | None:
        """The first pending signal, clearing them all."""
        signum = cls.pending[0] if cls.pending else None
        cls.pending = []
        return signum


def raise_on_termination() -> dict[int, object]:
    """Make SIGTERM and SIGHUP raise :class:`Terminated` in the main thread (kept for the run when
    :attr:`Terminations.deferred`); returns the handlers to restore."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def handler(signum, frame):
        if Terminations.deferred:
            Terminations.pending.append(signum)
            return
        raise Terminated(signum)

    return {signum: signal.signal(signum, handler) for signum in TERMINATING}


def restore(handlers: dict[int, object]) -> None:
    for signum, previous in handlers.items():
        signal.signal(signum, previous)


def forget_caught_interrupt() -> None:
    """Clear CPython's note of an unhandled ``KeyboardInterrupt``.

    A ``KeyboardInterrupt`` that leaves code run by ``exec``/``eval`` of a string (``dataclasses``, ``six`` and
    ``collections.namedtuple`` build classes that way, some while being imported) is noted as unhandled even when a
    caller further up catches it; under ``python -m`` (how ``lit-marl benchmark`` and ``tune`` start their runs) the
    interpreter then ends by sending itself SIGINT once it has finalised, and a parent reads -2, not the 130 chosen.
    Every such evaluation clears the note before it runs, so evaluating an empty one clears it."""
    exec("pass", {})


def exit_interrupted(message: str) -> NoReturn:
    """Print ``message`` to stderr and exit 130 (128 + SIGINT), however deep the Ctrl-C landed."""
    print(message, file=sys.stderr)
    forget_caught_interrupt()
    raise SystemExit(130) from None


def exit_terminated(signum: int, message: str) -> NoReturn:
    """Print ``message`` to stderr and exit 128 + ``signum``."""
    print(message, file=sys.stderr)
    raise SystemExit(128 + signum) from None
