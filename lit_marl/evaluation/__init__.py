"""Evaluation results, offline: ``eval_info.json`` (per-episode records, aggregates with bootstrap CIs, provenance),
episode exports, paired comparisons, marl-eval files read back, statistics. The callbacks that write results during
a run live in :mod:`lit_marl.callbacks` (:class:`~lit_marl.callbacks.EvaluationReport`,
:class:`~lit_marl.callbacks.MarlEvalJson`, :class:`~lit_marl.callbacks.CollectiveReward`,
:class:`~lit_marl.callbacks.CollectionExport`); the runner that evaluates a checkpoint from Python,
:func:`lit_marl.evaluate.evaluate_checkpoint` (and :func:`~lit_marl.evaluate.compare_checkpoints`), sits above the
algorithms, in :mod:`lit_marl.evaluate`.

- :func:`compare`: two evaluations of the same episodes, paired difference with a CI.
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

#: the callbacks that lived here before they moved to :mod:`lit_marl.callbacks`: configs and benchmark folders written
#: with ``class_path: lit_marl.evaluation.<name>`` keep working (lit_marl.callbacks puts them back here when it loads,
#: as the CLI does before it reads a config)
MOVED_TO_CALLBACKS = ("EvaluationReport", "MarlEvalJson", "CollectiveReward", "CollectionExport")
#: the checkpoint runner, which moved above the algorithms it runs
MOVED_TO_EVALUATE = ("evaluate_checkpoint", "compare_checkpoints")


def __getattr__(name: str) -> Any:
    if name in MOVED_TO_CALLBACKS or name in MOVED_TO_EVALUATE:
        home = "lit_marl.callbacks" if name in MOVED_TO_CALLBACKS else "lit_marl.evaluate"
        raise AttributeError(f"lit_marl.evaluation.{name} moved to {home}: from {home} import {name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "EVAL_INFO",
    "build_eval_info",
    "compare",
    "episode_records",
    "export_rollouts",
    "first_episode_mask",
    "load_collections",
    "load_episodes",
    "read_eval_info",
]
