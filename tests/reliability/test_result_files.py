"""Every input file of ``lit-marl report``, ``compare``, ``test`` and ``export`` that cannot be used is refused with
one line naming the file, what is wrong with it (truncated, empty, not JSON or YAML, binary, a checkpoint where
JSON belongs, JSON where a checkpoint belongs, the wrong shape, missing) and what is allowed: exit code 2, never a
traceback.

The table holds 31 bad inputs (``test_case_count``): report's marl-eval JSON (7), its ``--normalisation`` file (4)
and a run folder's config.yaml and metrics.csv (6), compare's eval_info.json (8), and the ``--ckpt_path`` of test
and export (3 each). Every valid input is a hand-written file; nothing is trained.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest
import torch

from lit_marl.cli import main
from tests.reliability.helpers import tiny_config
from tests.evaluation.test_report import _run_folder, _synthetic_benchmark


def _checkpoint_bytes() -> bytes:
    """What torch.save writes (a zip archive), as a lit-marl checkpoint would be."""
    buffer = io.BytesIO()
    torch.save({"lit_marl": {"format_version": 1}, "state_dict": {"w": torch.zeros(2)}}, buffer)
    return buffer.getvalue()


EVAL_INFO = json.dumps({"task": "vmas/balance", "per_episode": [{"seed": 0, "env_index": i, "return": 0.5 * i}
                                                                for i in range(3)],
                        "provenance": {"checkpoint": "last.ckpt"}}, indent=2)
MARL_EVAL = json.dumps({"vmas": {"balance": {"mappo": {"seed_0": {
    "step_0": {"step_count": 100, "return": [1.0, 2.0]},
    "absolute_metrics": {"step_count": 100, "return": [2.0] * 4}}}}}}, indent=2)
REFERENCE = json.dumps({"vmas/balance": {"min": 0.0, "max": 10.0}, "vmas/navigation": {"min": 0.0, "max": 1.0}})

#: JSON files gone bad: kind -> (content from the valid text, the problem the message must name)
BAD_JSON: dict[str, tuple[Callable[[str], bytes], str]] = {
    "truncated": (lambda valid: valid[: len(valid) * 2 // 3].encode(), "is truncated"),
    "empty": (lambda valid: b"", "is empty"),
    "not JSON": (lambda valid: b"task: vmas/balance\nper_episode: []\n", "is not JSON"),
    "binary": (lambda valid: bytes(range(256)) * 4, "is binary, not JSON"),
    "checkpoint": (lambda valid: _checkpoint_bytes(), "is a checkpoint (zip archive"),
}


class Case(NamedTuple):
    """One bad input: ``setup(tmp_path)`` writes the valid files and the bad one, and returns the command line and
    the bad file's path; ``problem`` is what the message must say of it."""

    id: str
    setup: Callable[[Path], tuple[list[str], Path]]
    problem: str


def _write(path: Path, content: bytes | None) -> Path:
    """``content`` at ``path`` (None: no file there)."""
    if content is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return path


# ------------------------------------------------------------------------------------------- report
def _report_marl_eval(content: bytes | None) -> Callable[[Path], tuple[list[str], Path]]:
    def setup(tmp: Path) -> tuple[list[str], Path]:
        if content is None:  # a folder that is not there
            return ["report", str(tmp / "bench"), "--out", str(tmp / "report")], tmp / "bench"
        bad = _write(tmp / "bench" / "vmas" / "balance" / "marl_eval.json", content)
        return ["report", str(tmp / "bench"), "--out", str(tmp / "report")], bad
    return setup


def _report_reference(content: bytes) -> Callable[[Path], tuple[list[str], Path]]:
    def setup(tmp: Path) -> tuple[list[str], Path]:
        _synthetic_benchmark(tmp / "bench")
        bad = _write(tmp / "reference.json", content)
        return ["report", str(tmp / "bench"), "--out", str(tmp / "report"), "--normalisation", str(bad)], bad
    return setup


def _report_run_folder(name: str, content: bytes) -> Callable[[Path], tuple[list[str], Path]]:
    def setup(tmp: Path) -> tuple[list[str], Path]:
        folder = tmp / "runs" / "a" / "version_0"
        _run_folder(folder, "lit_marl.algorithms.MAPPO", 0, [1.0, 2.0])
        return ["report", str(tmp / "runs"), "--out", str(tmp / "report")], _write(folder / name, content)
    return setup


REPORT = [
    *[Case(f"report-marl_eval-{kind}", _report_marl_eval(bad(MARL_EVAL)), problem)
      for kind, (bad, problem) in BAD_JSON.items()],
    Case("report-marl_eval-wrong-shape", _report_marl_eval(b'{"vmas": {"balance": {"mappo": [1.0, 2.0]}}}'),
         "is of the wrong shape (vmas/balance/mappo is a list, not an object of seed_<s>s)"),
    Case("report-missing", _report_marl_eval(None), "is missing"),
    *[Case(f"report-normalisation-{kind}", _report_reference(BAD_JSON[kind][0](REFERENCE)), BAD_JSON[kind][1])
      for kind in ("truncated", "empty", "binary", "checkpoint")],
    Case("report-config-binary", _report_run_folder("config.yaml", _checkpoint_bytes()),
         "is a checkpoint (zip archive, as torch.save writes), not YAML"),
    Case("report-config-not-YAML", _report_run_folder("config.yaml", b"model: {class_path: [\n"), "is not YAML"),
    Case("report-config-wrong-shape", _report_run_folder("config.yaml", b"- model\n- seed_everything\n"),
         "is of the wrong shape (a list where a mapping belongs)"),
    Case("report-config-empty", _report_run_folder("config.yaml", b"\n"), "is empty"),
    Case("report-metrics-binary", _report_run_folder("metrics.csv", b"counters/frames,val/return\n\xff\xfe1,2\n"),
         "is binary, not text"),
    Case("report-metrics-wrong-shape", _report_run_folder("metrics.csv", b"counters/frames,val/return\n100,high\n"),
         "is of the wrong shape (row 1: counters/frames '100' or val/return 'high' is not a number)"),
]


# ------------------------------------------------------------------------------------------ compare
def _compare(content: bytes | None, folder: bool = False) -> Callable[[Path], tuple[list[str], Path]]:
    def setup(tmp: Path) -> tuple[list[str], Path]:
        good = _write(tmp / "a" / "eval_info.json", EVAL_INFO.encode())
        (tmp / "b").mkdir()
        bad = _write(tmp / "b" / "eval_info.json", content)
        return ["compare", str(good), str(bad.parent if folder else bad)], bad
    return setup


COMPARE = [
    *[Case(f"compare-{kind}", _compare(bad(EVAL_INFO)), problem) for kind, (bad, problem) in BAD_JSON.items()],
    Case("compare-wrong-shape", _compare(json.dumps([json.loads(EVAL_INFO)]).encode()),
         "is of the wrong shape (a list where an object belongs)"),
    Case("compare-no-episodes", _compare(b'{"task": "vmas/balance", "per_episode": [{"seed": 0}], "provenance": {}}'),
         "is of the wrong shape ('per_episode' is not a list of episodes"),
    Case("compare-folder-without-eval_info", _compare(None, folder=True), "is missing"),
]


# -------------------------------------------------------------------------------------- test, export
def _ckpt_path(command: str, content: bytes | None) -> Callable[[Path], tuple[list[str], Path]]:
    def setup(tmp: Path) -> tuple[list[str], Path]:
        bad = _write(tmp / "eval" / ("eval_info.json" if content and content.startswith(b"{") else "last.ckpt"),
                     content)
        if command == "test":
            return ["test", "--config", str(tiny_config(tmp / "tiny.yaml")), "--ckpt_path", str(bad)], bad
        return ["export", "--ckpt_path", str(bad), "--format", "exported"], bad
    return setup


CHECKPOINTS = [
    Case(f"{command}-{kind}", _ckpt_path(command, content), problem)
    for command in ("test", "export")
    for kind, content, problem in (
        ("JSON-where-a-checkpoint-belongs", EVAL_INFO.encode(), "is JSON text, not a checkpoint"),
        ("empty", b"", "is empty"),
        ("missing", None, "does not exist (or is not a file); allowed: a checkpoint written by lit-marl fit"),
    )
]

CASES = [*REPORT, *COMPARE, *CHECKPOINTS]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_bad_result_file_is_named_with_what_is_wrong_and_what_is_allowed(tmp_path, capsys, case):
    args, bad = case.setup(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert "Traceback" not in err, err
    (line,) = [line for line in err.splitlines() if line.startswith("lit-marl: error: ")]
    assert f"{str(bad)!r} {case.problem}" in line, line
    assert "; allowed: " in line, line
    assert not (tmp_path / "report").exists()  # a refused report writes nothing


def test_case_count():
    """The size of the table (stated in the module docstring and reported in issue 22)."""
    print(f"bad result-file cases: {len(REPORT)} report, {len(COMPARE)} compare, {len(CHECKPOINTS)} test/export "
          f"= {len(CASES)}")
    assert (len(REPORT), len(COMPARE), len(CHECKPOINTS), len(CASES)) == (17, 8, 6, 31)
    assert len({c.id for c in CASES}) == len(CASES)
