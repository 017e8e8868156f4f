#!/usr/bin/env python3
"""Install Melting Pot's substrates (dm-meltingpot) where its asset server cannot be reached, without TensorFlow.

dm-meltingpot is published as a source distribution only, and two things in it get in the way of a plain
``pip install dm-meltingpot``:

- Its build step (``BuildPy`` in its ``setup.py``) downloads ``meltingpot-assets-<version>.tar.gz`` (the bots'
  saved TensorFlow models) from a host outside the package registries, unless that archive is already in the
  temporary folder (``tempfile.gettempdir()``: ``$TMPDIR`` or ``/tmp``). Where the host is unreachable the build
  fails, although substrates never read the assets: only the bots of Melting Pot's *scenarios* do.
- It requires TensorFlow (and keras, pandas, opencv), which only the bots and the evaluation tools import. In one
  Python with lit-marl, TensorFlow changes other packages' behaviour (TensorBoard's writer imports it).

So this script, standard library only (it runs before or after ``pip install -e ".[meltingpot]"``):

1. puts an asset archive in the build's cache: the real one, downloaded, unless ``--offline`` is given or the
   download fails within ``--timeout`` seconds; otherwise an *empty* one (only ``assets/`` and a note saying
   why). An archive already in the cache is kept as it is;
2. runs ``pip install --no-deps dm-meltingpot==<version>`` (skipped with ``--seed-only``). What the substrates
   import (dmlab2d, dm-env, dm-tree, chex, immutabledict, ml-collections, reactivex) is lit-marl's
   ``meltingpot`` extra.

With the empty archive every substrate works; scenarios with bots cannot load their saved models
(``meltingpot/assets/saved_models`` is missing) and need TensorFlow; for them, put the real archive in the
temporary folder and ``pip install --force-reinstall dm-meltingpot`` with its dependencies. ::

    pip install -e ".[meltingpot]"                  # the substrates' dependencies
    python scripts/install_meltingpot.py --offline  # dm-meltingpot itself (what CI does: never tries the network)

Exit code 0 when dm-meltingpot is installed (or, with ``--seed-only``, the cache holds an archive), else 1.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

#: the dm-meltingpot release lit-marl is tested with, and the asset version its setup.py builds with
MELTINGPOT_VERSION = "2.4.1"
ASSETS_VERSION = "2.3.0"
ARCHIVE_NAME = f"meltingpot-assets-{ASSETS_VERSION}.tar.gz"
ASSETS_URL = f"https://storage.googleapis.com/dm-meltingpot/{ARCHIVE_NAME}"
#: written into the empty archive, so an installed package shows why it has no bots
NOTE_NAME = "LIT_MARL_PLACEHOLDER.txt"
NOTE = (
    "Placeholder written by lit-marl's scripts/install_meltingpot.py: the Melting Pot asset archive\n"
    "could not be downloaded when dm-meltingpot was built. Substrates work; bot scenarios need the real\n"
    f"assets ({ARCHIVE_NAME}): put it in the temporary folder and reinstall dm-meltingpot.\n"
)


def cache_path(folder: str | os.PathLike | None = None) -> Path:
    """Where dm-meltingpot's build looks for a cached archive (the temporary folder of the building process)."""
    return Path(folder if folder is not None else tempfile.gettempdir()) / ARCHIVE_NAME


def empty_archive() -> bytes:
    """A gzipped tar holding only ``assets/`` and the placeholder note (what the build extracts and copies)."""
    buffer = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        folder = tarfile.TarInfo("assets")
        folder.type, folder.mode, folder.mtime = tarfile.DIRTYPE, 0o755, now
        tar.addfile(folder)
        data = NOTE.encode()
        note = tarfile.TarInfo(f"assets/{NOTE_NAME}")
        note.size, note.mode, note.mtime = len(data), 0o644, now
        tar.addfile(note, io.BytesIO(data))
    return buffer.getvalue()


def _write_atomic(path: Path, fill) -> None:
    """Write through ``fill(file)`` into a temporary file beside ``path``, then rename: a concurrent build never
    finds half an archive."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            fill(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def download(path: Path, timeout: float, url: str = ASSETS_URL) -> None:
    """Download the real archive to ``path`` (raises ``OSError`` when unreachable; URLError and timeouts are
    OSErrors)."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        _write_atomic(path, lambda f: shutil.copyfileobj(response, f, 1 << 20))


def seed(folder: str | os.PathLike | None = None, offline: bool = False, timeout: float = 20.0) -> tuple[Path, str]:
    """Put an asset archive in the build cache; returns its path and what was done (``kept``, ``downloaded`` or
    ``empty``)."""
    path = cache_path(folder)
    if path.is_file() and tarfile.is_tarfile(path):
        return path, "kept"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not offline:
        try:
            download(path, timeout)
            return path, "downloaded"
        except (OSError, urllib.error.URLError) as err:
            print(f"install_meltingpot: assets unreachable ({err}); writing an empty archive", file=sys.stderr)
    data = empty_archive()
    _write_atomic(path, lambda f: f.write(data))
    return path, "empty"


def pip_install(version: str = MELTINGPOT_VERSION, cache_dir: str | os.PathLike | None = None) -> int:
    """``pip install --no-deps dm-meltingpot==<version>`` in this Python, its build pointed at the seeded cache."""
    env = dict(os.environ)
    if cache_dir is not None:  # the build's tempfile.gettempdir() is the cache
        env["TMPDIR"] = str(cache_dir)
    command = [sys.executable, "-m", "pip", "install", "--no-deps", f"dm-meltingpot=={version}"]
    print("install_meltingpot: " + " ".join(command), flush=True)
    return subprocess.call(command, env=env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--offline", action="store_true",
                        help="do not try the download: write the empty archive unless one is cached already")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds to wait for the download to answer")
    parser.add_argument("--cache-dir", default=None,
                        help="the temporary folder the dm-meltingpot build reads the archive from (default: this "
                             "process's, $TMPDIR or /tmp)")
    parser.add_argument("--seed-only", action="store_true", help="only put the archive in the cache")
    parser.add_argument("--version", default=MELTINGPOT_VERSION, help="the dm-meltingpot release to install")
    args = parser.parse_args(argv)
    if args.timeout <= 0:
        parser.error(f"--timeout: must be a positive number of seconds, got {args.timeout}")
    path, action = seed(args.cache_dir, offline=args.offline, timeout=args.timeout)
    print(f"install_meltingpot: {action} {path}")
    if args.seed_only:
        return 0 if path.is_file() else 1
    return 0 if pip_install(args.version, args.cache_dir) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
