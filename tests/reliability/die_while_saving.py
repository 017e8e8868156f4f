"""``python -m tests.reliability.die_while_saving N <lit-marl args>``: ``lit-marl`` whose N-th checkpoint write
(1-based, counting sidecars) stops half-way through the file with a SIGKILL of its own process;
``after:N``: killed right after the N-th checkpoint file was renamed into place."""

from __future__ import annotations

import io
import os
import signal
import sys

import torch

from lit_marl.cli import main

_real_save = torch.save
_count = 0


def _dying_save(obj, f, *args, **kwargs):
    global _count
    _count += 1
    if _count < int(sys.argv[1]) or isinstance(f, (str, os.PathLike)):
        return _real_save(obj, f, *args, **kwargs)
    buffer = io.BytesIO()
    _real_save(obj, buffer, *args, **kwargs)
    data = buffer.getvalue()
    f.write(data[: len(data) // 2])
    f.flush()
    os.fsync(f.fileno())
    os.kill(os.getpid(), signal.SIGKILL)


def _dying_replace(src, dst):
    global _count
    _real_replace(src, dst)
    if not str(dst).endswith(".ckpt") and ".buffers-" not in str(dst):
        return  # metrics.csv's atomic rewrite goes through the same module
    _count += 1
    if _count == int(sys.argv[1].removeprefix("after:")):
        os.kill(os.getpid(), signal.SIGKILL)


_real_replace = os.replace
if sys.argv[1].startswith("after:"):
    from lit_marl import atomic  # every atomic write renames through this module

    atomic.os = type(os)("os_with_dying_replace")
    atomic.os.__dict__.update(os.__dict__)
    atomic.os.replace = _dying_replace
else:
    torch.save = _dying_save
main(sys.argv[2:])
