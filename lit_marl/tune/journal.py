"""A study's journal read defensively before a study continues (issue 34).

Optuna's journal storage is one file of JSON records, one a line, appended under a lock. A crash or a full disk in
the middle of an append leaves a torn last line; Optuna then fails on every later read (``JSONDecodeError``), and a
run that appends anyway glues its record onto the torn one, so the study cannot be read again. Before a study is
continued, :func:`check_journal` (under Optuna's own lock, so no worker is mid-append):

- a torn last record is set aside in a file beside the journal (``journal.log.torn-<time>``), the journal is cut back
  to its intact records (written atomically), and one line says so; the study continues from those records;
- a journal that is empty, or unreadable before its last line (random bytes, a record glued onto a torn one), is
  refused by name and left untouched, with the command that starts a new study instead.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from lit_marl.atomic import write_atomic
from lit_marl.errors import ConfigError


def _record(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line.decode("utf-8")), dict)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False


def check_journal(path: Path, new_study: str, log: Callable[[str], None] = print) -> None:
    """Refuse or mend the journal at ``path`` before its study continues (module docstring); ``new_study`` is the
    command the refusal offers. Nothing to do where there is no journal yet."""
    if not path.exists():
        return
    from optuna.storages.journal import JournalFileSymlinkLock

    lock = JournalFileSymlinkLock(str(path))
    lock.acquire()
    try:
        _check(path, new_study, log)
    finally:
        lock.release()


def _check(path: Path, new_study: str, log: Callable[[str], None]) -> None:
    def refuse(problem: str) -> ConfigError:
        return ConfigError(f"out: the study's journal {str(path)!r} {problem}; it is left as it is. Allowed: a new "
                           f"study in another folder: {new_study}")

    if path.is_dir():
        raise refuse("is a folder, not a file")
    data = path.read_bytes()
    if not data.strip():
        raise refuse("is empty (its records are gone)")
    *complete, last = data.split(b"\n")
    for number, line in enumerate(complete, start=1):
        if line.strip() and not _record(line):
            raise refuse(f"is unreadable at line {number} of {len(complete) + bool(last)} (not a JSON record)")
    if not last.strip():
        return
    if _record(last):  # whole, only its newline is missing
        write_atomic(path, data + b"\n", overwrite=True)
        return
    kept = path.with_name(f"{path.name}.torn-{time.strftime('%Y%m%d-%H%M%S')}")
    write_atomic(kept, last, overwrite=False)
    write_atomic(path, data[: len(data) - len(last)], overwrite=True)
    log(f"lit-marl tune: the journal's last record was torn (a crash or a full disk mid-write): its {len(last)} "
        f"bytes are kept in {kept}; the study continues from its {sum(1 for x in complete if x.strip())} intact "
        f"records")


def journal_storage(path: str | os.PathLike):
    """Optuna's journal storage on one file (processes append under its lock; each replays the log)."""
    from optuna.storages import JournalStorage  # optuna: the optional extra ``tune``
    from optuna.storages.journal import JournalFileBackend

    return JournalStorage(JournalFileBackend(str(path)))
