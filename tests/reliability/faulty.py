"""Algorithms with injected numerical faults, and a disk that fills, importable by class path from a CLI config."""

from __future__ import annotations

import errno
import io

import torch
from lightning.pytorch import Callback

from lit_marl.algorithms import MADDPG, MAPPO, QMIX, VDN


class FaultyLoss:
    """Mixin: the algorithm's loss goes wrong in chosen iterations (1-based).

    Args:
        fault_iterations: iterations whose optimizer steps see the fault.
        fault: ``"nan_loss"`` (loss_critic is NaN), ``"inf_loss"`` (loss_objective is +Inf) or ``"nan_grad"`` (a
            finite extra term, ``loss_sqrt = sqrt(0 · Σθ_actor)``, whose gradient is NaN).
        fault_steps: how many optimizer steps of each such iteration (from its first); None: all of them.
    """

    def __init__(self, *args, fault_iterations: list[int] | None = None, fault: str = "nan_loss",
                 fault_steps: int | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fault_iterations = list(fault_iterations or [])
        self.fault = fault
        self.fault_steps = fault_steps
        self._faulty_steps = 0

    def loss(self, group, batch):
        terms = super().loss(group, batch)
        if self.iteration + 1 not in self.fault_iterations:
            self._faulty_steps = 0
            return terms
        if self.fault_steps is not None and self._faulty_steps >= self.fault_steps:
            return terms
        self._faulty_steps += 1
        if self.fault == "nan_loss":
            name = next(n for n in ("loss_critic", "loss_value", "loss") if n in terms.keys())
            terms[name] = terms[name] * float("nan")
        elif self.fault == "inf_loss":
            terms["loss_objective"] = terms["loss_objective"] + float("inf")
        else:
            actor_weight = next(self.policies[group].parameters())
            terms["loss_sqrt"] = torch.sqrt(0.0 * actor_weight.sum())
        return terms


class FaultyMAPPO(FaultyLoss, MAPPO):
    """MAPPO with :class:`FaultyLoss`."""


class FaultyVDN(FaultyLoss, VDN):
    """VDN with :class:`FaultyLoss` (``nan_loss`` only)."""


class FaultyQMIX(FaultyLoss, QMIX):
    """QMIX with :class:`FaultyLoss` (``nan_loss`` only)."""


class FaultyMADDPG(FaultyLoss, MADDPG):
    """MADDPG with :class:`FaultyLoss` (``nan_loss`` only)."""


class FullDiskFile(io.FileIO):
    """A file on a disk with ``room`` bytes left: the write that goes past it fails as the kernel's does."""

    room = 1000

    def write(self, data) -> int:
        if self.tell() + len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(data)


def fill_disk_at_file(n: int, setattr_=setattr) -> None:
    """From now on, the n-th checkpoint or sidecar file this process writes (1-based) finds the disk full after 1000
    bytes, inside torch.save's own zip writer (``setattr_``: a monkeypatch's, to undo it after a test)."""
    from lit_marl import sidecars

    opened = []

    def open_(file, mode="r", *args, **kwargs):
        opened.append(file)
        if "w" in mode and len(opened) == n:
            return FullDiskFile(file, "wb")
        return open(file, mode, *args, **kwargs)

    setattr_(sidecars, "open", open_)


class FullDiskOnRank(Callback):
    """Callback: on process ``rank`` of a run, the ``write``-th checkpoint or sidecar file finds the disk full
    (:func:`fill_disk_at_file`); for DDP runs started from a CLI config."""

    def __init__(self, rank: int, write: int) -> None:
        self.rank, self.write = rank, write

    def setup(self, trainer, pl_module, stage: str) -> None:
        if trainer.global_rank == self.rank:
            fill_disk_at_file(self.write)
