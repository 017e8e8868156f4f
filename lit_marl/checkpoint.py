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

from lit_marl import __version__
from lit_marl.errors import CheckpointError, ConfigError
from lit_marl.reading import looks_like_json
from lit_marl.sidecars import (BUFFERS_STATE, SidecarLinks, atomic_torch_save, buffers_meta, buffers_token,
                               damage, damaged_sidecar, rank_buffers, save_buffers_per_process, sidecar_path,
                               sidecar_paths)
from lit_marl.utils import rng_state

#: version of the ``checkpoint["lit_marl"]`` layout (3: a centralised shared network with agent ids reads the joint
#: input and the agent's own id, :func:`fold_constant_agent_ids`)
FORMAT_VERSION = 3
#: layouts this lit-marl reads (a checkpoint of any other layout is refused by name)
READABLE_FORMATS = (1, 2, 3)
#: ``--ckpt_path`` values that Lightning resolves itself
LIGHTNING_CKPT_ALIASES = ("last", "best", "hpc", "registry")


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
                self._links.save(buffers, sidecar_path(path, token), state, path)
                meta["replay_buffers_sidecar"] = token
            try:
                atomic_torch_save(checkpoint, path)
            except BaseException:  # the new sidecar belongs to no checkpoint: removed (the previous one keeps its own)
                if token is not None:
                    sidecar_path(path, token).unlink(missing_ok=True)
                raise
        finally:
            if buffers is not None:  # leave the caller's dict as it was
                meta["replay_buffers"] = buffers
                meta.pop("replay_buffers_sidecar", None)
            if state is not None:
                meta[BUFFERS_STATE] = state
        for old in sidecar_paths(path):
            if token is None or not old.name.endswith(token):
                old.unlink(missing_ok=True)

    def load_checkpoint(self, path, map_location=lambda storage, loc: storage, weights_only=None) -> dict[str, Any]:
        if not Path(path).is_file():
            raise CheckpointError(_missing(path))
        try:
            checkpoint = super().load_checkpoint(path, map_location=map_location, weights_only=weights_only)
        except _LOAD_ERRORS as err:
            raise CheckpointError(_unreadable(path, err)) from None
        _refuse_damaged(Path(path))
        meta = checkpoint.get("lit_marl", {})
        token = meta.pop("replay_buffers_sidecar", None)
        if token is not None:
            sidecar = _checked_sidecar(Path(path), token, verify=True)
            try:
                meta["replay_buffers"] = torch.load(sidecar, map_location="cpu", weights_only=True)
            except _LOAD_ERRORS as err:
                raise CheckpointError(_unreadable(path, err, sidecar)) from None
        return checkpoint

    def remove_checkpoint(self, path) -> None:
        for sidecar in sidecar_paths(Path(path)):
            sidecar.unlink(missing_ok=True)
        super().remove_checkpoint(path)


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


def _refuse_damaged(path: Path) -> None:
    """Refuse a checkpoint that ``torch.load`` read, but whose bytes changed on disk: it checks no CRC, so bytes
    changed inside a tensor load as other weights. A zip archive's members are checked against their CRC-32s (the
    file is small beside its replay buffers: :func:`~lit_marl.sidecars.damage`); an older, non-zip file cannot be."""
    problem = damage(path) if zipfile.is_zipfile(path) else None
    if problem is not None:
        raise CheckpointError(
            f"ckpt_path: {str(path)!r} is damaged: {problem}; nothing was loaded. Allowed: an earlier checkpoint of "
            f"the run whose bytes are whole (another *.ckpt in {str(path.parent)!r}), or a new run")


def _checked_sidecar(path: Path, token: str, verify: bool = False) -> Path:
    """The replay-buffer sidecar a checkpoint names; refused if it is missing or is not a complete zip archive
    (``torch.save``'s format; the check reads only the archive's directory at its end), and with ``verify`` if any
    of its bytes changed (every member against its CRC-32: :func:`~lit_marl.sidecars.damaged_sidecar`)."""
    sidecar = sidecar_path(path.resolve(), token)
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
    refusal = damaged_sidecar(sidecar, f"the replay buffers of {str(path)!r}") if verify else None
    if refusal is not None:
        raise CheckpointError(refusal)
    return sidecar


def read_checkpoint(path: str | os.PathLike, verify_buffers: bool = False) -> dict[str, Any]:
    """Load a lit-marl checkpoint with ``weights_only=True`` (without its replay buffers, whose sidecar is only
    checked to exist and be complete, and with ``verify_buffers`` to be undamaged: a resume checks it before the run
    starts); raise :class:`CheckpointError` if it is unusable."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(_missing(path))
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except _LOAD_ERRORS as err:
        raise CheckpointError(_unreadable(path, err)) from None
    _refuse_damaged(path)
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("lit_marl"), dict):
        raise CheckpointError(
            f"ckpt_path: {str(path)!r} is not a lit-marl checkpoint (no 'lit_marl' entry); allowed: a checkpoint "
            f"written by lit-marl fit"
        )
    token = checkpoint["lit_marl"].get("replay_buffers_sidecar")
    if token is not None:
        _checked_sidecar(path, token, verify=verify_buffers)
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


def fold_constant_agent_ids(checkpoint: dict[str, Any], current: dict[str, torch.Tensor]) -> list[str]:
    """Before format 3, a centralised network shared by a group's agents, with ``agent_id``, read every agent's input
    and id in turn (``[x_1, id_1, x_2, id_2, …]``): the ids were a constant and every agent got the group's one output.
    Today it reads the joint input and the agent's own id (:func:`~lit_marl.models.base.joint_with_ids`). Each such
    first layer of ``checkpoint`` (a weight whose width is ``n (F + n)`` where the model's ``current`` one is
    ``n F + n``) is rewritten, in place, to the same function: the inputs' columns kept, the constant ids' weights
    added to the bias, the agent's own id weighed zero. Returns the names of the weights rewritten."""
    meta = checkpoint.get("lit_marl") or {}
    if meta.get("format_version", FORMAT_VERSION) >= 3 or "state_dict" not in checkpoint:
        return []
    sizes = {group: len(agents) for group, agents in (meta.get("group_map") or {}).items()}
    saved, folded = checkpoint["state_dict"], []
    for name, old in list(saved.items()):
        new, group = current.get(name), re.search(r"learners\.([^.]+)\.", name)
        leaf = name.rsplit(".", 1)[-1]
        if (new is None or group is None or not isinstance(old, torch.Tensor) or old.dim() != 2
                or new.dim() != 2 or old.shape == new.shape or not leaf.startswith("weight")):
            continue
        n = sizes.get(group.group(1), 0)
        width = old.shape[1] // n - n if n else 0
        bias = name[: -len(leaf)] + leaf.replace("weight", "bias", 1)
        if (width < 1 or old.shape[1] != n * (width + n) or tuple(new.shape) != (old.shape[0], n * width + n)
                or bias not in saved or tuple(saved[bias].shape) != (old.shape[0],)):
            continue
        blocks = old.reshape(old.shape[0], n, width + n)  # per agent: its input's columns, then its id's
        weight = torch.zeros(tuple(new.shape), dtype=old.dtype)
        weight[:, : n * width] = blocks[:, :, :width].reshape(old.shape[0], n * width)
        saved[bias] = saved[bias] + sum(blocks[:, j, width + j] for j in range(n))  # agent j's id was always e_j
        saved[name] = weight
        folded.append(name)
    return folded


def refuse_training_on_folded(folded: list[str], source: str) -> None:
    """A checkpoint whose networks :func:`fold_constant_agent_ids` rewrote evaluates and exports as it was trained, but
    its optimizer's moments belong to the old layer: refused for resuming training, by name."""
    if folded:
        raise CheckpointError(
            f"{source}: written before lit-marl gave a centralised shared network with agent_id each agent's own id "
            f"({', '.join(folded[:2])}{', …' if len(folded) > 2 else ''} read every agent's id, a constant); it "
            f"evaluates and exports as trained, but training cannot continue from it; allowed: lit-marl validate, "
            f"test or export with it, or a new run")


def load_run_state(checkpoint: dict[str, Any], run: Any) -> dict[str, Any]:
    """Check a checkpoint against ``run`` (:func:`checked_meta`; format-1 weights renamed first), set the run's
    counters and its learners' own states, and return what the run restores later (its ``restored``: the RNG state
    before the next collection, the replay buffers when first built; under DDP this process's, from its sidecar)."""
    migrate_state_dict(checkpoint)  # weights saved before the learners (format 1) under their names of today
    folded = fold_constant_agent_ids(checkpoint, run.state_dict())
    trainer = getattr(run, "_trainer", None)
    if trainer is not None and trainer.state.fn == "fit":
        refuse_training_on_folded(folded, "ckpt_path")
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


def prepare_checkpoints(trainer: Any, run: Any) -> None:
    """Before a run starts: its checkpoints written atomically (unless the user chose their own CheckpointIO), the
    checkpoint it resumes from (``ckpt_path``) checked against it before anything is built, and under DDP every
    process's replay buffers (where it has any) saved beside each checkpoint, every process stopping where a write
    fails on one (:func:`~lit_marl.sidecars.save_buffers_per_process`)."""
    strategy = trainer.strategy
    if type(strategy.checkpoint_io) is TorchCheckpointIO:
        strategy.checkpoint_io = AtomicCheckpointIO()
    ckpt_path = trainer.ckpt_path
    if ckpt_path and str(ckpt_path) not in LIGHTNING_CKPT_ALIASES:
        meta = read_checkpoint(ckpt_path)["lit_marl"]
        check_compatible(meta, run.algorithm_name, run.task.to_config(), f"ckpt_path {str(ckpt_path)!r}")
    if run.world_size > 1:
        save_buffers_per_process(strategy)
