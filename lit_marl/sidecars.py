"""Replay buffers' files beside a checkpoint (the "sidecars"): one per checkpoint from a single process
(:class:`~lit_marl.checkpoint.AtomicCheckpointIO` names it), one per process under DDP (each process writes its own);
each written atomically, and a checkpoint of the same state as the one saved before it gets a hard link to that
file instead of a second copy (:class:`SidecarLinks`). Each is checked against its archive's CRC-32s before it is
loaded (:func:`damaged_sidecar`): ``torch.load`` checks none, so bytes changed on disk would load as other replay
values; a hard link is one file under two names, so the refusal names both."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_warn

from lit_marl.atomic import atomic_target
from lit_marl.data.replay import buffer_state
from lit_marl.errors import CheckpointError


def atomic_torch_save(obj: Any, path: Path, checkpoint: Path | None = None) -> None:
    """``torch.save`` through :func:`~lit_marl.atomic.atomic_target`: never a half-written file. A write that fails
    (disk full, read-only, no permission) raises an ``OSError`` naming ``path`` (not the temporary file) and whether
    the ``checkpoint`` it belongs to (``path`` itself, or the checkpoint of a sidecar) is still there, whole."""
    try:
        with atomic_target(path) as tmp, open(tmp, "wb") as f:
            torch.save(obj, f)
    except (OSError, RuntimeError) as err:
        cause = write_error(err)
        if cause is None:
            raise
        checkpoint = checkpoint or path
        kept = "the previous one is intact" if checkpoint.exists() else "none was there before"
        part = "" if checkpoint == path else f"the replay buffers of {checkpoint.name}: "
        raise OSError(cause.errno, f"{cause.strerror or cause} ({part}checkpoint not written; {kept})",
                      str(path)) from err


def write_error(err: BaseException) -> OSError | None:
    """The ``OSError`` behind ``err``, or None. A write that fails inside ``torch.save`` (the disk full at the n-th
    tensor) reaches its zip writer, which raises a ``RuntimeError`` of its own in its ``__exit__`` ("unexpected
    pos …"): the ``OSError`` is only its context."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, OSError):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


#: ``checkpoint["lit_marl"]`` key of the state the replay buffers are saved at (``<buffers id>:<buffers_token>``);
#: read and dropped by lit-marl's writers, never stored in a file they write
BUFFERS_STATE = "replay_buffers_at"


def buffers_token(frames: int, global_step: int) -> str:
    """The training state of a run's replay buffers: its frame and optimizer-step counters. A buffer changes only by
    collecting (frames) and by the new priorities after an optimizer step (steps); samplers keep no other state."""
    return f"f{int(frames)}s{int(global_step)}"


class SidecarLinks:
    """Replay-buffer files written by one process, by the run and training state they hold (:data:`BUFFERS_STATE`).

    Lightning saves ``last.ckpt`` right after the periodic checkpoint of the same iteration; its replay buffers
    (gigabytes for a long off-policy run) are the same, so the second file is a hard link to the first: written
    once, stored once, and still two names that ``ModelCheckpoint`` removes one at a time. Where the file system
    has no hard links, or the earlier file is gone, the buffers are written again."""

    def __init__(self) -> None:
        self._last: tuple[str, Path] | None = None

    def save(self, buffers: Any, target: Path, state: str | None, checkpoint: Path | None = None) -> None:
        """Write ``buffers`` to ``target`` (the sidecar of ``checkpoint``), or link it to the last file written of the
        same ``state``."""
        last, self._last = self._last, None
        if state is None or last is None or last[0] != state or not _hard_link(last[1], target):
            atomic_torch_save(buffers, target, checkpoint)
        if state is not None:
            self._last = (state, target)


def _hard_link(source: Path, target: Path) -> bool:
    """``target`` as a second name of ``source``, atomically; False where that cannot be done."""
    try:
        with atomic_target(target) as tmp:
            os.link(source, tmp)
    except OSError:
        return False
    return True


def sidecar_path(path: Path, token: str) -> Path:
    """The single-process sidecar of the checkpoint at ``path`` for one save (``token``)."""
    return path.with_name(f"{path.name}.buffers-{token}")


def sidecar_paths(path: Path) -> list[Path]:
    """Every single-process sidecar of the checkpoint at ``path``."""
    # per-process buffers of a DDP run (``.rank<r>``) are written by save_buffers_per_process
    return sorted(p for p in path.parent.glob(f"{path.name}.buffers-*") if ".rank" not in p.name)


def buffers_meta(buffers: dict[str, Any], world_size: int, token: str) -> dict[str, Any]:
    """What a checkpoint's ``lit_marl`` entry holds of the replay buffers: their state by group, or, under DDP, where
    each process writes its own (:func:`save_buffers_per_process`) and their state to write there."""
    state = {group: buffer_state(buffer) for group, buffer in buffers.items()}
    if world_size > 1:
        return {"rank_buffers_state": state, "rank_buffers": {"world_size": world_size, "token": token}}
    return {"replay_buffers": state}


#: sidecars found whole, by (path, inode, size, mtime): the CLI checks a resume's sidecar before the run starts and
#: the checkpoint IO loads it later in the same process; one read of a file that did not change is enough
_WHOLE: set[tuple[str, int, int, int]] = set()


def damage(sidecar: Path) -> str | None:
    """What is damaged in the zip archive (``torch.save``'s format) at ``sidecar``; None where every member matches
    the CRC-32 its archive recorded. ``torch.load`` checks no CRC: random bytes written inside a tensor's member load as
    other values (issue 48), so the file is read once more here: 0.37 s for a 1 GiB sidecar (page cache warm, one core;
    its ``torch.load`` took 0.57 s)."""
    try:
        stat = sidecar.stat()
        key = (str(sidecar.resolve()), stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if key in _WHOLE:
            return None
        with zipfile.ZipFile(sidecar) as archive:
            bad = archive.testzip()
    except Exception as err:  # a damaged directory or header fails in zipfile anywhere
        return f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0][:200]}"
    if bad is not None:
        return f"its member {bad!r} fails its CRC-32 check (bytes changed on disk)"
    _WHOLE.add(key)
    return None


def other_names(path: Path) -> list[str]:
    """The other names of the file at ``path`` in its folder (hard links: :class:`SidecarLinks`)."""
    try:
        stat = path.stat()
        if stat.st_nlink < 2:
            return []
        return sorted(p.name for p in path.parent.iterdir() if p != path and p.is_file()
                      and (p.stat().st_dev, p.stat().st_ino) == (stat.st_dev, stat.st_ino))
    except OSError:
        return []


def damaged_sidecar(sidecar: Path, what: str) -> str | None:
    """The refusal of a damaged ``sidecar`` (``what``: whose replay buffers it holds), naming the member that fails
    and every other name of the same file, whose checkpoints are damaged with it; None where it is whole."""
    problem = damage(sidecar)
    if problem is None:
        return None
    linked = other_names(sidecar)
    shared = (f"; it is one file with {', '.join(linked)} (a hard link: lit-marl stores the replay buffers of "
              f"last.ckpt and of the periodic checkpoint of the same iteration once), so those are damaged too"
              if linked else "")
    return (f"ckpt_path: {what} ({sidecar.name}) are damaged: {problem}{shared}; nothing was loaded. Allowed: resume "
            f"from an earlier checkpoint whose replay buffers are whole (another *.ckpt in {str(sidecar.parent)!r}), "
            f"or start a new run (a checkpoint without its replay buffers is refused: deleting the file does not help)")


def rank_buffers(saved: dict[str, Any], ckpt_path: Path, rank: int, world_size: int) -> dict[str, Any] | None:
    """Process ``rank``'s replay buffers of a DDP checkpoint (``saved``: its ``rank_buffers`` entry), read from their
    sidecar file; None, with a warning, where the checkpoint was written by another number of processes.

    A missing or damaged sidecar is refused on every process, naming each one at fault: each process tells the others
    (:func:`gather_objects`), which would otherwise wait for it in their first collective."""
    if saved["world_size"] != world_size:
        rank_zero_warn(f"lit-marl: the checkpoint's replay buffers belong to {saved['world_size']} processes and "
                       f"this run has {world_size}; training continues with empty buffers")
        return None
    sidecar = rank_sidecar(ckpt_path, saved["token"], rank)
    what = f"the replay buffers of process {rank} of {str(ckpt_path)!r}"
    if not sidecar.is_file():
        problem = (f"ckpt_path: the replay buffers of process {rank} ({sidecar.name}) are missing beside "
                   f"{str(ckpt_path)!r}; allowed: the checkpoint with its .rank<r> files")
    else:
        problem = damaged_sidecar(sidecar, what)
    problems = [p for p in gather_objects(problem) if p]
    if problems:
        raise CheckpointError(" | ".join(problems))
    try:
        return torch.load(sidecar, map_location="cpu", weights_only=True)
    except Exception as err:  # whole by its CRCs, yet not torch.save's (another program's zip)
        raise CheckpointError(f"ckpt_path: {what} ({sidecar.name}) are not readable: {type(err).__name__}: "
                              f"{(str(err).strip().splitlines() or [''])[0][:200]}; allowed: the .rank<r> files as "
                              f"lit-marl wrote them") from None


def gather_objects(obj: Any) -> list[Any]:
    """Every process's ``obj`` (a collective: each process calls it); ``[obj]`` outside a process group."""
    if not torch.distributed.is_initialized():
        return [obj]
    gathered: list[Any] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(gathered, obj)
    return gathered


def _together(write: Any) -> None:
    """``write()`` on every process; where it fails on any (an ``OSError``: disk full), every process raises the
    first failure, so none waits for the others in a later collective."""
    failure = None
    try:
        write()
    except OSError as err:
        failure = (err.errno, err.strerror, err.filename)
    failures = [f for f in gather_objects(failure) if f is not None]
    if failures:
        raise OSError(*failures[0])


def rank_sidecar(path: Path, token: str, rank: int) -> Path:
    """Where DDP process ``rank`` keeps its replay buffers for the checkpoint at ``path`` (token: its save)."""
    return path.with_name(f"{path.name}.buffers-{token}.rank{rank}")


def save_buffers_per_process(strategy: Any) -> None:
    """Under DDP every process has its own replay buffers. Lightning writes a checkpoint from process 0 only, so
    each process writes its buffers beside it (``<checkpoint>.buffers-<token>.rank<r>``, atomically, before
    process 0 writes the checkpoint that names the token); process 0 removes older ones, and those of a
    checkpoint it removes.

    A write that fails (disk full) on one process stops every process with its ``OSError``, naming the file: each
    tells the others after the sidecars and after the checkpoint (:func:`gather_objects`, in place of a barrier).
    Before, the others waited for it in their next collective (gloo: a traceback; NCCL: until the timeout)."""
    if getattr(strategy, "_lit_marl_rank_buffers", False):
        return
    save, remove = strategy.save_checkpoint, strategy.remove_checkpoint
    links = SidecarLinks()

    def save_checkpoint(checkpoint: dict[str, Any], filepath, storage_options=None) -> None:
        meta = checkpoint.get("lit_marl", {})
        buffers, token = meta.pop("rank_buffers_state", None), meta.get("rank_buffers", {}).get("token")
        state = meta.pop(BUFFERS_STATE, None)
        if buffers is not None:
            Path(filepath).parent.mkdir(parents=True, exist_ok=True)
            _together(lambda: links.save(buffers, rank_sidecar(Path(filepath), token, strategy.global_rank), state,
                                         Path(filepath)))  # every process's buffers are on disk
        _together(lambda: save(checkpoint, filepath, storage_options))
        if strategy.is_global_zero and token is not None:
            for old in Path(filepath).parent.glob(f"{Path(filepath).name}.buffers-*.rank*"):
                if f".buffers-{token}.rank" not in old.name:
                    old.unlink(missing_ok=True)

    def remove_checkpoint(filepath) -> None:
        remove(filepath)
        if strategy.is_global_zero:
            for old in Path(filepath).parent.glob(f"{Path(filepath).name}.buffers-*.rank*"):
                old.unlink(missing_ok=True)

    strategy.save_checkpoint, strategy.remove_checkpoint = save_checkpoint, remove_checkpoint
    strategy._lit_marl_rank_buffers = True
