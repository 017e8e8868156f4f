"""What a NaN/Inf in training does: stop before it changes anything, or skip the update."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from typing_extensions import override

from lit_marl.errors import NumericalError, one_of

#: the values of the algorithms' ``nan_policy`` argument (``lit-marl fit --nan_policy``)
NAN_POLICIES = ("stop", "skip")


class NumericalFaultPolicy(pl.Callback):
    """Applies the algorithm's ``nan_policy`` to the faults its training step and gradient clipping find.

    ``"stop"``: a :class:`~lit_marl.errors.NumericalError` naming the group, term and iteration, raised before the
    optimizer step, so no weight changes and the last checkpoint stays as it was. ``"skip"``: that update is skipped
    (its ``update_skipped`` says so to per-step hooks such as priority and target updates) and counted in
    ``train/skipped_updates``. At every iteration's end, before any checkpoint callback, NaN/Inf weights (a finite
    but overflowing update) stop training too.
    """

    def __init__(self) -> None:
        self.skipped = 0
        #: whether the current optimizer step was skipped for a NaN/Inf (the algorithm's ``update_skipped`` reads it)
        self.update_skipped = False

    def fault(self, pl_module: pl.LightningModule, what: str, batch_idx: int) -> bool:
        """A NaN/Inf in this optimizer step: True to skip it, else raise :class:`NumericalError`."""
        policy = one_of("nan_policy", pl_module.nan_policy, NAN_POLICIES)
        where = f"at iteration {pl_module.iteration + 1} (frames {pl_module.frames}), minibatch {batch_idx}"
        if policy == "skip":
            self.skipped += 1
            self.update_skipped = True
            return True
        raise NumericalError(
            f"{what} {where}: training stopped before the update, so no weights were changed and the last "
            f"checkpoint is kept as it was; allowed: finite losses and gradients (lower lr, stronger "
            f"gradient_clip_val), or nan_policy='skip' (--nan_policy skip) to skip such updates"
        )

    def loss_fault(self, pl_module: pl.LightningModule, terms: list[tuple[str, str, torch.Tensor]],
                   total: torch.Tensor, batch_idx: int) -> bool:
        """Whether the training step's loss (``total`` of ``(group, name, value)`` terms) is NaN/Inf here or, under DDP,
        on any process: True to skip the step, else :meth:`fault` raises. One check (one device sync) per optimizer
        step; under DDP every process decides alike (else the others would wait in DDP's gradient all-reduce)."""
        faulty = not torch.isfinite(total.detach())
        trainer = pl_module.trainer
        if trainer.world_size > 1:
            faulty_somewhere = trainer.strategy.reduce_boolean_decision(faulty, all=False)
        else:
            faulty_somewhere = faulty
        if not faulty_somewhere:
            return False
        if faulty:
            group, name, value = next(t for t in terms if not torch.isfinite(t[2].detach()))
            return self.fault(pl_module, f"loss term {group}/{name} is {value.item()}", batch_idx)
        return self.fault(pl_module, "a loss term of another DDP process is NaN/Inf", batch_idx)

    @override
    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch, batch_idx: int) -> None:
        """A new optimizer step: not skipped until a fault says so."""
        self.update_skipped = False

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Record the iteration's skipped updates (``train/skipped_updates``, with ``nan_policy: skip``), then stop
        training with a :class:`~lit_marl.errors.NumericalError` where a weight holds NaN/Inf, before any checkpoint
        of this iteration is written."""
        # runs before the module's own epoch-end hook, whose metrics it joins, and before ModelCheckpoint
        if pl_module.nan_policy == "skip":
            pl_module.record("train/skipped_updates", float(self.skipped))
        self.skipped = 0
        for name, param in pl_module.named_parameters():
            if not torch.isfinite(param).all():
                raise NumericalError(
                    f"parameter {name} holds NaN/Inf after iteration {pl_module.iteration + 1} (frames "
                    f"{pl_module.frames}): training stopped before this iteration's checkpoint, so the last "
                    f"checkpoint is kept as it was; allowed: finite updates (lower lr, stronger gradient_clip_val)"
                )
