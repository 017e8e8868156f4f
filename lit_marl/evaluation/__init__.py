"""Evaluation and results: standalone evaluation (``eval_info.json``), videos, paired comparisons.

- :func:`evaluate_checkpoint` / ``lit-marl test``: N seeded episodes of a checkpoint, per-episode records,
  aggregates with bootstrap CIs, provenance, videos of the first K episodes (:class:`EvaluationReport`).
- :func:`compare` / :func:`compare_checkpoints`: two checkpoints on the same episodes, paired difference with a CI.
- :class:`MarlEvalJson`: marl-eval's JSON during training, with the protocol's absolute metrics.
- :class:`CollectiveReward`: Melting Pot's collective reward per collected step and evaluation episode.
- :class:`CollectionExport`: training batches as memory-mapped TensorDicts (:func:`load_collections`).
- :mod:`lit_marl.evaluation.statistics`: the statistics (scipy's bootstrap).
"""

from lit_marl.evaluation.evaluate import (
    EVAL_INFO,
    EvaluationReport,
    algorithm_class,
    build_eval_info,
    compare,
    compare_checkpoints,
    evaluate_checkpoint,
    export_rollouts,
    load_episodes,
    read_eval_info,
)
from lit_marl.evaluation.collective import CollectiveReward
from lit_marl.data.evaluator import first_episode_mask
from lit_marl.evaluation.episodes import episode_records
from lit_marl.evaluation.export import CollectionExport, load_collections
from lit_marl.evaluation.marl_eval import MarlEvalJson

__all__ = [
    "EVAL_INFO",
    "EvaluationReport",
    "CollectionExport",
    "CollectiveReward",
    "load_collections",
    "algorithm_class",
    "build_eval_info",
    "compare",
    "compare_checkpoints",
    "episode_records",
    "evaluate_checkpoint",
    "export_rollouts",
    "first_episode_mask",
    "load_episodes",
    "MarlEvalJson",
    "read_eval_info",
]
