"""Issue 34: a grid given to ``lit-marl benchmark`` and a search space given to ``lit-marl tune`` that cannot be used
(a Markdown file, broken YAML, a checkpoint, a folder, a list) are refused in one line naming the file and what is
wrong with it, exit 2, before anything runs; no traceback."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch

from lit_marl.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _checkpoint(path: Path) -> Path:
    buffer = io.BytesIO()
    torch.save({"state_dict": {"w": torch.zeros(2)}}, buffer)
    path.write_bytes(buffer.getvalue())
    return path


def _text(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


BAD_FILES = {
    "markdown": (lambda tmp: _text(tmp / "README.md", "# lit-marl\n\n```bash\npip install: -e .\n```\n: x\n"),
                 "is not YAML"),
    "broken YAML": (lambda tmp: _text(tmp / "grid.yaml", "tasks: [a, b\nseeds: 3\n"),
                    "is not YAML (expected ',' or ']'"),
    "checkpoint": (lambda tmp: _checkpoint(tmp / "last.ckpt"), "is a checkpoint (zip archive"),
    "folder": (lambda tmp: tmp, "is a folder, not a file"),
    "missing": (lambda tmp: tmp / "nope.yaml", "is missing (no such file)"),
}


def _refused(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_a_bad_grid_file_is_refused_by_name(kind, tmp_path, capsys):
    make, problem = BAD_FILES[kind]
    path = make(tmp_path)
    err = _refused(capsys, ["benchmark", "--config", str(path), "--dry_run"])
    assert f"config: {str(path)!r} {problem}" in err, err
    assert "allowed: a YAML file holding a mapping" in err


def test_a_grid_that_is_a_list_is_refused_by_name(tmp_path, capsys):
    path = tmp_path / "grid.yaml"
    path.write_text("- a\n- b\n")
    err = _refused(capsys, ["benchmark", "--config", str(path), "--dry_run"])
    assert "is of the wrong shape (a list, not a mapping)" in err, err


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_a_bad_search_space_is_refused_by_name(kind, tmp_path, capsys):
    pytest.importorskip("optuna")
    make, problem = BAD_FILES[kind]
    path = make(tmp_path)
    err = _refused(capsys, ["tune", "--config", str(ROOT / "configs" / "quickstart.yaml"), "--space", str(path),
                            "--dry_run", "--out", str(tmp_path / "study")])
    assert f"space: {str(path)!r} {problem}" in err, err
