"""The standalone evaluation of checkpoints from Python and the ``lit-marl compare`` command. It sits above the
algorithms and the callbacks it runs, beside ``cli.py``; :mod:`lit_marl.evaluation` (the results it builds on)
imports neither.

:func:`evaluate_checkpoint` runs a test of one checkpoint, as ``lit-marl test`` does, with the
:class:`~lit_marl.callbacks.EvaluationReport` callback writing ``eval_info.json`` (and videos, an episode export) into a
new folder ``<run>/eval/<timestamp>/``; :func:`compare_checkpoints` evaluates two on the same episodes and pairs them
(:func:`~lit_marl.evaluation.eval_info.compare`); :func:`main` is ``lit-marl compare``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import lightning.pytorch as pl

from lit_marl.algorithms.registry import algorithm_class
from lit_marl.callbacks.evaluation_report import EvaluationReport
from lit_marl.checkpoint import read_checkpoint
from lit_marl.evaluation.eval_info import compare
from lit_marl.evaluation.io import write_json
from lit_marl.evaluation.statistics import CONFIDENCE


# ------------------------------------------------------------------------------------------- Python API
def evaluate_checkpoint(ckpt_path: str | os.PathLike, episodes: int | None = None, videos: int = 0,
                        deterministic: bool | None = None, start_seed: int | None = None,
                        batch_size: int | None = None, output_dir: str | os.PathLike | None = None,
                        export_episodes: bool = False, algorithm: type | None = None,
                        progress_bar: bool = False) -> dict[str, Any]:
    """Evaluate a checkpoint from Python, as ``lit-marl test`` does, and return its ``eval_info``.

    ``episodes``, ``deterministic``, ``start_seed`` and ``batch_size`` default to the checkpoint's
    ``test_episodes``, ``evaluation_deterministic``, ``evaluation_seed`` and ``evaluation_batch_size``. The
    result is also written to a new folder (``<run>/eval/<timestamp>/`` by default): ``result["folder"]``.

    Args:
        ckpt_path: a checkpoint of any lit-marl algorithm (``last.ckpt``, ``frames_*.ckpt``).
        episodes: test episodes, seeded from ``start_seed`` on (the same episodes for every checkpoint).
        videos: render the first ``videos`` episodes to mp4 (needs a task that renders, and PyAV).
        deterministic: the policy's mode (True) or sampled actions (False).
        start_seed: seed of the first batch of episodes.
        batch_size: episodes rolled out in parallel.
        output_dir: folder under which the new ``<timestamp>`` folder is made (default: ``<run>/eval``).
        export_episodes: also save the rollouts to ``episodes/`` (a memory-mapped TensorDict).
        algorithm: the class to load into (default: the algorithm the checkpoint names), e.g. a subclass of it.
        progress_bar: show Lightning's test progress bar.

    Returns:
        The ``eval_info`` written (:data:`~lit_marl.evaluation.EVAL_INFO`), with per-episode records, aggregates
        with bootstrap confidence intervals, provenance, and ``"folder"``.

    Examples:
        >>> info = evaluate_checkpoint("runs/quickstart/version_0/checkpoints/last.ckpt", episodes=50)
        >>> info["aggregated"]["return"]["iqm"]  # {"value": ..., "ci_low": ..., "ci_high": ...}
    """
    meta = read_checkpoint(ckpt_path)["lit_marl"]
    cls = algorithm or algorithm_class(meta["algorithm"])
    overrides: dict[str, Any] = {}
    if episodes is not None:
        overrides["test_episodes"] = episodes
    if deterministic is not None:
        overrides["evaluation_deterministic"] = bool(deterministic)
    if start_seed is not None:
        overrides["evaluation_seed"] = int(start_seed)
    if batch_size is not None:
        overrides["evaluation_batch_size"] = batch_size
    module = cls.load_from_checkpoint(str(ckpt_path), map_location="cpu", weights_only=True, **overrides)
    report = EvaluationReport(videos=videos, output_dir=None if output_dir is None else str(output_dir),
                              export_episodes=export_episodes, checkpoint=str(ckpt_path))
    trainer = pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=progress_bar,
                         enable_model_summary=False, callbacks=[report], accelerator="cpu", devices=1,
                         default_root_dir=str(Path(ckpt_path).resolve().parent))
    trainer.test(module, verbose=False)
    result = dict(report.result)
    result["folder"] = str(report.folder)
    return result


def compare_checkpoints(a: str | os.PathLike, b: str | os.PathLike, episodes: int = 100, **kwargs: Any) -> dict[str, Any]:
    """Evaluate two checkpoints on the same ``episodes`` seeded episodes and compare them, episode by episode
    (:func:`~lit_marl.evaluation.compare`: the paired difference of returns and its bootstrap confidence interval).

    ``kwargs`` are :func:`evaluate_checkpoint`'s (``start_seed`` defaults to 10 000, ``batch_size`` to all episodes
    at once), the same for both checkpoints.
    """
    kwargs.setdefault("start_seed", 10_000)
    kwargs.setdefault("batch_size", episodes)
    info_a = evaluate_checkpoint(a, episodes=episodes, **kwargs)
    info_b = evaluate_checkpoint(b, episodes=episodes, **kwargs)
    return compare(info_a, info_b)


def main(argv: list[str]) -> int:
    """``lit-marl compare A B [--out FILE]``: paired comparison of two ``eval_info.json`` (or their folders)."""

    parser = argparse.ArgumentParser(prog="lit-marl compare", description=compare.__doc__.split("\n\n")[0])
    parser.add_argument("a", help="eval_info.json of A (or its folder)")
    parser.add_argument("b", help="eval_info.json of B (or its folder)")
    parser.add_argument("--out", default=None, help="also write the result to this JSON file (a new file)")
    args = parser.parse_args(argv)
    result = compare(args.a, args.b)
    diff = result["mean_difference"]
    print(f"A - B mean return difference over {result['episodes']} paired episodes: {diff['value']:.4f} "
          f"[{diff['ci_low']:.4f}, {diff['ci_high']:.4f}] ({CONFIDENCE:.0%} CI); A better in "
          f"{result['a_better_fraction']:.0%} of episodes")
    verdict = "A beats B" if diff["ci_low"] > 0 else "B beats A" if diff["ci_high"] < 0 else "no clear difference"
    print(verdict)
    if args.out:
        write_json(args.out, result)
    return 0
