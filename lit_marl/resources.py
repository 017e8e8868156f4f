"""Memory and disk a run needs, estimated from its settings and its task's specs before anything is collected: a
``num_envs`` or ``memory_size`` far beyond this machine's memory, or a disk too full for the first checkpoint, is
refused by name with the number and the limit (issue 34) instead of failing minutes later with an allocation
traceback or a half-written checkpoint.

The estimates are lower bounds: what one environment step's observations, actions, rewards and done flags take
(and, for the replay memory, a transition: the step and its next observations), without the simulator's own state,
the policy's outputs or torch's allocator slack. A run refused here could not have run; one that passes may still
need more."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torchrl.data import Composite

from lit_marl.errors import ConfigError

#: environments, collected batch and replay memory may take at most this share of the memory available at start
MEMORY_SHARE = 0.9


def spec_bytes(spec: Any) -> int:
    """Bytes of one sample of ``spec`` (a Composite: the sum of its leaves)."""
    if spec is None:
        return 0
    if isinstance(spec, Composite):
        return sum(spec_bytes(leaf) for leaf in spec.values(include_nested=True, leaves_only=True))
    return spec.shape.numel() * torch.empty((), dtype=spec.dtype).element_size()


def step_bytes(specs) -> int:
    """Bytes one environment step writes into a collected batch: observations, actions, rewards and done flags of
    every group, and the next step's observations, rewards and done flags beside them."""
    observed = spec_bytes(specs.observation_spec) + spec_bytes(specs.reward_spec) + spec_bytes(specs.done_spec)
    return 2 * observed + spec_bytes(specs.action_spec)


def available_memory(device: torch.device) -> int | None:
    """Bytes that can still be allocated on ``device``: MemAvailable of /proc/meminfo on the CPU, the free memory of a
    CUDA device; None where it cannot be read."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000:
            return f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} TB"


def _group_bytes(spec: Composite | None, group: str) -> int:
    return spec_bytes(spec[group]) if spec is not None and group in spec.keys() else 0


def transition_bytes(specs, group: str) -> int:
    """Bytes of one transition of ``group`` in a replay memory: observations, rewards and done flags of the step and
    the next one, and the actions."""
    observed = sum(_group_bytes(spec, group) for spec in (specs.observation_spec, specs.reward_spec, specs.done_spec))
    return 2 * observed + _group_bytes(specs.action_spec, group)


#: the evaluations' episode counts and what they are called, by ``Evaluation`` prefix
EVALUATIONS = {"val": ("evaluation_episodes", "validation"), "test": ("test_episodes", "test")}


def evaluation_need(model, prefix: str, world_size: int, env_device: torch.device
                    ) -> tuple[str, Any, int, str, torch.device]:
    """``(field, value, bytes, what, device)`` of one evaluation (``prefix`` ``val`` or ``test``): every episode of
    this process's share is kept whole (``[num_envs, max_steps]`` rollouts) until the evaluation ends, for
    ``on_evaluation_end`` (``eval_info.json``, marl-eval, the collective return), so the batches of
    ``evaluation_batch_size`` bound the environments stepped at once, not the memory; named by the episode count."""
    field, name = EVALUATIONS[prefix]
    value = getattr(model, field)
    episodes = max(1, value // world_size)
    parallel = min(episodes, model.evaluation_batch_size)
    return (field, value, episodes * model.task.max_steps * step_bytes(model.task.specs),
            f"the {name} rollouts ({episodes} episodes of max_steps={model.task.max_steps} steps, {parallel} at once, "
            f"each kept until the {name} ends)", env_device)


def memory_needs(model, world_size: int, env_device: torch.device,
                 train_device: torch.device) -> list[tuple[str, Any, int, str, torch.device]]:
    """``(field, value, bytes, what, device)`` for each part of one process's memory that the run's settings decide."""
    step = step_bytes(model.task.specs)
    needs = [("num_envs", model.num_envs, model.num_envs // world_size * step,
              "environments (one step's tensors per environment)", env_device),
             ("frames_per_batch", model.frames_per_batch, model.frames_per_batch // world_size * step,
              "the collected batch", env_device)]
    needs.append(evaluation_need(model, "val", world_size, env_device))
    for group, learner in model.learners.items():
        if learner.on_policy:
            continue
        shape = learner.replay_shape()
        if shape.where == "disk":
            continue  # memory-mapped in the run folder
        needs.append(("memory_size", shape.capacity, shape.capacity * transition_bytes(model.task.specs, group),
                      f"the replay memory of group {group!r} (allocated whole at its first write)",
                      torch.device("cpu") if shape.where == "cpu" else train_device))
    return needs


def check_memory(model, world_size: int, env_device: torch.device, train_device: torch.device,
                 available: dict[torch.device, int | None] | None = None) -> None:
    """Refuse settings whose environments, collected batch and replay memory cannot fit the memory available now on
    their device, naming the largest part with its number and what would fit."""
    refuse_needs(memory_needs(model, world_size, torch.device(env_device), torch.device(train_device)), available,
                 "nothing was collected")


def check_evaluation_memory(model, prefix: str, world_size: int, env_device: torch.device,
                            available: dict[torch.device, int | None] | None = None) -> None:
    """Before ``lit-marl validate`` (``prefix`` ``val``) or ``test`` (``test``) rolls anything out: refuse an episode
    count whose rollouts cannot fit the memory available now, naming it with what would fit."""
    refuse_needs([evaluation_need(model, prefix, world_size, torch.device(env_device))], available,
                 "nothing was rolled out")


def refuse_needs(needs: list[tuple[str, Any, int, str, torch.device]],
                 available: dict[torch.device, int | None] | None, nothing: str) -> None:
    """Refuse ``needs`` (:func:`memory_needs`' tuples) whose sum on a device passes :data:`MEMORY_SHARE` of the memory
    available there, naming the largest with its number and what would fit; ``nothing``: what was not done."""
    for device in {need[4] for need in needs}:
        here = [need for need in needs if need[4] == device]
        free = available_memory(device) if available is None else available.get(device)
        total = sum(need[2] for need in here)
        if free is None or total <= MEMORY_SHARE * free:
            continue
        field, value, largest, what, _ = max(here, key=lambda need: need[2])
        fits = max(0, int((MEMORY_SHARE * free - (total - largest)) / (largest / value))) if largest else 0
        parts = "; ".join(f"{f} {v}: {size(n)}" for f, v, n, _, _ in here)
        raise ConfigError(
            f"model.init_args.{field}: {value} needs at least {size(largest)} of {device.type} memory for {what}, "
            f"{size(total)} in all ({parts}), but {size(free)} is available; {nothing}. Allowed: {field} "
            f"up to about {fits}, or a machine with more memory"
            + ("; buffer_device: disk keeps the replay memory in a file" if field == "memory_size" else "")
            + ("; a smaller evaluation_batch_size does not help (every episode is kept until the end)"
               if field in ("evaluation_episodes", "test_episodes") else ""))


def replay_disk_needs(model) -> list[tuple[str, int]]:
    """``(group, bytes)`` of each replay memory kept on disk (``buffer_device: disk``), memory-mapped whole in the run
    folder."""
    return [(group, learner.replay_shape().capacity * transition_bytes(model.task.specs, group))
            for group, learner in model.learners.items()
            if not learner.on_policy and learner.replay_shape().where == "disk"]


def check_replay_disk(model, folder: Path, processes: int = 1, free: int | None = None) -> None:
    """Refuse replay memories on disk (``buffer_device: disk``) that the run folder's file system cannot hold: the
    memory-mapped files are made whole at the first write, and a write past the disk's end fails in the middle of
    training. ``processes``: the run's processes on this machine, each with a memory of its own."""
    needs = replay_disk_needs(model)
    if not needs:
        return
    probe = Path(folder)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free if free is None else free
    total = processes * sum(n for _, n in needs)
    if total <= free:
        return
    group, largest = max(needs, key=lambda need: need[1])
    value = model.learners[group].memory_size
    fits = max(0, int((free / processes - (total / processes - largest)) / (largest / value))) if largest else 0
    raise ConfigError(
        f"model.init_args.memory_size: {value} needs at least {size(largest)} of disk for the replay memory of group "
        f"{group!r} (buffer_device: disk, memory-mapped in {str(folder)!r}), {size(total)} in all, but that disk has "
        f"{size(free)} free; nothing was collected. Allowed: memory_size up to about {fits}, or a run folder on a "
        f"disk with more space (trainer.default_root_dir or trainer.logger.init_args.save_dir)")


def first_checkpoint_bytes(model, every_n_epochs: int, world_size: int = 1, copies: int = 1) -> int:
    """Bytes of the first checkpoint's ``copies`` files (the periodic one and ``last.ckpt``): each holds the weights
    and twice their size again for Adam's moments; the replay memory filled by then (each process's, in its own file)
    is stored once, the files of one iteration sharing it by hard link (:class:`~lit_marl.sidecars.SidecarLinks`)."""
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()  # a tensor under two names: saved once
                for t in model.state_dict().values() if isinstance(t, torch.Tensor)}
    weights = sum(storages.values())
    trainable = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    frames = model.frames_per_batch * max(1, every_n_epochs)
    replay = sum(min(learner.replay_shape().capacity * world_size, frames) * transition_bytes(model.task.specs, group)
                 for group, learner in model.learners.items() if not learner.on_policy)
    return copies * (weights + 2 * trainable) + replay


def check_disk(model, folder: Path, every_n_epochs: int, copies: int, world_size: int = 1,
               free: int | None = None) -> None:
    """Refuse a run folder whose file system has less free space than the first checkpoint needs (``copies`` files:
    the periodic one and ``last.ckpt``), naming both numbers."""
    folder = Path(folder)
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free if free is None else free
    needed = first_checkpoint_bytes(model, every_n_epochs, world_size, copies)
    if needed > free:
        raise ConfigError(
            f"trainer.logger: the run folder {str(folder)!r} has {size(free)} free, but the first checkpoint (after "
            f"{every_n_epochs} iteration(s): {copies} file(s) of weights and optimizer state, and the replay memory) "
            f"needs at least {size(needed)}; nothing was trained. Allowed: free space, or a run folder on another disk "
            f"(trainer.logger.init_args.save_dir or trainer.default_root_dir)")


def check_resources(model, trainer, stage: str = "fit") -> None:
    """Before ``fit`` collects anything (``MarlAlgorithm.setup``): memory for the environments, the collected batch,
    the validation rollouts and the replay memory on their devices, and free disk for the first checkpoint where one
    is configured. Before ``validate`` or ``test`` rolls anything out: memory for its rollouts."""
    world_size = max(1, trainer.world_size)
    train_device = trainer.strategy.root_device
    env_device = torch.device(model.sampling_device) if model.sampling_device else train_device
    if stage in ("validate", "test"):
        check_evaluation_memory(model, "val" if stage == "validate" else "test", world_size, env_device)
        return
    if stage != "fit":
        return
    check_memory(model, world_size, env_device, train_device)
    check_replay_disk(model, Path(trainer.log_dir or trainer.default_root_dir) / "replay_buffers",
                      max(1, world_size // max(1, trainer.num_nodes)))
    # Lightning's first Checkpoint callback may be lit-marl's PreemptionCheckpoint (no ModelCheckpoint configured)
    callback = next((c for c in trainer.checkpoint_callbacks if isinstance(c, ModelCheckpoint)), None)
    if callback is None or not trainer.is_global_zero:
        return
    every = getattr(callback, "_every_n_epochs", 0) or 0
    periodic = 1 if every and callback.save_top_k != 0 else 0
    copies = periodic + (1 if callback.save_last else 0)
    if not copies:
        return
    folder = callback.dirpath or Path(trainer.log_dir or trainer.default_root_dir) / "checkpoints"
    check_disk(model, Path(folder), max(every, 1), copies, world_size)
