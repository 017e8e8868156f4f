"""What one run of a benchmark grid leaves in its folder, read and written the same way by every launcher (here and
on SLURM): its config (``run_config.yaml``), the ``lit-marl fit`` process that runs it, its newest ``last.ckpt`` (a
resume starts there; one at its ``max_frames`` means finished), ``finished.json`` and the metrics it ends with."""

from __future__ import annotations

import csv
import importlib
import inspect
import json
import sys
import time
from pathlib import Path
from typing import Any

from lit_marl.checkpoint import read_checkpoint
from lit_marl.errors import ConfigError
from lit_marl.evaluation.io import write_json

FINISHED = "finished.json"
RUN_CONFIG = "run_config.yaml"


def latest_checkpoint(folder: Path) -> Path | None:
    """The ``last.ckpt`` of the newest ``train/version_<n>`` of a run folder that has one (a resume starts there)."""
    checkpoints = sorted(folder.glob("train/version_*/checkpoints/last.ckpt"),
                         key=lambda p: int(p.parent.parent.name.split("_")[1]))
    return checkpoints[-1] if checkpoints else None


def max_frames_of(config: dict[str, Any]) -> int | None:
    """A run config's frame budget: ``model.init_args.max_frames``, else its algorithm's default."""
    model = config.get("model") or {}
    init_args = model.get("init_args") or {}
    if init_args.get("max_frames") is not None:
        return int(init_args["max_frames"])
    module_name, _, cls_name = str(model.get("class_path", "")).rpartition(".")
    try:
        algorithm = getattr(importlib.import_module(module_name), cls_name)
        default = inspect.signature(algorithm.__init__).parameters["max_frames"].default
    except (ImportError, AttributeError, ValueError, KeyError):
        return None
    return None if default is inspect.Parameter.empty or default is None else int(default)


def at_budget(checkpoint: Path, config: dict[str, Any]) -> bool:
    """Whether ``checkpoint`` (a run's newest ``last.ckpt``) has collected the run config's ``max_frames``: the run
    finished. An unreadable checkpoint is not (the resume refuses it by name)."""
    budget = max_frames_of(config)
    if budget is None:
        return False
    try:
        frames = int(read_checkpoint(checkpoint)["lit_marl"].get("frames", 0))
    except (ConfigError, OSError, KeyError, TypeError, ValueError):
        return False
    return frames >= budget


def fit_command(folder: Path, resumed_from: Path | None) -> list[str]:
    """The ``lit-marl fit`` process of one run (every launcher starts this one)."""
    cmd = [sys.executable, "-m", "lit_marl.cli", "fit", "--config", str(folder / RUN_CONFIG)]
    if resumed_from is not None:
        cmd += ["--ckpt_path", str(resumed_from)]
    return cmd


def write_finished(folder: Path, started: float | None, seconds: float | None, resumed_from: Path | None,
                   recorded_late: bool = False) -> dict[str, Any]:
    """``finished.json`` of a run whose ``fit`` ended with exit 0 (a later launch skips the run); returns it. With
    ``recorded_late``, written by a later launch that found the run's ``last.ckpt`` at its budget (its launcher was
    stopped between the fit's end and this file): ``resumed_from`` is then that checkpoint, the times unknown."""
    info = {**final_metrics(folder), "started": started, "ended": None if recorded_late else time.time(),
            "seconds": seconds, "resumed_from": None if resumed_from is None or recorded_late else str(resumed_from)}
    if recorded_late:
        info["recorded_late"] = True
        info["checkpoint"] = str(resumed_from)
    write_json(folder / FINISHED, info)
    return info


def final_metrics(folder: Path) -> dict[str, Any]:
    """Frames and last ``val/return`` from the newest metrics.csv, and the absolute metric, of one run."""
    info: dict[str, Any] = {}
    for metrics in sorted(folder.glob("train/version_*/metrics.csv"), key=lambda p: int(p.parent.name.split("_")[1])):
        for row in csv.DictReader(open(metrics)):
            if row.get("counters/frames"):
                info["frames"] = int(float(row["counters/frames"]))
            if row.get("val/return"):
                info["val_return"] = float(row["val/return"])
    marl_eval = folder / "marl_eval.json"
    if marl_eval.is_file():
        data = json.loads(marl_eval.read_text())
        for env in data.values():
            for task in env.values():
                for alg in task.values():
                    for seed in alg.values():
                        if "absolute_metrics" in seed:
                            returns = seed["absolute_metrics"]["return"]
                            info["absolute_return"] = sum(returns) / len(returns)
    return info
