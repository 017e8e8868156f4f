"""A process that caught Ctrl-C's ``KeyboardInterrupt`` ends with the exit code it chose (130), not by SIGINT."""

from __future__ import annotations

import sys
from typing import NoReturn


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
