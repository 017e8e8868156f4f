"""Checkpoint files: atomic writes, and clear errors for missing, truncated or foreign files."""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from lit_marl.errors import CheckpointError

#: version of the ``checkpoint["lit_marl"]`` layout
FORMAT_VERSION = 1
#: ``--ckpt_path`` values that Lightning resolves itself
LIGHTNING_CKPT_ALIASES = ("last", "best", "hpc", "registry")


class AtomicCheckpointIO(TorchCheckpointIO):
    """Writes ``<path>.tmp`` then renames it over ``<path>``: a kill never leaves a half-written file."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options=None) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        try:
            with open(tmp, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            if tmp.exists():
                tmp.unlink()


def read_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Load a lit-marl checkpoint with ``weights_only=True``; raise :class:`CheckpointError` if unusable."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"ckpt_path: {str(path)!r} does not exist (or is not a file)")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile, ValueError) as err:
        raise CheckpointError(
            f"ckpt_path: {str(path)!r} is not a readable checkpoint (truncated or corrupt?): {err}"
        ) from None
    if not isinstance(checkpoint, dict) or "lit_marl" not in checkpoint:
        raise CheckpointError(f"ckpt_path: {str(path)!r} is not a lit-marl checkpoint (no 'lit_marl' entry)")
    return checkpoint


def check_compatible(meta: dict[str, Any], algorithm: str, task_config: dict[str, Any], source: str) -> None:
    """Raise :class:`CheckpointError` when a checkpoint belongs to another algorithm or task."""
    if meta.get("format_version", 0) > FORMAT_VERSION:
        raise CheckpointError(
            f"{source}: written by a newer lit-marl (format {meta['format_version']}, this one reads {FORMAT_VERSION})"
        )
    if meta.get("algorithm") != algorithm:
        raise CheckpointError(
            f"{source}: checkpoint is for algorithm {meta.get('algorithm')!r}, but the model is {algorithm!r}"
        )
    if meta.get("task") != task_config:
        raise CheckpointError(
            f"{source}: checkpoint is for task {meta.get('task')!r}, but the model's task is {task_config!r}"
        )
