"""An unwritable run folder is refused at start (exit code 2, nothing trained); a disk that fills up during
training stops the run at the failing write (exit code 4) naming the file, with the previous checkpoint whole and
no temporary file left behind."""

from __future__ import annotations

import errno
import io

import pytest
import torch
import yaml

from lit_marl import checkpoint as checkpoint_module
from lit_marl.checkpoint import read_checkpoint
from lit_marl.cli import main
from tests.reliability.faulty import fill_disk_at_file
from tests.reliability.helpers import QUIET, expect_exit, rows, run_dirs, tiny_config, tiny_off_policy_config


def test_unwritable_run_folder_is_refused_at_start(capsys, tmp_path, monkeypatch):
    (tmp_path / "blocked").write_text("a file where the runs folder should be")
    config = tiny_config(tmp_path / "tiny.yaml")
    err = expect_exit(capsys, ["fit", "--config", str(config), *QUIET, "--trainer.logger.init_args.save_dir",
                               str(tmp_path / "blocked" / "runs")], 2,
                      "trainer.logger: the run folder", "blocked/runs", "cannot be written", "nothing was trained",
                      unchanged=tmp_path)
    assert "Traceback" not in err


def test_full_disk_at_start_is_refused(capsys, tmp_path, monkeypatch):
    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("lit_marl.run_folders.os.fsync", no_space)
    expect_exit(capsys, ["fit", "--config", str(tiny_config(tmp_path / "tiny.yaml")), *QUIET], 2,
                "cannot be written (No space left on device)")
    assert not list(tmp_path.glob("runs/*/version_*/*"))  # no run started: not even config.yaml


def _fill_disk_at_save(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """The n-th torch.save into a file (1-based) writes part of the checkpoint, then the disk is full."""
    real_save, calls = torch.save, []

    def save(obj, f, *args, **kwargs):
        calls.append(1)
        if len(calls) < n:
            return real_save(obj, f, *args, **kwargs)
        buffer = io.BytesIO()
        real_save(obj, buffer, *args, **kwargs)
        f.write(buffer.getvalue()[:1000])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint_module.torch, "save", save)


def test_disk_full_at_a_checkpoint_write_keeps_the_previous_checkpoint(capsys, tmp_path, monkeypatch):
    config = yaml.safe_load(tiny_config(tmp_path / "tiny.yaml").read_text())
    config["model"]["init_args"]["max_frames"] = 160
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(config))
    # writes: iteration 1 → frames_…40.ckpt (1), last.ckpt (2); iteration 2 → frames_…80.ckpt (3), last.ckpt (4)
    with monkeypatch.context() as patch:
        _fill_disk_at_save(patch, 4)
        expect_exit(capsys, ["fit", "--config", str(tmp_path / "tiny.yaml"), *QUIET], 4,
                    "lit-marl: error: could not write", "last.ckpt", "No space left on device",
                    "the previous one is intact", "resume with --ckpt_path", unchanged=None)
    (run,) = run_dirs()
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names == ["frames_000000040.ckpt", "frames_000000080.ckpt", "last.ckpt"]  # no temp file left
    assert read_checkpoint(run / "checkpoints" / "last.ckpt")["lit_marl"]["frames"] == 40
    main(["fit", "--config", str(run / "config.yaml"), "--ckpt_path", str(run / "checkpoints" / "last.ckpt"), *QUIET])
    resumed = [r for r in run_dirs() if r != run][0]
    assert sorted({float(r["counters/frames"]) for r in rows(resumed) if r.get("counters/frames")}) == [
        80.0, 120.0, 160.0]


def test_disk_full_at_the_first_checkpoint_names_it(capsys, tmp_path, monkeypatch):
    _fill_disk_at_save(monkeypatch, 1)
    expect_exit(capsys, ["fit", "--config", str(tiny_config(tmp_path / "tiny.yaml")), *QUIET], 4,
                "frames_000000040.ckpt", "none was there before", unchanged=None)
    (run,) = run_dirs()
    assert list((run / "checkpoints").iterdir()) == []


def _fill_disk_at_file(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """The n-th checkpoint or sidecar file written (1-based) finds the disk full after 1000 bytes. Unlike
    :func:`_fill_disk_at_save` this goes through torch.save's own zip writer, which turns the failed write into a
    RuntimeError of its own in its ``__exit__``."""
    fill_disk_at_file(n, lambda module, name, value: monkeypatch.setattr(module, name, value, raising=False))


# files written, MAPPO: iteration 1 → frames_…40.ckpt (1), last.ckpt (2); iteration 2 → frames_…80.ckpt (3), last.ckpt
# (4). MADDPG: a sidecar before each checkpoint, last.ckpt's a hard link to the periodic one's (not written again):
# frames_…40's sidecar (1), frames_…40.ckpt (2), last.ckpt (3); frames_…80's sidecar (4), frames_…80.ckpt (5), last (6)
#: what the message says of the file that was not written: a file of that name before, or none
NEW, KEPT = "checkpoint not written; none was there before", "checkpoint not written; the previous one is intact"


@pytest.mark.parametrize("algorithm, n, failing, said, before", [
    ("MAPPO", 1, "frames_000000040.ckpt", NEW, None),
    ("MAPPO", 2, "last.ckpt", NEW, None),
    ("MAPPO", 3, "frames_000000080.ckpt", NEW, 40),
    ("MAPPO", 4, "last.ckpt", KEPT, 40),
    ("MADDPG", 1, "frames_000000040.ckpt.buffers-", f"the replay buffers of frames_000000040.ckpt: {NEW}", None),
    ("MADDPG", 4, "frames_000000080.ckpt.buffers-", f"the replay buffers of frames_000000080.ckpt: {NEW}", 40),
    ("MADDPG", 5, "frames_000000080.ckpt", NEW, 40),
    ("MADDPG", 6, "last.ckpt", KEPT, 40),
])
def test_a_disk_that_fills_at_any_checkpoint_write_exits_4_keeping_the_previous_one(
        capsys, tmp_path, monkeypatch, algorithm, n, failing, said, before):
    """Issue 48: torch.save's zip writer turns the failed write into a RuntimeError, which the handler of OSError
    never saw: exit 1 and two tracebacks, where the README promises exit 4, one line and the last checkpoint whole."""
    config = tiny_config(tmp_path / "c.yaml") if algorithm == "MAPPO" else tiny_off_policy_config(tmp_path / "c.yaml")
    with monkeypatch.context() as patch:
        _fill_disk_at_file(patch, n)
        err = expect_exit(capsys, ["fit", "--config", str(config), *QUIET], 4,
                          "lit-marl: error: could not write", failing, "No space left on device", said,
                          "resume with --ckpt_path", unchanged=None)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    (run,) = run_dirs()
    checkpoints = run / "checkpoints"
    assert not list(checkpoints.glob(".*")), "a temporary file was left behind"
    if before is None:
        assert not (checkpoints / "last.ckpt").exists()
        assert not list(checkpoints.glob("*.buffers-*")), "a sidecar without its checkpoint was left behind"
        return
    assert read_checkpoint(checkpoints / "last.ckpt", verify_buffers=True)["lit_marl"]["frames"] == before
    for sidecar in checkpoints.glob("*.buffers-*"):  # each belongs to a checkpoint that names it
        owner = checkpoints / sidecar.name.split(".buffers-")[0]
        assert read_checkpoint(owner)["lit_marl"]["replay_buffers_sidecar"] == sidecar.name.split(".buffers-")[1]


def test_disk_full_at_a_metrics_write_exits_4_and_the_resume_writes_the_row(capsys, tmp_path, monkeypatch):
    import csv

    config = yaml.safe_load(tiny_config(tmp_path / "tiny.yaml").read_text())
    config["model"]["init_args"]["max_frames"] = 120
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(config))
    real, writes = csv.DictWriter.writerows, []

    def writerows(self, rows):
        rows = list(rows)
        if any(r.get("counters/iteration") == 2.0 for r in rows):  # iteration 2's training row
            raise OSError(errno.ENOSPC, "No space left on device")
        writes.append(rows)
        return real(self, rows)

    with monkeypatch.context() as patch:
        patch.setattr(csv.DictWriter, "writerows", writerows)
        expect_exit(capsys, ["fit", "--config", str(tmp_path / "tiny.yaml"), *QUIET], 4,
                    "could not write", "No space left on device", unchanged=None)
    (run,) = run_dirs()
    assert {float(r["counters/iteration"]) for r in rows(run) if r.get("counters/iteration")} == {1.0}
    last = run / "checkpoints" / "last.ckpt"
    assert read_checkpoint(last)["lit_marl"]["frames"] == 80  # written before the row
    main(["fit", "--config", str(run / "config.yaml"), "--ckpt_path", str(last), *QUIET])
    resumed = [r for r in run_dirs() if r != run][0]
    assert [float(r["counters/frames"]) for r in rows(resumed) if r.get("counters/iteration")] == [80.0, 120.0]
