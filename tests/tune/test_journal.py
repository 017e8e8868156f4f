"""Issue 34: a study's files read defensively before it continues. A torn last journal record (a crash or a full
disk mid-write) is set aside beside the journal and the study continues from its intact records; an empty or
otherwise unreadable journal, or a damaged settings file, is refused by name and left untouched."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna")

from lit_marl.errors import ConfigError  # noqa: E402
from lit_marl.tune.command import prepare  # noqa: E402
from lit_marl.tune.space import parse_settings  # noqa: E402
from lit_marl.tune.journal import journal_storage  # noqa: E402
from lit_marl.tune.study import JOURNAL, SETTINGS_FILE, STUDY_NAME  # noqa: E402

CONFIG = {"model": {"init_args": {"lr": 0.1}}}


def _settings(trials: int = 2):
    return parse_settings({"space": {"model.init_args.lr": {"type": "float", "low": 1e-4, "high": 1e-2}},
                           "trials": trials, "seeds": [0]})


def _study_with_a_trial(root: Path) -> int:
    study = prepare(root, _settings(), CONFIG)
    trial = study.ask()
    study.tell(trial, 1.5)
    return len(study.trials)


def test_a_torn_last_record_is_set_aside_and_the_study_continues(tmp_path, capsys):
    assert _study_with_a_trial(tmp_path) == 1
    journal = tmp_path / JOURNAL
    intact = journal.read_bytes()
    torn = b'{"op_code": 4, "worker_id": "abc", "trial_id": 0, "param'
    journal.write_bytes(intact + torn)  # Optuna skips it when reading, but its next append would glue onto it
    study = prepare(tmp_path, _settings(trials=3), CONFIG)
    mended = journal.read_bytes()  # the intact records, then what continuing the study appended (whole records)
    assert mended.startswith(intact) and torn not in mended and mended.endswith(b"\n")
    (kept,) = tmp_path.glob(f"{JOURNAL}.torn-*")
    assert kept.read_bytes() == torn
    assert "the journal's last record was torn" in capsys.readouterr().out
    assert len(study.trials) == 1 and study.trials[0].value == 1.5
    study.tell(study.ask(), 2.5)  # and it goes on being written and read
    reread = optuna.load_study(study_name=STUDY_NAME, storage=journal_storage(journal))
    assert [t.value for t in reread.trials] == [1.5, 2.5]


@pytest.mark.parametrize("damage, said", [
    (lambda data: b"", "is empty (its records are gone)"),
    (lambda data: data[:40] + bytes(range(256)) + b"\n" + data[40:], "is unreadable at line"),
    (lambda data: data.replace(b"\n", b"", 1), "is unreadable at line 1"),  # a record glued onto a torn one
])
def test_an_empty_or_unreadable_journal_is_refused_by_name_and_left_untouched(damage, said, tmp_path):
    _study_with_a_trial(tmp_path)
    journal = tmp_path / JOURNAL
    damaged = damage(journal.read_bytes())
    journal.write_bytes(damaged)
    with pytest.raises(ConfigError, match=f"out: the study's journal .*{re.escape(said)}.*it is left as it is. Allowed: a new "
                                          f"study in another folder: lit-marl tune"):
        prepare(tmp_path, _settings(), CONFIG)
    assert journal.read_bytes() == damaged
    assert not list(tmp_path.glob(f"{JOURNAL}.torn-*"))


def test_a_damaged_settings_file_is_refused_by_name(tmp_path):
    _study_with_a_trial(tmp_path)
    (tmp_path / SETTINGS_FILE).write_bytes(b"\x00\x01garbage")
    with pytest.raises(ConfigError, match=r"out: the study's settings .*tune.yaml' is binary"):
        prepare(tmp_path, _settings(), CONFIG)
    (tmp_path / SETTINGS_FILE).write_text("")
    with pytest.raises(ConfigError, match=r"tune.yaml' is empty"):
        prepare(tmp_path, _settings(), CONFIG)


def _study_of_a_worker(root: Path, trials: int = 2) -> bytes:
    """A study whose trials a lit-marl worker took (Worker.ask: parameters, then its ``worker`` attribute) and told;
    its journal's bytes."""
    from lit_marl.tune.study import Worker

    prepare(root, _settings(trials), CONFIG)
    worker = Worker(root, _settings(trials), CONFIG)
    while (trial := worker.ask()) is not None:
        trial.report(float(trial.number), 40)
        worker.study.tell(trial, float(trial.number))
    (root / "trials" / "trial_0000").mkdir(parents=True)  # what lit-marl tune leaves of a trial
    return (root / JOURNAL).read_bytes()


def _shuffled(lines: list[bytes]) -> list[bytes]:
    import random

    random.Random(0).shuffle(lines)
    return lines


@pytest.mark.parametrize("damage, said", [
    (lambda data: b"journal of another program " * 40, "holds no whole record (its 1080 bytes have no line end)"),
    (lambda data: b'{"op_code": 0, "study_name": "another", "directions": [1]}\n' + data,
     "does not begin with the creation of study 'lit-marl' (its first record: op_code 0, study 'another')"),
    (lambda data: b'{"time": 1, "event": "start"}\n{"time": 2, "event": "stop"}\n',
     "does not begin with the creation of study 'lit-marl' (its first record: op_code None)"),
    (lambda data: b"\n".join(reversed(data.rstrip(b"\n").split(b"\n"))) + b"\n", "its lines were reordered"),
    (lambda data: b"\n".join(sorted(data.rstrip(b"\n").split(b"\n"))) + b"\n",
     "is out of order: line 12 gives trial 0 the worker that takes it after a line that finished it"),
    (lambda data: b"\n".join(_shuffled(data.rstrip(b"\n").split(b"\n"))) + b"\n", "reordered"),
])
def test_a_foreign_or_reordered_journal_is_refused_never_restarted(damage, said, tmp_path):
    """Issue 48: each of these was read as a study with no trials (Optuna skips a record it cannot apply), and
    lit-marl tune ran the trials again and rewrote trials.csv and best.yaml, exit 0."""
    damaged = damage(_study_of_a_worker(tmp_path))
    (tmp_path / JOURNAL).write_bytes(damaged)
    with pytest.raises(ConfigError, match=f"out: the study's journal .*{re.escape(said)}.*it is left as it is"):
        prepare(tmp_path, _settings(), CONFIG)
    assert (tmp_path / JOURNAL).read_bytes() == damaged


def test_a_gone_journal_is_refused_where_the_folder_shows_earlier_trials(tmp_path):
    _study_of_a_worker(tmp_path)
    (tmp_path / JOURNAL).unlink()
    with pytest.raises(ConfigError, match=r"journal .* is gone, but the study folder shows earlier trials \(1 in "
                                          r".*trials\); continuing would start the study again"):
        prepare(tmp_path, _settings(), CONFIG)
    assert not (tmp_path / JOURNAL).exists()
    (tmp_path / "trials" / "trial_0000").rmdir()  # nothing shows a trial ran: the study starts (again)
    assert len(prepare(tmp_path, _settings(), CONFIG).trials) == 0


@pytest.mark.timeout(120)
def test_a_dangling_journal_lock_is_named_after_a_bounded_wait(tmp_path, monkeypatch):
    """Issue 48: a lock left by a crash, linking to a journal by a relative path (which the link resolves from its own
    folder), made Optuna retry without a pause: lit-marl tune spun at 100 % CPU for ever."""
    from lit_marl.tune import journal

    _study_with_a_trial(tmp_path)
    lock = tmp_path / f"{JOURNAL}.lock"
    lock.symlink_to(f"runs/tune/study/{JOURNAL}")  # as a worker given --out runs/tune/study left it
    monkeypatch.setattr(journal, "STALE_LOCK_WAIT", 0.5)
    with pytest.raises(ConfigError, match=f"out: the study's journal lock '{re.escape(str(lock))}' points to "
                                          f"'runs/tune/study/{JOURNAL}', which does not exist: it looks stale.*"
                                          f"remove it \\(rm '{re.escape(str(lock))}'\\)"):
        prepare(tmp_path, _settings(), CONFIG)
    lock.unlink()
    assert len(prepare(tmp_path, _settings(), CONFIG).trials) == 1


def test_the_journal_lock_links_to_the_journal_by_its_absolute_path(tmp_path, monkeypatch):
    """A lock taken through a relative path resolves (it is never dangling while it is held)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "study").mkdir()
    backend = journal_storage(Path("study") / JOURNAL)._backend
    backend._lock.acquire()
    try:
        assert (tmp_path / "study" / f"{JOURNAL}.lock").exists()
    finally:
        backend._lock.release()
