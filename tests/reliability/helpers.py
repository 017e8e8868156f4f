"""Shared pieces of the fault-injection suite: tiny CLI configs, run folders, the CLI's exit code and stderr."""

from __future__ import annotations

import csv
import hashlib
from pathlib import Path

import pytest
import yaml

from lit_marl.cli import main
from tests.helpers.tiny import CONFIGS

#: one-iteration-fast CLI flags (no progress bar, one PPO epoch, evaluation every iteration)
QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


def tiny_config(path: Path, **init_args) -> Path:
    """configs/quickstart.yaml shrunk to 40 frames per iteration (4 envs × 10 steps), a checkpoint every iteration."""
    config = yaml.safe_load((CONFIGS / "quickstart.yaml").read_text())
    config["model"]["init_args"].update(frames_per_batch=40, num_envs=4, minibatch_size=20, max_frames=80,
                                        evaluation_episodes=2, n_minibatch_iters=1, **init_args)
    config["model"]["init_args"]["task"]["init_args"]["max_steps"] = 10
    config["checkpoint"]["every_n_epochs"] = 1
    config.setdefault("trainer", {})["check_val_every_n_epoch"] = 1
    path.write_text(yaml.safe_dump(config))
    return path


def tiny_off_policy_config(path: Path) -> Path:
    """:func:`tiny_config`'s run with MADDPG: two iterations, a checkpoint after each with its replay-buffer sidecar
    (written before it)."""
    config = yaml.safe_load(tiny_config(path).read_text())
    init_args = config["model"]["init_args"]
    for key in ("minibatch_size", "n_minibatch_iters"):
        init_args.pop(key)
    init_args.update(n_optimizer_steps=2, train_batch_size=16, memory_size=200)
    config["model"]["class_path"] = "lit_marl.algorithms.MADDPG"
    path.write_text(yaml.safe_dump(config))
    return path


def run_dirs(root: Path = Path("runs")) -> list[Path]:
    return sorted(p.parent for p in root.glob("*/version_*/config.yaml"))


def rows(run: Path) -> list[dict[str, str]]:
    with open(run / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def digest(root: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def expect_exit(capsys, args: list[str], code: int, *fragments: str, unchanged: Path | None = Path("runs")) -> str:
    """Run ``lit-marl args``: it must exit with ``code``, print every fragment to stderr and (unless
    ``unchanged`` is None) leave the files under ``unchanged`` as they were."""
    before = digest(unchanged) if unchanged is not None and unchanged.exists() else {}
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = capsys.readouterr().err
    assert exit_info.value.code == code, (exit_info.value.code, err[-3000:])
    for fragment in fragments:
        assert fragment in err, (fragment, err[-3000:])
    if unchanged is not None:
        after = digest(unchanged) if unchanged.exists() else {}
        assert after == before, "a refused start wrote or changed files"
    return err
