"""Batching one-episode simulators (PettingZoo, custom envs) into ``num_envs`` parallel episodes.

VMAS steps all its episodes as one tensor batch; most other simulators step one episode per object.
torchrl batches those: :class:`~torchrl.envs.SerialEnv` steps them one after the other in this process,
:class:`~torchrl.envs.ParallelEnv` in worker processes. With ``num_workers > 1`` each worker steps
``num_envs / num_workers`` episodes serially and the ``[workers, envs per worker]`` batch is flattened back
to ``[num_envs]``, so algorithms see the same shapes either way.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torchrl.envs import BatchSizeTransform, EnvBase, ParallelEnv, SerialEnv, TransformedEnv

from lit_marl.errors import ConfigError, positive_int


def check_workers(num_workers: int, field: str = "task.num_workers") -> int:
    return positive_int(field, num_workers)


def batched_env(make_one: Callable[[], EnvBase], num_envs: int, num_workers: int, device: torch.device | str,
                field: str = "task.num_workers") -> EnvBase:
    """``num_envs`` copies of ``make_one()`` as one env with batch size ``[num_envs]``.

    ``make_one`` must be picklable when ``num_workers > 1`` (a module-level function or a
    :func:`functools.partial` of one): worker processes build their own copies.
    """
    if num_workers == 1 or num_envs == 1:
        return SerialEnv(num_envs, make_one, device=device)
    if num_envs % num_workers:
        raise ConfigError(
            f"{field}: num_envs={num_envs} episodes cannot be split evenly over {num_workers} workers; allowed: "
            f"a divisor of num_envs, e.g. {max(d for d in range(1, num_workers + 1) if num_envs % d == 0)}"
        )
    per_worker = num_envs // num_workers
    inner = _SerialFactory(make_one, per_worker)
    env = ParallelEnv(num_workers, inner, device=device, mp_start_method="spawn" if _forked_unsafe() else None)
    # [workers, per_worker] -> [num_envs]: worker w holds envs w * per_worker ... (w + 1) * per_worker - 1
    return TransformedEnv(env, BatchSizeTransform(reshape_fn=lambda td: td.flatten(0, 1)))


class _SerialFactory:
    """Picklable ``lambda: SerialEnv(n, make_one)`` for worker processes."""

    def __init__(self, make_one: Callable[[], EnvBase], n: int) -> None:
        self.make_one = make_one
        self.n = n

    def __call__(self) -> EnvBase:
        return SerialEnv(self.n, self.make_one)


def _forked_unsafe() -> bool:
    # forking a process that has started CUDA is unsafe; everything else forks (faster start)
    return torch.cuda.is_available() and torch.cuda.is_initialized()
