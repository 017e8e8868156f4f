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
