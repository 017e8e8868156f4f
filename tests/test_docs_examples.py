"""Every example in the documentation runs as written (tests/helpers/docs_examples.py: which blocks, and how a ``lit-marl``
line is kept small): each page's Python blocks in one process, each ``lit-marl`` line of a bash block through bash,
in a fresh folder holding ``configs/``, with real finished runs behind the placeholders ``runs/<run>``, ``runs/<a>``,
``runs/<b>`` and ``<eval>``."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.docs_examples import ROOT, command_lines, pages, plain_fit, python_pages, skipped_blocks

pytestmark = pytest.mark.docs

SMALL_LIT_MARL = Path(__file__).parent / "helpers" / "lit_marl_small.py"
#: the tiny run behind ``runs/<run>``: quickstart's MAPPO on balance, one 20-frame iteration
TINY = ["--model.init_args.num_envs", "2", "--model.init_args.frames_per_batch", "20",
        "--model.init_args.minibatch_size", "20", "--model.init_args.max_frames", "20",
        "--model.init_args.evaluation_episodes", "1", "--model.init_args.task.init_args.max_steps", "10",
        "--trainer.enable_progress_bar", "false"]


def _env(bin_dir: Path) -> dict[str, str]:
    return dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", OMP_NUM_THREADS="1",
                PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))


@pytest.fixture(scope="session")
def bin_dir(tmp_path_factory) -> Path:
    """A folder whose ``lit-marl`` is tests/helpers/lit_marl_small.py."""
    folder = tmp_path_factory.mktemp("bin")
    script = folder / "lit-marl"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} {SMALL_LIT_MARL} \"$@\"\n")
    script.chmod(0o755)
    return folder


@pytest.fixture(scope="session")
def placeholders(tmp_path_factory, bin_dir) -> dict[str, str]:
    """Two finished tiny runs and an evaluation of the first: what the docs' placeholders stand for."""
    home = tmp_path_factory.mktemp("docs_runs")
    (home / "configs").symlink_to(ROOT / "configs")
    for _ in range(2):
        subprocess.run([sys.executable, "-m", "lit_marl", "fit", "--config", "configs/quickstart.yaml", *TINY],
                       cwd=home, env=_env(bin_dir), check=True, capture_output=True)
    run_a, run_b = sorted((home / "runs" / "quickstart").glob("version_*"))
    evaluations = []
    for run in (run_a, run_b):
        subprocess.run([sys.executable, "-m", "lit_marl", "test", "--config", str(run / "config.yaml"),
                        "--ckpt_path", str(run / "checkpoints" / "last.ckpt"), "--model.init_args.test_episodes",
                        "2"], cwd=home, env=_env(bin_dir), check=True, capture_output=True)
        (evaluation,) = (run / "eval").iterdir()
        evaluations.append(evaluation)
    return {"runs/<run>": str(run_a), "runs/<a>": str(run_a), "runs/<b>": str(run_b),
            "<eval_b>": str(evaluations[1]), "<eval>": str(evaluations[0])}


@pytest.fixture(scope="session")
def benchmark_folder(tmp_path_factory, bin_dir) -> Path:
    """A finished tiny benchmark (tests/helpers/runs.py's grid: MAPPO on a two-robot balance, seeds 0 and 1)."""
    from tests.helpers.runs import tiny_grid

    home = tmp_path_factory.mktemp("docs_benchmark")
    grid = tiny_grid(home, overrides={"model.init_args.max_frames": 80, "trainer.check_val_every_n_epoch": 1,
                                      "checkpoint.every_n_epochs": 1, "model.init_args.n_minibatch_iters": 1})
    subprocess.run([sys.executable, "-m", "lit_marl", "benchmark", "--config", str(grid), "--in_process"], cwd=home,
                   env=_env(bin_dir), check=True, capture_output=True)
    return home / "bench" / "tiny"


def _report_folders(command: str, work: Path, request) -> None:
    """A ``lit-marl report FOLDER`` whose folder is not there reads the tiny benchmark, linked at that path."""
    words = shlex.split(command, comments=True)
    for i, word in enumerate(words[:-1]):
        if word == "lit-marl" and words[i + 1] == "report" and i + 2 < len(words):
            folder = work / words[i + 2]
            if not words[i + 2].startswith("-") and not folder.exists():
                folder.parent.mkdir(parents=True, exist_ok=True)
                folder.symlink_to(request.getfixturevalue("benchmark_folder"))


def _substitute(text: str, placeholders: dict[str, str]) -> str:
    for name, value in placeholders.items():
        text = text.replace(name, value)
    return text


def _folder(tmp_path: Path) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    return tmp_path


def _check(result: subprocess.CompletedProcess, where: str) -> None:
    assert result.returncode == 0, (f"{where} exited {result.returncode}\n--- stdout (end)\n{result.stdout[-3000:]}"
                                    f"\n--- stderr (end)\n{result.stderr[-6000:]}")


@pytest.mark.parametrize("page", list(python_pages()), ids=lambda p: str(p.relative_to(ROOT)))
def test_python_examples_run(page, tmp_path, placeholders, bin_dir):
    """The page's Python blocks, in order, in one process."""
    code = "\n".join(f"# --- {b.where}\n{_substitute(b.text, placeholders)}" for b in python_pages()[page])
    script = tmp_path / "page.py"
    script.write_text(code)
    result = subprocess.run([sys.executable, str(script)], cwd=_folder(tmp_path / "work"), env=_env(bin_dir),
                            capture_output=True, text=True, timeout=900)
    _check(result, str(page.relative_to(ROOT)))


@pytest.mark.parametrize("block,command", command_lines(), ids=[f"{b.where}:{c[:60]}" for b, c in command_lines()])
def test_command_runs(block, command, tmp_path, placeholders, bin_dir, request):
    """The ``lit-marl`` line as written (kept small), through bash. A plain ``lit-marl fit --config configs/X.yaml``
    is the run ``tests/test_cli.py::test_every_config_runs_one_small_iteration`` makes of every shipped config (in
    the default suite): here it must name one of those configs."""
    config = plain_fit(command)
    if config is not None:
        from tests.test_cli import CONFIGS

        assert (CONFIGS / config).is_file(), f"{block.where}: {command} names no shipped config"
        return
    work = _folder(tmp_path / "work")
    _report_folders(_substitute(command, placeholders), work, request)
    result = subprocess.run(["bash", "-eo", "pipefail", "-c", _substitute(command, placeholders)], cwd=work,
                            env=_env(bin_dir), capture_output=True, text=True, timeout=900)
    _check(result, f"{block.where}: {command}")


def test_the_docs_have_examples_and_every_skip_says_why():
    """The collection above is not empty (a parser that found nothing would pass everything), and each block a page
    leaves out gives its reason."""
    assert len(pages()) >= 10
    assert python_pages() and command_lines()
    for block in skipped_blocks():
        assert len(block.skip.split()) >= 2, f"{block.where}: give the reason a block is not run"
