"""Evaluation results, offline: standalone evaluation (``eval_info.json``), episode exports, paired comparisons,
marl-eval files read back, statistics. The callbacks that write results during a run live in
:mod:`lit_marl.callbacks` (:class:`~lit_marl.callbacks.EvaluationReport`, :class:`~lit_marl.callbacks.MarlEvalJson`,
:class:`~lit_marl.callbacks.CollectiveReward`, :class:`~lit_marl.callbacks.CollectionExport`).

- :func:`evaluate_checkpoint` / ``lit-marl test``: N seeded episodes of a checkpoint, per-episode records,
  aggregates with bootstrap CIs, provenance, videos of the first K episodes.
- :func:`compare` / :func:`compare_checkpoints`: two checkpoints on the same episodes, paired difference with a CI.
- :func:`load_episodes` / :func:`load_collections`: exported evaluation episodes / training batches.
- :mod:`lit_marl.evaluation.statistics`: the statistics (scipy's bootstrap); :mod:`~lit_marl.evaluation.results`:
  marl-eval files to ``lit-marl report``'s tables.
"""

from __future__ import annotations

from typing import Any

from lit_marl.data.evaluator import first_episode_mask
from lit_marl.evaluation.episodes import episode_records
from lit_marl.evaluation.eval_info import (
    EVAL_INFO,
    build_eval_info,
    compare,
    export_rollouts,
    load_collections,
    load_episodes,
    read_eval_info,
)
from lit_marl.evaluation.evaluate import compare_checkpoints, evaluate_checkpoint

#: the callbacks that lived here before they moved to :mod:`lit_marl.callbacks`: configs and benchmark folders written
#: with ``class_path: lit_marl.evaluation.<name>`` keep working
MOVED_TO_CALLBACKS = ("EvaluationReport", "MarlEvalJson", "CollectiveReward", "CollectionExport")


def __getattr__(name: str) -> Any:
    if name in MOVED_TO_CALLBACKS:  # looked up on use, so this package never imports the callbacks at load time
        import lit_marl.callbacks

        return getattr(lit_marl.callbacks, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "EVAL_INFO",
    "build_eval_info",
    "compare",
    "compare_checkpoints",
    "episode_records",
    "evaluate_checkpoint",
    "export_rollouts",
    "first_episode_mask",
    "load_collections",
    "load_episodes",
    "read_eval_info",
]
