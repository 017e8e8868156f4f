"""Data-parallel training (Lightning's DDP): how the global budget is shared between processes, and how the
per-process metrics become one number.

Every size the user sets is global: ``num_envs``, ``frames_per_batch``, ``minibatch_size`` /
``train_batch_size``, ``evaluation_episodes`` and ``test_episodes``. Each of the ``world_size`` processes steps
``num_envs / world_size`` envs, collects ``frames_per_batch / world_size`` frames and trains on minibatches of
``minibatch_size / world_size`` (DDP averages the gradients, so an optimizer step sees the global minibatch);
every process yields the same number of minibatches. The frame counter counts every process's frames.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from lit_marl.errors import ConfigError

#: strategies whose processes each run the whole module (one collector per process)
DATA_PARALLEL = ("SingleDeviceStrategy", "DDPStrategy")


def world_size_of(trainer: Any) -> int:
    return int(trainer.world_size) if trainer is not None else 1


def check_strategy(trainer: Any) -> None:
    """Refuse strategies that cannot run a collector per process (e.g. ``dp`` splits one batch across devices)."""
    names = [cls.__name__ for cls in type(trainer.strategy).__mro__]
    if "DeepSpeedStrategy" in names or not any(name in DATA_PARALLEL for name in names):
        raise ConfigError(
            f"trainer.strategy: {type(trainer.strategy).__name__} cannot drive lit-marl's environments (each process "
            f"must collect its own frames); allowed: auto (one device), ddp, ddp_spawn, ddp_fork"
        )


def shares(algorithm: Any, world_size: int, stage: str = "fit") -> list[str]:
    """The problems with splitting ``algorithm``'s global sizes over ``world_size`` processes for ``stage``
    (``fit``, ``validate`` or ``test``; empty: none)."""
    if world_size == 1:
        return []
    if stage == "test":
        sizes = {"test_episodes": algorithm.test_episodes}
    elif stage == "validate":
        sizes = {"evaluation_episodes": algorithm.evaluation_episodes}
    else:
        sizes = {"num_envs": algorithm.num_envs, "frames_per_batch": algorithm.frames_per_batch,
                 "evaluation_episodes": algorithm.evaluation_episodes}
        loop = getattr(algorithm, "loop", None)  # a lit-marl run's training loop: its minibatch size
        sizes.update(loop.global_sizes if loop is not None else {})
    problems = [f"{name}: {value} is not a multiple of the {world_size} processes; allowed: a multiple such as "
                f"{max(1, value // world_size) * world_size}" for name, value in sizes.items() if value % world_size]
    if stage == "fit":
        sequential = sorted({type(learner).algorithm_label for learner in getattr(algorithm, "learners", {}).values()
                             if getattr(learner, "sequential_agents", False)})
        if sequential:
            problems.append(f"model: {', '.join(sequential)} trains one agent after another in an order each process "
                            f"would draw for itself (and steps no optimizer on some minibatches, which DDP refuses); "
                            f"not yet across processes, allowed: trainer.devices 1 and trainer.num_nodes 1")
        if getattr(algorithm, "nan_policy", None) == "skip":
            problems.append("nan_policy: 'skip' skips a step by returning no loss, which Lightning refuses under DDP; "
                            "allowed: 'stop' (or one process)")
    if stage == "fit" and not problems and (algorithm.frames_per_batch // world_size) % (algorithm.num_envs // world_size):
        problems.append(f"frames_per_batch: {algorithm.frames_per_batch} / {world_size} processes is not a multiple of "
                        f"num_envs / {world_size} = {algorithm.num_envs // world_size} envs per process")
    return problems


def check_shares(algorithm: Any, world_size: int, stage: str = "fit") -> None:
    problems = shares(algorithm, world_size, stage)
    if problems:
        raise ConfigError("; ".join(problems) + f" (sizes are global and split over trainer.devices × num_nodes = "
                                                f"{world_size} processes)")


def reduce_means(values: dict[str, list[torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Per-metric means over the iteration's values, pooled over every process: each metric's mean weighs every
    value of every process once, and a metric only some processes recorded (e.g. the return of episodes that
    ended) is the mean of those that did. Two collectives, at most once per iteration."""
    local = {name: (torch.stack(v).float().sum(), len(v)) for name, v in values.items() if v}
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return {name: total / count for name, (total, count) in local.items()}
    gathered: list[list[str]] = [[] for _ in range(dist.get_world_size())]
    dist.all_gather_object(gathered, sorted(local))
    names = sorted(set().union(*gathered))
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    sums = torch.zeros(len(names), 2, dtype=torch.float64, device=device)
    for i, name in enumerate(names):
        if name in local:
            sums[i, 0], sums[i, 1] = float(local[name][0]), local[name][1]
    dist.all_reduce(sums)
    return {name: (sums[i, 0] / sums[i, 1]).float().cpu() for i, name in enumerate(names)}
