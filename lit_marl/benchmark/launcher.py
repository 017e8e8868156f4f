"""What a launcher of a benchmark grid does beside running it: hold its benchmark folder (one launcher per folder,
``launcher.lock``, local or SLURM) and, for a local launch, catch SIGTERM, SIGHUP and SIGINT and pass the stop on to
its running ``lit-marl fit`` processes, each of which stops at its next checkpoint."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from lit_marl.errors import ConfigError

#: held (``flock``) by the one launcher of a benchmark folder; it holds that launcher's pid
LAUNCHER_LOCK = "launcher.lock"
#: what stops a local launch (:meth:`~lit_marl.benchmark.grid.Benchmark.run`); SIGUSR1 stays SLURM's, for ``fit``
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


@contextlib.contextmanager
def launcher_lock(root: Path) -> Iterator[None]:
    """Hold the benchmark folder ``root`` for one launcher while it lives: an exclusive ``flock`` on
    ``root/launcher.lock``, which the OS releases when the process ends, however it ends (a killed launcher leaves no
    stale lock). Two launchers on one folder would train the same run folders at once; the second is refused by name,
    with the holder's pid and host (the file's content). Reading the folder (``--status``) takes no lock. A file
    system without locks (some cluster file systems) is said once, and the launch goes on unguarded."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / LAUNCHER_LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by the runs (Python's fds close on exec)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode(errors="replace").strip() or "not written yet"
            raise ConfigError(f"output_dir: {str(root)!r} is in use by another lit-marl benchmark launcher (pid "
                              f"{holder}, holding {path}); allowed: one launcher per benchmark folder: wait for it "
                              f"to end (--status shows each run), stop it, or give another name or --output_dir"
                              ) from None
        except OSError as err:  # ENOLCK, ENOSYS, EOPNOTSUPP: the file system has no flock
            print(f"lit-marl: warning: {path} cannot be locked ({err.strerror or err}); a second launcher on this "
                  f"folder would not be refused", file=sys.stderr)
        else:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()} on {socket.gethostname()}\n".encode())
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def caught_signals(signals: tuple[int, ...], received: list[int]) -> Iterator[None]:
    """While in the block, each of ``signals`` (in the main thread; elsewhere none can be caught) is appended to
    ``received`` instead of acting: the launcher's loop reads it between two polls of its runs."""
    if threading.current_thread() is not threading.main_thread():
        signals = ()
    previous = {signum: signal.getsignal(signum) for signum in signals}
    for signum in signals:
        signal.signal(signum, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)


def stop_fits(procs: list[subprocess.Popen], received: list[int]) -> None:
    """Ask each running fit of a launcher that got a stop signal (``received``, which :func:`caught_signals` goes on
    filling) to stop, and wait for them; a second signal kills them at once (their checkpoints on disk are whole).
    The fits get SIGTERM whatever the launcher got: each finishes its iteration, saves ``last.ckpt`` and exits 143; a
    Ctrl-C at a terminal has reached them already (one process group), and a second SIGINT would stop them without
    saving (they then exit 130)."""
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    killed = False
    while any(proc.poll() is None for proc in procs):
        if len(received) > 1 and not killed:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
            killed = True
        time.sleep(0.2)


def how_it_stopped(code: int) -> str:
    """What a run's fit did when its launcher stopped it, from its exit code (``lit-marl fit``'s codes)."""
    if code == 0:
        return "had finished"
    if code in (128 + signal.SIGTERM, 128 + signal.SIGUSR1):
        return f"saved its last.ckpt and stopped (exit {code})"
    if code == 128 + signal.SIGINT:
        return f"stopped by Ctrl-C (exit {code}; its checkpoints on disk are whole)"
    if code == -signal.SIGKILL:
        return "was killed by a second signal (its checkpoints on disk are whole)"
    if code < 0:
        return f"ended by {signal.Signals(-code).name} outside its training loop, with nothing to save (exit {code})"
    return f"FAILED (exit {code}; see its train.log)"
