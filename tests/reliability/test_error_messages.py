"""Errors lead with the field: for bad input, the first line ``lit-marl`` prints to stderr is its own one-line message
naming the field (and the value and what is allowed, the closest accepted keys, or the YAML file, line and tab),
not jsonargparse's usage block; the exit code is 2 and nothing is written (issue 22)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lit_marl.algorithms import MAPPO
from lit_marl.errors import ConfigError
from tests.helpers.tiny import CONFIGS, tiny_kwargs, tiny_task
from tests.reliability.helpers import QUIET, expect_exit, tiny_config

QUICKSTART = str(CONFIGS / "quickstart.yaml")


def _quickstart_with(path: Path, old: str, new: str) -> Path:
    """configs/quickstart.yaml with one line changed (``old`` → ``new``); returns the new file."""
    text = (CONFIGS / "quickstart.yaml").read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))
    return path


def _line_of(path: Path, fragment: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if fragment in line)


# (id, command-line arguments after `fit --config quickstart.yaml`, fragments of the first line of stderr)
COMMAND_LINE_CASES = [
    ("wrong type", ["--model.init_args.lr", "abc"], ["model.init_args.lr: 'abc' is not a number", "float"]),
    ("unknown key", ["--model.init_args.lrr", "1e-3"], ["model.init_args.lrr: unknown key", "did you mean 'lr'?"]),
    ("nested unknown key", ["--model.init_args.actor_model.init_args.num_cellz", "[8]"],
     ["model.init_args.actor_model.init_args.num_cellz: unknown key", "did you mean 'num_cells'"]),
    ("task unknown key", ["--model.init_args.task.init_args.max_stepz", "10"],
     ["model.init_args.task.init_args.max_stepz: unknown key", "did you mean 'max_steps'"]),
    ("trainer unknown key", ["--trainer.max_epochz", "3"], ["trainer.max_epochz: unknown key", "'max_epochs'"]),
    ("trainer wrong type", ["--trainer.max_epochs", "abc"], ["trainer.max_epochs: 'abc' is not an integer"]),
    ("choice", ["--nan_policy", "skipp"], ["nan_policy: 'skipp' is not one of 'stop', 'skip'", "did you mean 'skip'"]),
    ("class typo", ["--model.class_path", "lit_marl.algorithms.MAPO"],
     ["model.class_path: 'lit_marl.algorithms.MAPO'", "did you mean 'lit_marl.algorithms.MAPPO'"]),
    ("scenario typo", ["--model.init_args.task.init_args.scenario", "balanse"],
     ["task.scenario: unknown VMAS scenario 'balanse'", "did you mean 'balance'"]),
]


def _first_error_line(err: str) -> str:
    """The first line of stderr, after Lightning's own "Seed set to" log (which precedes building the model)."""
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("Seed set to")]
    assert lines, err
    return lines[0]


def _expect_first_line(capsys, args: list[str], *fragments: str) -> str:
    err = expect_exit(capsys, args, 2)
    first = _first_error_line(err)
    assert first.startswith("lit-marl: error: "), err[:3000]
    for fragment in fragments:
        assert fragment in first, (fragment, first)
    assert "usage:" not in err.split(first)[0]
    return first


@pytest.mark.parametrize(("args", "fragments"), [pytest.param(a, f, id=i) for i, a, f in COMMAND_LINE_CASES])
def test_command_line_error_leads_with_the_field(capsys, args, fragments):
    _expect_first_line(capsys, ["fit", "--config", QUICKSTART, *args], *fragments)


def test_error_keeps_jsonargparse_report_after_the_line(capsys):
    err = expect_exit(capsys, ["fit", "--config", QUICKSTART, "--model.init_args.lr", "abc"], 2)
    first, *rest = err.splitlines()
    assert first.startswith("lit-marl: error: model.init_args.lr")
    assert "Expected a <class 'float'>. Got value: abc" in "\n".join(rest)  # the detail, below
    assert not any(line.startswith("usage:") for line in err.splitlines())  # the usage block is left to --help


def test_unknown_key_in_a_config_file_names_it(capsys, tmp_path):
    config = _quickstart_with(tmp_path / "typo.yaml", "    lr: 3.0e-04", "    lrr: 3.0e-04")
    _expect_first_line(capsys, ["fit", "--config", str(config)], "model.init_args.lrr: unknown key",
                       "did you mean 'lr'?")
    config = _quickstart_with(tmp_path / "typo_trainer.yaml", "  log_every_n_steps: 1", "  log_every_n_stepz: 1")
    _expect_first_line(capsys, ["fit", "--config", str(config)], "trainer.log_every_n_stepz: unknown key",
                       "did you mean 'log_every_n_steps'")


def test_yaml_tab_names_file_line_and_tab(capsys, tmp_path):
    config = _quickstart_with(tmp_path / "tabbed.yaml", "        max_steps: 100", "\tmax_steps: 100")
    line = _line_of(config, "max_steps: 100")
    _expect_first_line(capsys, ["fit", "--config", str(config)], "tabbed.yaml", f"line {line}:", "tab")


def test_yaml_syntax_error_names_file_and_line(capsys, tmp_path):
    config = _quickstart_with(tmp_path / "broken.yaml", "    lr: 3.0e-04", "    lr: [3.0e-04")
    line = _line_of(config, "lr: [3.0e-04")
    first = _expect_first_line(capsys, ["fit", "--config", str(config)], "broken.yaml", "line ")
    assert f"line {line}" in first or f"line {line + 1}" in first, first  # where PyYAML noticed: that line or the next


def test_missing_task_names_the_field(capsys, tmp_path):
    config = tmp_path / "no_task.yaml"
    config.write_text("model:\n  class_path: lit_marl.algorithms.MAPPO\n")
    _expect_first_line(capsys, ["fit", "--config", str(config)], "model.init_args.task: required")


def test_budget_smaller_than_one_batch_is_refused_by_name(capsys, tmp_path):
    config = tiny_config(tmp_path / "tiny.yaml")  # 40 frames per iteration
    _expect_first_line(capsys, ["fit", "--config", str(config), *QUIET, "--model.init_args.max_frames", "20"],
                       "max_frames: 20", "frames_per_batch=40", "max_frames >= frames_per_batch")
    with pytest.raises(ConfigError, match=r"^max_frames: 20 is smaller than frames_per_batch=40"):
        MAPPO(tiny_task(), **tiny_kwargs(max_frames=20))
    MAPPO(tiny_task(), **tiny_kwargs(max_frames=40))  # one whole iteration is allowed
