"""Checkpoint files: atomic writes, and clear errors for missing, truncated or foreign files; atomic rewrites of
Lightning's ``metrics.csv``."""

from __future__ import annotations

import os
import re
import uuid
import zipfile
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities import rank_zero_warn

from lit_marl import __version__
from lit_marl.atomic import atomic_target
from lit_marl.data.replay import buffer_state
from lit_marl.errors import CheckpointError, ConfigError
from lit_marl.reading import looks_like_json
from lit_marl.utils import rng_state

#: version of the ``checkpoint["lit_marl"]`` layout
FORMAT_VERSION = 2
#: layouts this lit-marl reads (a checkpoint of any other layout is refused by name)
READABLE_FORMATS = (1, 2)
#: ``--ckpt_path`` values that Lightning resolves itself
LIGHTNING_CKPT_ALIASES = ("last", "best", "hpc", "registry")


def _atomic_torch_save(obj: Any, path: Path) -> None:
    """``torch.save`` through :func:`~lit_marl.atomic.atomic_target`: never a half-written file."""
    try:
        with atomic_target(path) as tmp, open(tmp, "wb") as f:
            torch.save(obj, f)
    except OSError as err:  # disk full, read-only, no permission: name the checkpoint, not the temp file
        kept = "the previous one is intact" if path.exists() else "none was there before"
        raise OSError(err.errno, f"{err.strerror or err} (checkpoint not written; {kept})", str(path)) from err


class AtomicCheckpointIO(TorchCheckpointIO):
    """Atomic checkpoint files, with replay buffers in a sidecar file.

    Replay buffers (``checkpoint["lit_marl"]["replay_buffers"]``) can be gigabytes; they go to
    ``<checkpoint>.buffers-<token>`` beside the checkpoint, which records the token. The sidecar is written
    before the checkpoint, each atomically, so a kill at any moment leaves a checkpoint whose sidecar
    exists; older sidecars of the same checkpoint are removed after it is replaced, and a checkpoint
    removed by ``ModelCheckpoint`` takes its sidecar with it. Both files load with ``weights_only=True``.
    A checkpoint saved at the same training state as the previous one (``last.ckpt`` right after the periodic
    checkpoint of its iteration) gets a hard link to that sidecar, not a second copy (:class:`SidecarLinks`).
    """

    def __init__(self) -> None:
        super().__init__()
        self._links = SidecarLinks()

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options=None) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = checkpoint.get("lit_marl", {})
        buffers, state = meta.pop("replay_buffers", None), meta.pop(BUFFERS_STATE, None)
        token = None
        try:
            if buffers is not None:
                token = uuid.uuid4().hex[:12]
                self._links.save(buffers, _sidecar(path, token), state)
                meta["replay_buffers_sidecar"] = token
            _atomic_torch_save(checkpoint, path)
        finally:
            if buffers is not None:  # leave the caller's dict as it was
                meta["replay_buffers"] = buffers
                meta.pop("replay_buffers_sidecar", None)
            if state is not None:
                meta[BUFFERS_STATE] = state
        for old in _sidecars(path):
            if token is None or not old.name.endswith(token):
                old.unlink(missing_ok=True)

    def load_checkpoint(self, path, map_location=lambda storage, loc: storage, weights_only=None) -> dict[str, Any]:
        if not Path(path).is_file():
            raise CheckpointError(_missing(path))
        try:
            checkpoint = super().load_checkpoint(path, map_location=map_location, weights_only=weights_only)
        except _LOAD_ERRORS as err:
            raise CheckpointError(_unreadable(path, err)) from None
        meta = checkpoint.get("lit_marl", {})
        token = meta.pop("replay_buffers_sidecar", None)
        if token is not None:
            sidecar = _checked_sidecar(Path(path), token)
            try:
                meta["replay_buffers"] = torch.load(sidecar, map_location="cpu", weights_only=True)
            except _LOAD_ERRORS as err:
                raise CheckpointError(_unreadable(path, err, sidecar)) from None
        return checkpoint

    def remove_checkpoint(self, path) -> None:
        for sidecar in _sidecars(Path(path)):
            sidecar.unlink(missing_ok=True)
        super().remove_checkpoint(path)


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

    def save(self, buffers: Any, target: Path, state: str | None) -> None:
        last, self._last = self._last, None
        if state is None or last is None or last[0] != state or not _hard_link(last[1], target):
            _atomic_torch_save(buffers, target)
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


def _sidecar(path: Path, token: str) -> Path:
    return path.with_name(f"{path.name}.buffers-{token}")


def _sidecars(path: Path) -> list[Path]:
    # per-process buffers of a DDP run (``.rank<r>``) are written by save_buffers_per_process
    return sorted(p for p in path.parent.glob(f"{path.name}.buffers-*") if ".rank" not in p.name)


#: what ``torch.load`` raises on a truncated, corrupt or non-checkpoint file: random bytes reach the unpickler
#: and fail in it anywhere (IndexError, KeyError, UnicodeDecodeError, … were all seen), so any Exception
_LOAD_ERRORS = (Exception,)


#: what ``--ckpt_path`` takes
CHECKPOINT_ALLOWED = "a checkpoint written by lit-marl fit (runs/<run>/checkpoints/*.ckpt)"


def _missing(path) -> str:
    return f"ckpt_path: {str(path)!r} does not exist (or is not a file); allowed: {CHECKPOINT_ALLOWED}"


def _head(path) -> bytes:
    """A file's first bytes, to say what was given instead of a checkpoint."""
    try:
        with open(path, "rb") as f:
            return f.read(4096)
    except OSError:
        return b"?"


def _unreadable(path, err: BaseException, sidecar: Path | None = None) -> str:
    reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
    what = f"the replay buffers of {str(path)!r} ({sidecar.name})" if sidecar else repr(str(path))
    head = _head(path) if sidecar is None else b"PK"  # a sidecar was checked to be a zip archive
    if not head.strip():
        return f"ckpt_path: {what} is empty (truncated or corrupt); allowed: {CHECKPOINT_ALLOWED}"
    if looks_like_json(head):  # e.g. an eval_info.json or marl_eval.json given where a checkpoint belongs
        return (f"ckpt_path: {what} is JSON text, not a checkpoint; allowed: {CHECKPOINT_ALLOWED}; JSON results go "
                f"to lit-marl compare and lit-marl report")
    return (f"ckpt_path: {what} is not a readable checkpoint (truncated or corrupt?): {type(err).__name__}: {reason}; "
            f"allowed: a complete file written by lit-marl (loadable with torch.load(weights_only=True))")


def _checked_sidecar(path: Path, token: str) -> Path:
    """The replay-buffer sidecar a checkpoint names; refused if it is missing or is not a complete zip archive
    (``torch.save``'s format; the check reads only the archive's directory at its end)."""
    sidecar = _sidecar(path.resolve(), token)
    if not sidecar.is_file():
        raise CheckpointError(
            f"ckpt_path: the replay buffers of {str(path)!r} ({sidecar.name}) are missing; allowed: the checkpoint "
            f"together with the sidecar file written beside it"
        )
    if not zipfile.is_zipfile(sidecar):
        raise CheckpointError(
            f"ckpt_path: the replay buffers of {str(path)!r} ({sidecar.name}) are truncated or corrupt (not a "
            f"complete torch.save archive); allowed: the sidecar file as lit-marl wrote it"
        )
    return sidecar


def read_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Load a lit-marl checkpoint with ``weights_only=True`` (without its replay buffers, whose sidecar is only
    checked to exist and be complete); raise :class:`CheckpointError` if it is unusable."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(_missing(path))
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except _LOAD_ERRORS as err:
        raise CheckpointError(_unreadable(path, err)) from None
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("lit_marl"), dict):
        raise CheckpointError(
            f"ckpt_path: {str(path)!r} is not a lit-marl checkpoint (no 'lit_marl' entry); allowed: a checkpoint "
            f"written by lit-marl fit"
        )
    token = checkpoint["lit_marl"].get("replay_buffers_sidecar")
    if token is not None:
        _checked_sidecar(path, token)
    return checkpoint


def run_meta(algorithm: str, task: Any, frames: int, iteration: int) -> dict[str, Any]:
    """What every lit-marl checkpoint carries under ``checkpoint["lit_marl"]``: layout and versions, the algorithm,
    the task and its groups, the counters and every RNG's state."""
    return {
        "format_version": FORMAT_VERSION,
        "lit_marl_version": __version__,
        "algorithm": algorithm,
        "task": task.to_config(),
        "group_map": {g: list(a) for g, a in task.group_map.items()},
        "frames": int(frames),
        "iteration": int(iteration),
        "rng": rng_state(),
    }


#: a weight's name as format 1 wrote it (before learners): ``policies.<group>.…``, or an ensemble's
#: ``algorithms.<group>.policies.<group>.…``
_FORMAT_1_NAME = re.compile(r"^(?:algorithms\.[^.]+\.)?(policies|critics|losses|explorations)\.([^.]+)\.(.*)$")
_FORMAT_1_PART = {"policies": "policy", "critics": "critic", "losses": "objective", "explorations": "exploration"}


def migrate_state_dict(checkpoint: dict[str, Any]) -> None:
    """Rename, in place, the weights of a format-1 checkpoint (written before each group's parts moved into its
    learner) to today's names: ``policies.<g>.…`` → ``learners.<g>.policy.…``, ``losses.<g>.…`` →
    ``learners.<g>.objective.…``, and the same for critics, explorations and an ensemble's ``algorithms.<g>.…``."""
    meta = checkpoint.get("lit_marl") or {}
    if meta.get("format_version") != 1 or "state_dict" not in checkpoint:
        return
    renamed = {}
    for name, value in checkpoint["state_dict"].items():
        match = _FORMAT_1_NAME.match(name)
        if match:
            part, group, rest = match.groups()
            name = f"learners.{group}.{_FORMAT_1_PART[part]}.{rest}"
        renamed[name] = value
    checkpoint["state_dict"] = renamed


def checked_meta(checkpoint: dict[str, Any], algorithm: str, task: Any,
                 state_dict: dict[str, torch.Tensor]) -> dict[str, Any]:
    """A loaded checkpoint's ``lit_marl`` entry, once the checkpoint is known to fit ``algorithm`` on ``task`` and
    its weights ``state_dict`` (checked before Lightning's ``load_state_dict``, which would fail inside PyTorch)."""
    meta = checkpoint.get("lit_marl")
    if meta is None:
        raise ConfigError("checkpoint: not a lit-marl checkpoint (no 'lit_marl' entry)")
    check_compatible(meta, algorithm, task.to_config(), "checkpoint", task.group_map)
    if "state_dict" in checkpoint:
        check_state_dict(checkpoint["state_dict"], state_dict, "checkpoint")
    return meta


#: task arguments that say how a task is simulated, not which task it is: a checkpoint resumes under either value
#: (VMAS's batched or per-environment resets draw the finished environments' starts differently, nothing else)
SIMULATION_SETTINGS = ("batched_resets",)


def task_identity(config: Any) -> Any:
    """A task's config without its :data:`SIMULATION_SETTINGS` (what a checkpoint's task must match)."""
    if not isinstance(config, dict) or not isinstance(config.get("init_args"), dict):
        return config
    return {**config, "init_args": {k: v for k, v in config["init_args"].items() if k not in SIMULATION_SETTINGS}}


def check_compatible(meta: dict[str, Any], algorithm: str, task_config: dict[str, Any], source: str,
                     group_map: dict[str, list[str]] | None = None) -> None:
    """Raise :class:`CheckpointError` when a checkpoint has another layout version or belongs to another
    algorithm, task or agent-group layout."""
    version = meta.get("format_version")
    if version not in READABLE_FORMATS:
        written_by = f" (lit-marl {meta['lit_marl_version']})" if "lit_marl_version" in meta else ""
        newer = isinstance(version, int) and version > FORMAT_VERSION
        raise CheckpointError(
            f"{source}: checkpoint format_version {version!r}{written_by} was written by "
            f"{'a newer' if newer else 'another'} lit-marl; this one ({__version__}) reads format "
            f"{', '.join(map(str, READABLE_FORMATS))}"
        )
    if meta.get("algorithm") != algorithm:
        raise CheckpointError(
            f"{source}: checkpoint is for algorithm {meta.get('algorithm')!r}, but the model is {algorithm!r}"
        )
    if task_identity(meta.get("task")) != task_identity(task_config):
        raise CheckpointError(
            f"{source}: checkpoint is for task {meta.get('task')!r}, but the model's task is {task_config!r}"
        )
    if group_map is not None and "group_map" in meta:
        check_group_map(meta["group_map"], group_map, source)


def check_group_map(saved: dict[str, list[str]], current: dict[str, list[str]], source: str) -> None:
    """Raise :class:`CheckpointError` when a checkpoint's agent groups differ from the model's task."""
    saved = {g: list(a) for g, a in saved.items()}
    current = {g: list(a) for g, a in current.items()}
    if saved != current:
        raise CheckpointError(
            f"{source}: checkpoint has agent groups {saved!r}, but the model's task has {current!r}; allowed: "
            f"the same group layout (task.agent_groups)"
        )


def check_state_dict(saved: dict[str, Any], current: dict[str, torch.Tensor], source: str) -> None:
    """Raise :class:`CheckpointError` naming the parameters a checkpoint lacks, has in excess, or has in another
    shape than the model (other network sizes, parameter sharing or centralised critics), before
    ``load_state_dict`` would fail inside PyTorch."""
    missing = sorted(set(current) - set(saved))
    unexpected = sorted(set(saved) - set(current))
    reshaped = [f"{k}: {list(saved[k].shape)} in the checkpoint, {list(current[k].shape)} in the model"
                for k in current if k in saved and isinstance(saved[k], torch.Tensor)
                and tuple(saved[k].shape) != tuple(current[k].shape)]
    if not (missing or unexpected or reshaped):
        return
    parts = []
    if reshaped:
        parts.append(f"{len(reshaped)} parameter(s) of another shape ({'; '.join(reshaped[:3])}"
                     f"{'; …' if len(reshaped) > 3 else ''})")
    if missing:
        parts.append(f"{len(missing)} missing ({', '.join(missing[:3])}{', …' if len(missing) > 3 else ''})")
    if unexpected:
        parts.append(f"{len(unexpected)} unexpected ({', '.join(unexpected[:3])}{', …' if len(unexpected) > 3 else ''})")
    raise CheckpointError(
        f"{source}: the checkpoint's networks do not fit the model: {'; '.join(parts)}; allowed: the actor_model, "
        f"critic_model and parameter-sharing settings the checkpoint was trained with (its run's config.yaml)"
    )


def buffers_meta(buffers: dict[str, Any], world_size: int, token: str) -> dict[str, Any]:
    """What a checkpoint's ``lit_marl`` entry holds of the replay buffers: their state by group, or, under DDP, where
    each process writes its own (:func:`save_buffers_per_process`) and their state to write there."""
    state = {group: buffer_state(buffer) for group, buffer in buffers.items()}
    if world_size > 1:
        return {"rank_buffers_state": state, "rank_buffers": {"world_size": world_size, "token": token}}
    return {"replay_buffers": state}


def rank_buffers(saved: dict[str, Any], ckpt_path: Path, rank: int, world_size: int) -> dict[str, Any] | None:
    """Process ``rank``'s replay buffers of a DDP checkpoint (``saved``: its ``rank_buffers`` entry), read from their
    sidecar file; None, with a warning, where the checkpoint was written by another number of processes."""
    if saved["world_size"] != world_size:
        rank_zero_warn(f"lit-marl: the checkpoint's replay buffers belong to {saved['world_size']} processes and "
                       f"this run has {world_size}; training continues with empty buffers")
        return None
    sidecar = rank_sidecar(ckpt_path, saved["token"], rank)
    if not sidecar.is_file():
        raise CheckpointError(f"ckpt_path: the replay buffers of process {rank} ({sidecar.name}) are missing "
                              f"beside {str(ckpt_path)!r}; allowed: the checkpoint with its .rank<r> files")
    return torch.load(sidecar, map_location="cpu", weights_only=True)


def rank_sidecar(path: Path, token: str, rank: int) -> Path:
    """Where DDP process ``rank`` keeps its replay buffers for the checkpoint at ``path`` (token: its save)."""
    return path.with_name(f"{path.name}.buffers-{token}.rank{rank}")


def save_buffers_per_process(strategy: Any) -> None:
    """Under DDP every process has its own replay buffers. Lightning writes a checkpoint from process 0 only, so
    each process writes its buffers beside it (``<checkpoint>.buffers-<token>.rank<r>``, atomically, before
    process 0 writes the checkpoint that names the token); process 0 removes older ones, and those of a
    checkpoint it removes."""
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
            links.save(buffers, rank_sidecar(Path(filepath), token, strategy.global_rank), state)
        strategy.barrier("lit-marl replay buffers")  # every process's buffers are on disk
        save(checkpoint, filepath, storage_options)
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


def save_run_state(checkpoint: dict[str, Any], run: Any, buffers: dict[str, Any] | None,
                   buffers_id: str | None = None) -> None:
    """What a run (a :class:`~lit_marl.algorithms.MarlAlgorithm`) adds to a Lightning checkpoint under ``lit_marl``:
    :func:`run_meta`, its replay ``buffers`` (where built; :func:`buffers_meta`; ``buffers_id`` tells them apart from
    another run's, for :class:`SidecarLinks`) and each learner's own state (target updaters, HAPPO's orders, HASAC's
    held n-step window) where any learner has one."""
    meta = checkpoint.setdefault("lit_marl", {})
    meta.update(run_meta(run.algorithm_name, run.task, run.frames, run.iteration))
    if buffers is not None:
        token = buffers_token(run.frames, run.global_step)
        meta.update(buffers_meta(buffers, run.world_size, token))
        if buffers_id is not None:
            meta[BUFFERS_STATE] = f"{buffers_id}:{token}"
    learner_states = {g: learner.checkpoint_state() for g, learner in run.learners.items()}
    if any(learner_states.values()):
        meta["target_updaters"] = learner_states


def load_run_state(checkpoint: dict[str, Any], run: Any) -> dict[str, Any]:
    """Check a checkpoint against ``run`` (:func:`checked_meta`; format-1 weights renamed first), set the run's
    counters and its learners' own states, and return what the run restores later (its ``restored``: the RNG state
    before the next collection, the replay buffers when first built; under DDP this process's, from its sidecar)."""
    migrate_state_dict(checkpoint)  # weights saved before the learners (format 1) under their names of today
    meta = checked_meta(checkpoint, run.algorithm_name, run.task, run.state_dict())
    run.frames, run.iteration = int(meta["frames"]), int(meta["iteration"])
    restored = dict(meta)
    for group, state in meta.get("target_updaters", {}).items():
        run.learners[group].load_checkpoint_state(state)
    if "rank_buffers" in meta:  # a DDP run's: each process's buffers in a sidecar file
        buffers = rank_buffers(meta["rank_buffers"], Path(str(run.trainer.ckpt_path)), run.rank, run.world_size)
        if buffers is not None:
            restored["replay_buffers"] = buffers
    return restored


def prepare_checkpoints(trainer: Any, run: Any, with_buffers: bool) -> None:
    """Before a run starts: its checkpoints written atomically (unless the user chose their own CheckpointIO), the
    checkpoint it resumes from (``ckpt_path``) checked against it before anything is built, and under DDP, where it
    has replay buffers (``with_buffers``), every process's buffers saved beside each checkpoint."""
    strategy = trainer.strategy
    if type(strategy.checkpoint_io) is TorchCheckpointIO:
        strategy.checkpoint_io = AtomicCheckpointIO()
    ckpt_path = trainer.ckpt_path
    if ckpt_path and str(ckpt_path) not in LIGHTNING_CKPT_ALIASES:
        meta = read_checkpoint(ckpt_path)["lit_marl"]
        check_compatible(meta, run.algorithm_name, run.task.to_config(), f"ckpt_path {str(ckpt_path)!r}")
    if run.world_size > 1 and with_buffers:
        save_buffers_per_process(strategy)
