"""Whole ``lit-marl`` runs kept to seconds: a config shortened to one iteration, the tiny balance config, a tiny
benchmark grid, and what a finished run left behind (its folders, the frames its metrics reached)."""

from __future__ import annotations

import csv
from pathlib import Path

import yaml

from lit_marl.cli import main
from tests.helpers.tiny import CONFIGS

#: keeps any config to a one-iteration run of a few seconds
SHORT = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
         "--model.init_args.n_minibatch_iters", "1", "--trainer.check_val_every_n_epoch", "1"]
#: the same for off-policy configs (few optimizer steps, a small buffer)
SHORT_OFF_POLICY = [*SHORT[:4], "--model.init_args.n_optimizer_steps", "2", "--model.init_args.memory_size", "20000",
                    *SHORT[6:]]

#: a two-robot balance of 10-step episodes
BALANCE = {"class_path": "lit_marl.envs.VmasTask",
           "init_args": {"scenario": "balance", "max_steps": 10, "scenario_kwargs": {"n_agents": 2}}}


def fit_config(config, *extra) -> None:
    """``lit-marl fit --config config`` with SHORT (or SHORT_OFF_POLICY) before ``extra``."""
    init_args = yaml.safe_load(Path(config).read_text())["model"]["init_args"]
    short = SHORT_OFF_POLICY if "n_optimizer_steps" in init_args else SHORT
    main(["fit", "--config", str(config), *short, *extra])


def run_dirs() -> list[Path]:
    """The run folders under ./runs, sorted."""
    return sorted(p.parent for p in Path("runs").glob("*/version_*/config.yaml"))


def tiny_balance(path: Path) -> Path:
    """configs/quickstart.yaml shrunk to 40 frames per iteration, written to ``path``."""
    config = yaml.safe_load((CONFIGS / "quickstart.yaml").read_text())
    config["model"]["init_args"].update(frames_per_batch=40, num_envs=4, minibatch_size=20, max_frames=80,
                                        evaluation_episodes=2)
    config["model"]["init_args"]["task"]["init_args"]["max_steps"] = 10
    config["checkpoint"]["every_n_epochs"] = 1
    path.write_text(yaml.safe_dump(config))
    return path


def tiny_grid(tmp_path: Path, **changes) -> Path:
    """A benchmark grid of MAPPO on BALANCE, seeds 0 and 1, 400 frames each; ``changes`` replace its keys."""
    grid = {
        "name": "tiny",
        "output_dir": str(tmp_path / "bench"),
        "seeds": [0, 1],
        "algorithms": {"mappo": str(tiny_balance(tmp_path / "mappo.yaml"))},
        "tasks": {"balance": BALANCE},
        "overrides": {"model.init_args.max_frames": 400, "trainer.check_val_every_n_epoch": 5,
                      "checkpoint.every_n_epochs": 1, "model.init_args.n_minibatch_iters": 1},
    }
    grid.update(changes)
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(grid))
    return path


def metric_frames(metrics: Path) -> list[int]:
    """The frame counts a run's metrics.csv logged, sorted and each once."""
    return sorted({int(float(r["counters/frames"])) for r in csv.DictReader(open(metrics)) if r.get("counters/frames")})
