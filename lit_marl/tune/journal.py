"""A study's journal read defensively before a study continues (issue 34).

Optuna's journal storage is one file of JSON records, one a line, appended under a lock. A crash or a full disk in
the middle of an append leaves a torn last line; Optuna then fails on every later read (``JSONDecodeError``), and a
run that appends anyway glues its record onto the torn one, so the study cannot be read again. Before a study is
continued, :func:`check_journal` (under Optuna's own lock, so no worker is mid-append):

- a torn last record is set aside in a file beside the journal (``journal.log.torn-<time>``), the journal is cut back
  to its intact records (written atomically), and one line says so; the study continues from those records;
- a journal that is empty, or unreadable before its last line (random bytes, a record glued onto a torn one), is
  refused by name and left untouched, with the command that starts a new study instead;
- so is a journal that is gone while the study folder shows earlier trials, one with no whole record (bytes without
  a line end), another program's or another study's (its first record is not the creation of this study), and one
  whose lines were reordered (:func:`out_of_order`): Optuna would replay any of them as a study with fewer trials,
  or none, and ``lit-marl tune`` would run the trials again and rewrite the results (issue 48).

Optuna's file lock is a symbolic link to the journal, beside it (``journal.log.lock``). One whose target is gone (left
by a crash of a worker that named the journal by a relative path, which the link resolves from its own folder) made
Optuna retry without a pause, for ever; the lock is named instead, after a bounded wait (:func:`check_lock`), and
lit-marl names the journal by its absolute path, so the locks it takes never dangle.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from lit_marl.atomic import write_atomic
from lit_marl.errors import ConfigError


#: Optuna's journal operations that lit-marl checks the order of (optuna.storages.journal._storage.JournalOperation)
CREATE_STUDY, CREATE_TRIAL, SET_TRIAL_PARAM, SET_TRIAL_STATE_VALUES, SET_TRIAL_USER_ATTR = 0, 4, 5, 6, 8
#: trial states that end a trial (optuna.trial.TrialState: COMPLETE, PRUNED, FAIL)
FINISHED = (1, 2, 3)
#: the trial user attribute a worker sets as it takes a trial (:data:`lit_marl.tune.study.WORKER`)
WORKER_ATTR = "worker"
#: how long :func:`check_lock` waits for a dangling lock to go before it names it
STALE_LOCK_WAIT = 10.0


def _record(line: bytes) -> dict | None:
    try:
        record = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) else None


def check_lock(path: Path, wait: float | None = None) -> None:
    """Refuse a dangling lock of the journal at ``path`` (a link to a file that does not exist: Optuna's ``acquire``
    would retry it without a pause, for ever) once it has stayed ``wait`` seconds (:data:`STALE_LOCK_WAIT`)."""
    lock = Path(f"{path}.lock")
    deadline = time.monotonic() + (STALE_LOCK_WAIT if wait is None else wait)
    while lock.is_symlink() and not lock.exists():
        if time.monotonic() >= deadline:
            raise ConfigError(
                f"out: the study's journal lock {str(lock)!r} points to {os.readlink(lock)!r}, which does not exist: "
                f"it looks stale (left by a worker that crashed, or the study folder was moved). Allowed: where no "
                f"lit-marl tune runs on this study any more, remove it (rm {str(lock)!r}) and run the command again")
        time.sleep(0.2)


def check_journal(path: Path, new_study: str, log: Callable[[str], None] = print, study_name: str = "lit-marl",
                  earlier: list[str] | None = None) -> None:
    """Refuse or mend the journal at ``path`` of the study ``study_name`` before it continues (module docstring);
    ``new_study`` is the command the refusal offers. Where there is no journal, the files of the study folder that
    show ``earlier`` trials refuse it; without them there is nothing to check."""
    path = Path(os.path.abspath(path))
    check_lock(path)
    if not path.exists():
        if earlier:
            raise ConfigError(
                f"out: the study's journal {str(path)!r} is gone, but the study folder shows earlier trials "
                f"({', '.join(earlier)}); continuing would start the study again and rewrite its results. Allowed: "
                f"the journal put back, or a new study in another folder: {new_study}")
        return
    from optuna.storages.journal import JournalFileSymlinkLock

    lock = JournalFileSymlinkLock(str(path))
    lock.acquire()
    try:
        _check(path, new_study, log, study_name)
    finally:
        lock.release()


def out_of_order(records: list[dict], study_name: str) -> str | None:
    """Why ``records`` (a journal's, in file order) cannot be the order Optuna wrote them in for the study
    ``study_name``, or None. Optuna appends each operation after the ones it depends on: the study's creation first,
    a trial's creation before anything about it, and a lit-marl worker sets a trial's parameters and its ``worker``
    attribute (under the ask lock) before the trial can finish. Optuna itself skips what breaks this when it replays,
    so a reordered journal would load as a study with fewer trials, or none."""
    first = records[0] if records else {}
    if first.get("op_code") != CREATE_STUDY or first.get("study_name") != study_name:
        return (f"does not begin with the creation of study {study_name!r} (its first record: op_code "
                f"{first.get('op_code')!r}{', study ' + repr(first['study_name']) if 'study_name' in first else ''}): "
                f"another program's or another study's file, or its lines were reordered")
    trials: list[bool] = []  # by trial id (the order of creation): finished
    for number, record in enumerate(records, start=1):
        op, trial = record.get("op_code"), record.get("trial_id")
        if record.get("study_id", 0) != 0:
            return f"names study {record['study_id']!r} at line {number}, but holds one study (0): reordered lines?"
        if op == CREATE_TRIAL:
            trials.append(record.get("state") in FINISHED)
            continue
        if trial is None:
            continue
        if not isinstance(trial, int) or not 0 <= trial < len(trials):
            return (f"is out of order: line {number} changes trial {trial!r} before any line creates it (its lines "
                    f"were reordered, or records are missing)")
        before = trials[trial]
        if op == SET_TRIAL_STATE_VALUES and record.get("state") in FINISHED:
            trials[trial] = True
        elif before and (op == SET_TRIAL_PARAM or (op == SET_TRIAL_USER_ATTR and WORKER_ATTR in
                                                  (record.get("user_attr") or {}))):
            what = "a parameter" if op == SET_TRIAL_PARAM else "the worker that takes it"
            return (f"is out of order: line {number} gives trial {trial} {what} after a line that finished it (its "
                    f"lines were reordered)")
    return None


def _check(path: Path, new_study: str, log: Callable[[str], None], study_name: str) -> None:
    def refuse(problem: str) -> ConfigError:
        return ConfigError(f"out: the study's journal {str(path)!r} {problem}; it is left as it is. Allowed: a new "
                           f"study in another folder: {new_study}")

    if path.is_dir():
        raise refuse("is a folder, not a file")
    data = path.read_bytes()
    if not data.strip():
        raise refuse("is empty (its records are gone)")
    *complete, last = data.split(b"\n")
    records = []
    for number, line in enumerate(complete, start=1):
        record = _record(line) if line.strip() else {}
        if record is None:
            raise refuse(f"is unreadable at line {number} of {len(complete) + bool(last)} (not a JSON record)")
        if record:
            records.append(record)
    whole_last = _record(last) if last.strip() else None
    if not records and whole_last is None:
        raise refuse(f"holds no whole record (its {len(data)} bytes have no line end): not a journal lit-marl tune "
                     f"wrote, or damaged from its first record")
    problem = out_of_order(records + ([whole_last] if whole_last else []), study_name)
    if problem is not None:
        raise refuse(problem)
    if not last.strip():
        return
    if whole_last is not None:  # whole, only its newline is missing
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

    return JournalStorage(JournalFileBackend(os.path.abspath(path)))  # its lock links to it: absolute, never dangling
