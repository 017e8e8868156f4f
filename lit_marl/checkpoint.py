"""Checkpoint files: atomic writes, and clear errors for missing, truncated or foreign files."""

from __future__ import annotations

import os
import pickle
import uuid
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


def _atomic_torch_save(obj: Any, path: Path) -> None:
    """``torch.save`` to ``.<name>.tmp-<pid>`` then rename over ``path``: never a half-written file."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


class AtomicCheckpointIO(TorchCheckpointIO):
    """Atomic checkpoint files, with replay buffers in a sidecar file.

    Replay buffers (``checkpoint["lit_marl"]["replay_buffers"]``) can be gigabytes; they go to
    ``<checkpoint>.buffers-<token>`` beside the checkpoint, which records the token. The sidecar is written
    before the checkpoint, each atomically, so a kill at any moment leaves a checkpoint whose sidecar
    exists; older sidecars of the same checkpoint are removed after it is replaced, and a checkpoint
    removed by ``ModelCheckpoint`` takes its sidecar with it. Both files load with ``weights_only=True``.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options=None) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = checkpoint.get("lit_marl", {})
        buffers = meta.pop("replay_buffers", None)
        token = None
        try:
            if buffers is not None:
                token = uuid.uuid4().hex[:12]
                _atomic_torch_save(buffers, _sidecar(path, token))
                meta["replay_buffers_sidecar"] = token
            _atomic_torch_save(checkpoint, path)
        finally:
            if buffers is not None:  # leave the caller's dict as it was
                meta["replay_buffers"] = buffers
                meta.pop("replay_buffers_sidecar", None)
        for old in _sidecars(path):
            if token is None or not old.name.endswith(token):
                old.unlink(missing_ok=True)

    def load_checkpoint(self, path, map_location=lambda storage, loc: storage, weights_only=None) -> dict[str, Any]:
        checkpoint = super().load_checkpoint(path, map_location=map_location, weights_only=weights_only)
        meta = checkpoint.get("lit_marl", {})
        token = meta.pop("replay_buffers_sidecar", None)
        if token is not None:
            sidecar = _sidecar(Path(path).resolve(), token)
            if not sidecar.is_file():
                raise CheckpointError(f"ckpt_path: the replay buffers of {str(path)!r} ({sidecar.name}) are missing")
            meta["replay_buffers"] = torch.load(sidecar, map_location="cpu", weights_only=True)
        return checkpoint

    def remove_checkpoint(self, path) -> None:
        for sidecar in _sidecars(Path(path)):
            sidecar.unlink(missing_ok=True)
        super().remove_checkpoint(path)


def _sidecar(path: Path, token: str) -> Path:
    return path.with_name(f"{path.name}.buffers-{token}")


def _sidecars(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.buffers-*"))


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
