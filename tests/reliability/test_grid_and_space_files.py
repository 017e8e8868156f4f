"""Issue 34: a grid given to ``lit-marl benchmark`` and a search space given to ``lit-marl tune`` that cannot be used
(a Markdown file, broken YAML, a checkpoint, a folder, a list) are refused in one line naming the file and what is
wrong with it, exit 2, before anything runs; no traceback. Issue 48: so is a key given twice (YAML keeps the last
one silently: a second ``mappo:`` would train another config under the name mappo)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch

from lit_marl.cli import main
from tests.helpers.runs import tiny_balance, tiny_grid

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


def test_a_key_given_twice_in_a_grid_is_refused_with_its_lines(tmp_path, capsys):
    grid = tiny_grid(tmp_path, name="tiny", seeds=[0], algorithms={"mappo": "mappo.yaml"})
    lines = grid.read_text().splitlines()
    at = lines.index("algorithms:") + 1  # a second mappo, another config: HATRPO would train under the name mappo
    (tmp_path / "hatrpo.yaml").write_text((tmp_path / "mappo.yaml").read_text().replace("MAPPO", "HATRPO"))
    lines.insert(at + 1, "  mappo: hatrpo.yaml")
    grid.write_text("\n".join(lines) + "\n")
    err = _refused(capsys, ["benchmark", "--config", str(grid), "--dry_run"])
    assert (f"config: {str(grid)!r} is a YAML file with the key 'algorithms.mappo' twice (lines {at + 1} and "
            f"{at + 2}): YAML keeps only the last, silently; allowed: each key once") in err, err
    assert not (tmp_path / "bench").exists()


def test_a_key_given_twice_deeper_in_a_grid_or_its_config_is_refused(tmp_path, capsys):
    grid = tiny_grid(tmp_path, seeds=[0])
    text = grid.read_text()
    grid.write_text(text.replace("  model.init_args.max_frames: 400\n",
                                 "  model.init_args.max_frames: 400\n  model.init_args.max_frames: 4000000\n"))
    err = _refused(capsys, ["benchmark", "--config", str(grid), "--dry_run"])
    assert "the key 'overrides.model.init_args.max_frames' twice" in err, err
    grid.write_text(text)
    config = tiny_balance(tmp_path / "mappo.yaml")
    config.write_text(config.read_text() + "seed_everything: 1\nseed_everything: 2\n")
    err = _refused(capsys, ["benchmark", "--config", str(grid), "--dry_run"])
    assert f"algorithms.mappo.config: {str(config)!r} is a YAML file with the key 'seed_everything' twice" in err, err


def test_a_key_given_twice_in_a_search_space_is_refused(tmp_path, capsys):
    pytest.importorskip("optuna")
    space = _text(tmp_path / "space.yaml", "space:\n  model.init_args.lr: {low: 1.0e-4, high: 1.0e-2, log: true}\n"
                                           "  model.init_args.lr: {choices: [1.0e-3]}\n")
    err = _refused(capsys, ["tune", "--config", str(ROOT / "configs" / "quickstart.yaml"), "--space", str(space),
                            "--dry_run", "--out", str(tmp_path / "study")])
    assert f"space: {str(space)!r} is a YAML file with the key 'space.model.init_args.lr' twice (lines 2 and 3)" in err


def test_a_key_given_twice_in_a_fit_config_is_refused(tmp_path, capsys):
    """jsonargparse reads a config as PyYAML does: the second ``lr:`` would win, silently."""
    config = tiny_balance(tmp_path / "tiny.yaml")
    config.write_text(config.read_text().replace("model:\n", "model:\n  class_path: lit_marl.algorithms.IPPO\n", 1))
    at = config.read_text().splitlines().index("model:") + 2  # the line of the first class_path (1-based)
    err = _refused(capsys, ["fit", "--config", str(config), "--print_config"])
    assert (f"--config {str(config)!r} is a YAML file with the key 'model.class_path' twice (lines {at} and "
            f"{at + 1}): YAML keeps only the last, silently") in err, err
