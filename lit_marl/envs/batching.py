"""Batching one-episode simulators (PettingZoo) into ``num_envs`` parallel episodes.

VMAS steps all its episodes as one tensor batch; most other simulators step one episode per object.
torchrl's :class:`~torchrl.envs.SerialEnv` steps them one after the other in this process, so algorithms
see the same ``[num_envs]`` batch as with VMAS.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torchrl.envs import EnvBase, SerialEnv


def batched_env(make_one: Callable[[], EnvBase], num_envs: int, device: torch.device | str) -> EnvBase:
    """``num_envs`` copies of ``make_one()`` as one env with batch size ``[num_envs]``."""
    return SerialEnv(num_envs, make_one, device=device)
