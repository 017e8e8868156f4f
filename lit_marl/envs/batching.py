"""Batching one-episode simulators (PettingZoo, custom envs) into ``num_envs`` parallel episodes.

VMAS steps all its episodes as one tensor batch; most other simulators step one episode per object. torchrl
batches those: :class:`~torchrl.envs.SerialEnv` steps them one after the other in this process, and with
``num_workers > 1`` a :class:`~torchrl.envs.ParallelEnv` of worker processes each steps its share serially.
Algorithms see the same ``[num_envs]`` batch either way.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.envs import BatchSizeTransform, EnvBase, ParallelEnv, SerialEnv, TransformedEnv
from typing_extensions import override


def workers_for(num_envs: int, num_workers: int) -> int:
    """The processes that step ``num_envs`` episodes: the largest divisor of ``num_envs`` up to ``num_workers``
    (every worker steps the same number of episodes)."""
    return max(d for d in range(1, min(num_envs, num_workers) + 1) if num_envs % d == 0)


def batched_env(make_one: Callable[[], EnvBase], num_envs: int, device: torch.device | str,
                num_workers: int = 1, seed: int | None = None) -> EnvBase:
    """``num_envs`` copies of ``make_one()`` as one env with batch size ``[num_envs]``, seeded with ``seed`` if given
    (torchrl gives each episode its own seed from it).

    With ``num_workers > 1``, ``make_one`` must be picklable (a module-level function or a
    :func:`functools.partial` of one): each worker process builds its own episodes.
    """
    workers = workers_for(num_envs, num_workers)
    if workers == 1:
        env = SerialEnv(num_envs, make_one, device=device)
    else:
        env = FlatBatchEnv(_parallel(make_one, num_envs, workers, device))
    if seed is not None:
        env.set_seed(seed)
    return env


def _parallel(make_one: Callable[[], EnvBase], num_envs: int, workers: int, device: torch.device | str) -> ParallelEnv:
    forked_unsafe = torch.cuda.is_available() and torch.cuda.is_initialized()  # fork only where CUDA is not started
    # num_threads: leave this process's torch threads as they are (ParallelEnv would set workers + 1)
    return ParallelEnv(workers, _SerialEnvs(make_one, num_envs // workers), device=device,
                       mp_start_method="spawn" if forked_unsafe else "fork", num_threads=torch.get_num_threads())



def episode_in_process(env: EnvBase, env_index: int) -> EnvBase | None:
    """The one-episode env ``env_index`` of a :func:`batched_env` batch (through any transforms wrapping it) where
    the batch steps its episodes in this process; None where they step in worker processes."""
    base = env
    while hasattr(base, "base_env") and not hasattr(base, "_envs"):
        base = base.base_env
    envs = getattr(base, "_envs", None)
    return envs[env_index] if envs else None

class _SerialEnvs:
    """Picklable ``lambda: SerialEnv(n, make_one)``: one worker's share of the episodes."""

    def __init__(self, make_one: Callable[[], EnvBase], n: int) -> None:
        self.make_one = make_one
        self.n = n

    def __call__(self) -> EnvBase:
        if multiprocessing.parent_process() is not None:
            # a worker: Ctrl-C in a terminal reaches every process of the group, and a worker that died of it would
            # leave the main process unable to finish the iteration it saves (the main process stops the workers)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        return SerialEnv(self.n, self.make_one)


class FlatBatchEnv(TransformedEnv):
    """A ``[workers, envs per worker]`` batch seen as ``[num_envs]`` (worker ``w`` holds envs
    ``w * per_worker … (w + 1) * per_worker - 1``).

    A subclass on purpose: torchrl merges a plain ``TransformedEnv`` wrapped around another into one Compose,
    whose transforms then all receive the *unflattened* input of the step (BatchSizeTransform reshapes it back
    for the workers); a stateful transform added later, such as the per-group ``RewardSum`` of
    :meth:`lit_marl.envs.Task.make_env`, would add ``[workers, per_worker]`` returns to ``[num_envs]`` rewards.
    torchrl does not merge into subclasses, so transforms added later wrap this env and see ``[num_envs]`` only.
    """

    def __init__(self, env: ParallelEnv) -> None:
        super().__init__(env, BatchSizeTransform(reshape_fn=lambda td: td.flatten(0, 1)))

    @override
    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        # BatchSizeTransform reshapes steps' inputs back to [workers, per_worker] but not a partial reset's: the
        # "_reset" flags of env e would be read as worker e's. Unflatten them here.
        workers = self.base_env
        if tensordict is not None:
            # only the reset flags the caller set: the other entries are what outer transforms made of the workers'
            # data (e.g. flattened observations) and must not be copied into the workers' shared buffers
            flags = TensorDict(batch_size=tensordict.batch_size)
            for key in self.reset_keys:
                if key in tensordict.keys(include_nested=True):
                    flags.set(key, tensordict.get(key))
            tensordict = flags.unflatten(0, workers.batch_size)
        tensordict_reset = workers._reset(tensordict, **kwargs)
        workers._complete_done(workers.full_done_spec, tensordict_reset)
        return tensordict_reset.flatten(0, 1)

    @property
    def _envs(self):
        """Episodes are in worker processes: there is no env object here to render."""
        return None
