"""Files of evaluation results: written atomically, never over an existing one; provenance of a result."""

from __future__ import annotations

import hashlib
import os
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from lit_marl.atomic import write_atomic, write_json  # noqa: F401  (re-exported: result writers import them here)
from lit_marl.errors import ConfigError


def new_folder(parent: str | os.PathLike, name: str | None = None) -> Path:
    """Create and return a folder that did not exist: ``parent/<name or timestamp>``, with ``-1``, ``-2``…
    appended when that name is taken (``mkdir`` without ``exist_ok`` makes the choice race-free)."""
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    base = name or time.strftime("%Y%m%d-%H%M%S")
    for n in range(10_000):
        candidate = parent / (base if n == 0 else f"{base}-{n}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
    raise ConfigError(f"output: no free folder name {base!r} under {str(parent)!r}")


def sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def provenance(env_family: str, checkpoint: str | os.PathLike | None, config: dict[str, Any]) -> dict[str, Any]:
    """What produced a result: package versions, the checkpoint's path and SHA-256, the resolved config."""
    versions = {name: package_version(name) for name in ("lit-marl", "torch", "torchrl", "tensordict", "lightning")}
    versions[env_family] = package_version(env_family)
    return {
        "versions": versions,
        "checkpoint": None if checkpoint is None else str(checkpoint),
        "checkpoint_sha256": None if checkpoint is None else sha256(checkpoint),
        "config": config,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
