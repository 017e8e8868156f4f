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

from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from tensordict import TensorDictBase


class MarlCallback(Callback):
    """A Lightning callback with lit-marl's collection and evaluation hooks (no-ops by default)."""

    def on_batch_collected(self, trainer: Trainer, pl_module: LightningModule, batch: TensorDictBase) -> None:
        """Called with every collected batch."""

    def on_evaluation_end(self, trainer: Trainer, pl_module: LightningModule, episodes: list[TensorDictBase]) -> None:
        """Called with the rollouts of every evaluation."""


def call_marl_hook(trainer: Trainer | None, pl_module: LightningModule, name: str, *args: Any) -> None:
    """Call hook ``name`` on the module, then on every callback that defines it."""
    getattr(pl_module, name)(*args)
    if trainer is None:
        return
    for callback in trainer.callbacks:
        hook = getattr(callback, name, None)
        if callable(hook):
            hook(trainer, pl_module, *args)


from lit_marl.callbacks.collection_export import CollectionExport  # noqa: E402
from lit_marl.callbacks.collective import CollectiveReward  # noqa: E402
from lit_marl.callbacks.evaluation_report import EvaluationReport  # noqa: E402
from lit_marl.callbacks.frame_budget import FrameBudget  # noqa: E402
from lit_marl.callbacks.marl_eval import MarlEvalJson  # noqa: E402
from lit_marl.callbacks.metrics_file import MetricsFileRepair  # noqa: E402
from lit_marl.callbacks.numerics import NumericalFaultPolicy  # noqa: E402
from lit_marl.callbacks.preemption import PreemptionCheckpoint  # noqa: E402

__all__ = ["MarlCallback", "call_marl_hook", "FrameBudget", "MetricsFileRepair", "NumericalFaultPolicy",
           "PreemptionCheckpoint", "EvaluationReport", "MarlEvalJson", "CollectiveReward", "CollectionExport"]
