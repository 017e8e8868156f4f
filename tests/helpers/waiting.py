"""Waiting for another process in a test: a deadline only bounds a hang, and running out of it (or the process ending
first) fails naming what was being waited for."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable


def wait_until(condition: Callable[[], object], what: str, timeout: float = 300.0,
               process: subprocess.Popen | None = None, poll: float = 0.05) -> None:
    """Return once ``condition()`` is true; fail if ``process`` (when given) ends first, or after ``timeout`` s (a
    generous bound on a hang, never a measure of speed)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the process ended (exit {process.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:.0f} s for {what}")
        time.sleep(poll)
