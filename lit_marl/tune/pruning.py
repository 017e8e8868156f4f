"""The pruning callback: inside a trial's ``lit-marl fit`` process, each evaluation goes to the study."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_info
from typing_extensions import override

from lit_marl.tune.journal import journal_storage
from lit_marl.tune.space import make_pruner

#: the trial's user attribute the callback sets when its pruner stopped the run (the worker reads it)
PRUNED_AT = "pruned_at_frames"


def open_trial(storage_path: str, study_name: str, trial_number: int):
    """The running trial ``trial_number`` of the study in the journal file ``storage_path``, with the study's pruner
    (kept in the study's ``pruner`` user attribute by ``lit-marl tune``)."""
    import optuna  # the optional extra ``tune``

    storage = journal_storage(storage_path)
    study_id = storage.get_study_id_from_name(study_name)
    pruner = make_pruner(storage.get_study_user_attrs(study_id).get("pruner", "none"))
    study = optuna.load_study(study_name=study_name, storage=storage, pruner=pruner)
    return optuna.Trial(study, storage.get_trial_id_from_study_id_trial_number(study_id, trial_number))


class TrialPruning(pl.Callback):
    """Reports every evaluation's ``monitor`` (``val/return``) to an Optuna trial, at the frames collected so far,
    and stops ``fit`` (``trainer.should_stop``: the iteration ends, checkpoints are written, the process exits 0)
    when the study's pruner prunes the trial, or when the trial is no longer running (its worker was declared gone).

    ``lit-marl tune`` adds it to the first seed's run of each trial; Lightning's own ``optuna-integration`` callback
    is not used: this one talks to the study through its journal file from a separate process.

    Args:
        storage: the study's journal file (``<study>/journal.log``).
        study_name: the study's name in it.
        trial_number: the trial this run belongs to.
        monitor: the evaluation metric reported.
    """

    def __init__(self, storage: str, study_name: str, trial_number: int, monitor: str = "val/return") -> None:
        self.storage = storage
        self.study_name = study_name
        self.trial_number = trial_number
        self.monitor = monitor
        self._trial: Any = None

    @property
    def trial(self):
        if self._trial is None:
            self._trial = open_trial(self.storage, self.study_name, self.trial_number)
        return self._trial

    def _decide(self, value: float, frames: int) -> str | None:
        """Report; the reason to stop, or None."""
        import optuna

        trial = self.trial
        try:
            trial.report(value, frames)
        except optuna.exceptions.UpdateFinishedTrialError:
            return "the trial is no longer running"
        if trial.should_prune():
            trial.set_user_attr(PRUNED_AT, frames)
            return "pruned"
        return None

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit":
            return
        value = trainer.callback_metrics.get(self.monitor)
        reason = None
        if trainer.is_global_zero and value is not None:
            reason = self._decide(float(value), int(pl_module.frames))
        reason = trainer.strategy.broadcast(reason, src=0)  # every DDP process stops together
        if reason is not None:
            rank_zero_info(f"lit-marl: trial {self.trial_number} {reason} at {pl_module.frames} frames "
                           f"({self.monitor} {float(value):.4g}); stopping")
            trainer.should_stop = True
