"""Atomic writes: the one way lit-marl writes a result file or folder.

Everything goes to a hidden temporary sibling first (``.<name>.tmp-<pid>.<thread><suffix>``, on the same file
system) and is renamed over the target in one step, so a reader — or a resumed run after a kill — sees either
the old file or the new one, never half of one. A temporary left behind by a SIGKILL is hidden and never read.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lit_marl.errors import ConfigError


def _refuse_existing(path: Path) -> None:
    raise ConfigError(f"output: {str(path)!r} already exists and is not overwritten; allowed: a new path")


@contextmanager
def atomic_target(path: str | os.PathLike, overwrite: bool = True) -> Iterator[Path]:
    """Yield a temporary path to write ``path``'s content to (a file, or a folder such as a memory-mapped
    TensorDict); when the block ends without error, it is synced and renamed over ``path``; on error it is removed.

    With ``overwrite=False`` an existing ``path`` is refused (:class:`ConfigError`), before and after writing."""
    path = Path(path)
    if not overwrite and path.exists():
        _refuse_existing(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # the target's suffix last: writers such as matplotlib and PyAV choose the format by it
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}.{threading.get_ident()}{path.suffix}")
    try:
        yield tmp
        if tmp.is_file():
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        if not overwrite and path.exists():  # appeared while writing
            _refuse_existing(path)
        os.replace(tmp, path)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()


def write_atomic(path: str | os.PathLike, data: bytes | str, overwrite: bool = False) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` atomically; an existing ``path`` is refused unless ``overwrite``."""
    with atomic_target(path, overwrite=overwrite) as tmp:
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)
    return Path(path)


def write_json(path: str | os.PathLike, obj: Any, overwrite: bool = False) -> Path:
    """``obj`` as indented JSON, atomically (NaN/inf become ``null``: strict JSON readers refuse them)."""
    return write_atomic(path, json.dumps(_finite(obj), indent=2) + "\n", overwrite=overwrite)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and (obj != obj or obj in (float("inf"), float("-inf"))):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj
