"""Trainer callbacks, and the hooks lit-marl adds for research code.

Every algorithm brings four callbacks of its own (``MarlAlgorithm.configure_callbacks``): :class:`FrameBudget`,
:class:`NumericalFaultPolicy`, :class:`MetricsFileRepair` and :class:`PreemptionCheckpoint`. Four more write results
during a run, built by :mod:`lit_marl.evaluation`: :class:`EvaluationReport` (``eval_info.json`` and videos; the CLI's
``--evaluation.*``), :class:`MarlEvalJson` (marl-eval's JSON), :class:`CollectiveReward` (Melting Pot's collective
reward) and :class:`CollectionExport` (training batches as memory-mapped TensorDicts).

Any Lightning callback may define these methods; the algorithm calls them (after the module's own
hook of the same name):

``on_batch_collected(trainer, pl_module, batch)``
    after every collection, with the raw batch ``[num_envs, steps]`` (before ``process_batch``);
    like BenchMARL's ``on_batch_collected``. Mutating the batch changes what is trained on.
``on_evaluation_end(trainer, pl_module, episodes)``
    after every evaluation (validation or test), with the list of evaluation rollouts (one
    TensorDict ``[num_envs, max_steps]`` per evaluation batch, with a boolean ``("episode", "mask")``
    marking real steps); like BenchMARL's ``on_evaluation_end``.
"""

from __future__ import annotations

import lit_marl.evaluation as _evaluation
from lit_marl.callbacks.collection_export import CollectionExport
from lit_marl.callbacks.collective import CollectiveReward
from lit_marl.callbacks.evaluation_report import EvaluationReport
from lit_marl.callbacks.frame_budget import FrameBudget
from lit_marl.callbacks.hooks import MarlCallback, call_marl_hook
from lit_marl.callbacks.marl_eval import MarlEvalJson
from lit_marl.callbacks.metrics_file import MetricsFileRepair
from lit_marl.callbacks.numerics import NumericalFaultPolicy
from lit_marl.callbacks.preemption import PreemptionCheckpoint

__all__ = ["MarlCallback", "call_marl_hook", "FrameBudget", "MetricsFileRepair", "NumericalFaultPolicy",
           "PreemptionCheckpoint", "EvaluationReport", "MarlEvalJson", "CollectiveReward", "CollectionExport"]

# configs written when these lived in lit_marl.evaluation (class_path: lit_marl.evaluation.EvaluationReport) still
# resolve: the names are put back there whenever the callbacks load (the CLI loads them before it reads a config)
for _name in _evaluation.MOVED_TO_CALLBACKS:
    setattr(_evaluation, _name, globals()[_name])
