"""Replay buffers' home: the per-group buffers of off-policy algorithms (storage, sampler, checkpoint state),
prioritized experience replay in plain torch, and EPyMARL's whole-episode sampling (:class:`EpisodeSampler`).
(The files a checkpoint keeps them in: ``lit_marl.sidecars``.)

torchrl's ``PrioritizedSampler`` keeps its sum/min segment trees in a C++ extension; torchrl 0.14.1's
extension does not load against torch 2.13 (undefined symbol), so prioritized replay would not run on
this stack at all. This sampler keeps the priorities in one tensor and samples by inverse transform
(``cumsum`` + ``searchsorted``): O(N) per draw instead of O(log N), about a millisecond for a million
transitions on a CPU, and it draws from torch's global generator, so it is restored by a checkpoint's
RNG state like everything else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from tensordict import TensorDict, TensorDictBase
from tensordict.utils import unravel_key_list
import torch
from torchrl.data import LazyMemmapStorage, LazyTensorStorage, RandomSampler, SliceSampler, TensorDictReplayBuffer
from torchrl.data.replay_buffers.samplers import Sampler
from torchrl.data.replay_buffers.storages import Storage
from typing_extensions import override

#: where a replay buffer keeps its transitions (``buffer_device``): CPU memory, the training device, or a memory-mapped
#: file in the run folder
BUFFER_DEVICES = ("cpu", "train", "disk")
#: the episode number the torchrl collector gives every step (sequence sampling keeps slices inside one episode;
#: whole-episode sampling numbers episodes by it)
TRAJECTORY_KEY = ("collector", "traj_ids")


class _StateInFile:
    """A sampler's ``dumps``/``loads`` (torchrl's saving of a buffer to a folder): its ``state_dict`` in one file."""

    #: the file's name in the folder
    state_file: ClassVar[str]

    def dumps(self, path) -> None:
        """Save the sampler's state (:meth:`state_dict`) into ``path``, the folder torchrl saves the buffer to."""
        torch.save(self.state_dict(), Path(path) / self.state_file)

    def loads(self, path) -> None:
        """Restore the state :meth:`dumps` saved into ``path``."""
        self.load_state_dict(torch.load(Path(path) / self.state_file, weights_only=True))


class TensorPrioritizedSampler(_StateInFile, Sampler):
    """Proportional prioritized sampling (Schaul et al., 2016, "Prioritized Experience Replay").

    Transition ``i`` is drawn with probability ``p_i / sum_j p_j`` where ``p_i = (|δ_i| + eps) ** alpha``;
    new transitions get the largest priority seen so far. Each sample carries its importance weight
    ``(p_i / min_j p_j) ** -beta`` under ``"priority_weight"`` (torchrl losses read it).

    Args:
        max_capacity: the storage's capacity.
        alpha: how strongly priorities skew sampling (0: uniform).
        beta: importance-sampling correction exponent.
        eps: added to every priority so none is zero.
    """

    state_file = "prioritized_sampler.pt"

    def __init__(self, max_capacity: int, alpha: float, beta: float, eps: float = 1e-8) -> None:
        self.max_capacity = max_capacity
        self.alpha = alpha
        self.beta = beta
        self.eps = eps
        self._empty()

    @override
    def _empty(self) -> None:
        self._priority = torch.zeros(self.max_capacity, dtype=torch.float64)
        self._max_priority = 1.0

    @property
    @override
    def default_priority(self) -> float:
        """The largest priority seen so far, which a new transition gets (so each is sampled soon after it is
        stored)."""
        return self._max_priority

    def _transform(self, priority: torch.Tensor) -> torch.Tensor:
        return (priority.to(torch.float64) + self.eps) ** self.alpha

    @override
    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Draw ``batch_size`` indices of ``storage`` in proportion to their priorities (with replacement); returns
        them and their importance weights ``{"priority_weight": (p_i / min_j p_j) ** -beta}``."""
        n = len(storage)
        if n == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        priority = self._priority[:n]
        cumulative = priority.cumsum(0)
        mass = torch.rand(batch_size, dtype=torch.float64) * cumulative[-1]
        index = torch.searchsorted(cumulative, mass, right=True).clamp_max(n - 1)
        weight = (priority[index] / priority.min()) ** (-self.beta)
        return index, {"priority_weight": weight.to(torch.float32)}

    def _set_default(self, index: torch.Tensor | int) -> None:
        self._priority[torch.as_tensor(index, dtype=torch.long)] = self._transform(torch.tensor(self._max_priority))

    @override
    def add(self, index: int) -> None:
        """A new transition at ``index`` gets :attr:`default_priority`."""
        self._set_default(index)

    @override
    def extend(self, index: torch.Tensor) -> None:
        """New transitions at ``index`` get :attr:`default_priority`."""
        self._set_default(index)

    @torch.no_grad()
    @override
    def update_priority(self, index: torch.Tensor | int, priority: torch.Tensor | float, *,
                        storage: Storage | None = None) -> None:
        """Set the priorities of the transitions at ``index`` from their new TD errors ``priority`` (one value, or one
        per index), as ``(|δ| + eps) ** alpha``, and raise the largest priority seen."""
        index = torch.as_tensor(index, dtype=torch.long).reshape(-1).cpu()
        priority = torch.as_tensor(priority).detach().reshape(-1).cpu()
        if priority.numel() == 1:
            priority = priority.expand(index.shape)
        self._max_priority = max(self._max_priority, float(priority.max()))
        self._priority[index] = self._transform(priority)

    @override
    def mark_update(self, index: torch.Tensor | int, *, storage: Storage | None = None) -> None:
        """Transitions written at ``index`` (torchrl's writer calls it on every write, a full buffer's overwrites
        included) get :attr:`default_priority`."""
        self._set_default(index)

    @override
    def state_dict(self) -> dict[str, Any]:
        """The priorities and the largest one seen (checkpoints carry them with the buffer)."""
        return {"priority": self._priority.clone(), "max_priority": self._max_priority}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self._priority = state_dict["priority"].clone()
        self._max_priority = float(state_dict["max_priority"])

    @property
    @override
    def ran_out(self) -> bool:
        """Never: a prioritized sampler draws with replacement, so there is no end of an epoch."""
        return False


class EpisodeSampler(_StateInFile, Sampler):
    """Whole episodes, as EPyMARL's episode buffer samples them (Papoudakis et al., 2021): each draw is every stored
    step of ``batch_size`` distinct episodes, chosen uniformly among the ``window`` most recent complete ones.

    The storage keeps transitions; this sampler numbers the episodes as rows arrive (:meth:`extend` reads each new
    row's collector episode id and ``done``), so ids the collector repeats after a resume never merge two episodes.
    An episode is complete once its first and last steps are both stored: episodes still running, and old ones the
    storage has partly overwritten, are never drawn. Fewer complete episodes than ``batch_size`` are drawn all (the
    first updates of a run; EPyMARL waits for ``batch_size`` of them). Draws use torch's global generator (restored by
    a checkpoint's RNG state).

    Args:
        storage: the buffer's storage (read for the ids and ``done`` of new rows).
        window: episodes sampled from (EPyMARL's ``buffer_size``); the storage must hold at least this many.
        traj_key: the collector's episode id of each step.
        done_key: the step ended its episode.
    """

    state_file = "episode_sampler.pt"

    def __init__(self, storage: Storage, window: int, traj_key: Any = TRAJECTORY_KEY,
                 done_key: Any = ("next", "done")) -> None:
        self.storage = storage
        self.window = window
        self.traj_key = traj_key
        self.done_key = done_key
        self._empty()

    @override
    def _empty(self) -> None:
        capacity = self.storage.max_size
        self._episode = torch.full((capacity,), -1, dtype=torch.long)  # the episode number of each row
        self._first = torch.zeros(capacity, dtype=torch.bool)  # the row is its episode's first step
        self._last = torch.zeros(capacity, dtype=torch.bool)  # ... its last step
        self._open: dict[int, int] = {}  # collector id -> episode number, for episodes not ended yet
        self._next_episode = 0
        self._complete: torch.Tensor | None = None  # complete_episodes() until the next write

    @override
    def extend(self, index: torch.Tensor) -> None:
        index = torch.as_tensor(index, dtype=torch.long).reshape(-1).cpu()
        rows = self.storage.get(index)
        ids = rows.get(self.traj_key).reshape(-1).cpu()
        done = rows.get(self.done_key).reshape(index.numel(), -1).any(-1).cpu()
        episode = torch.empty_like(ids)
        first = torch.zeros_like(done)
        for collector_id in torch.unique(ids).tolist():  # ascending: later episodes get larger numbers
            rows_of = ids == collector_id
            number = self._open.get(collector_id)
            if number is None:
                number = self._open[collector_id] = self._next_episode
                self._next_episode += 1
                first[rows_of.nonzero()[0]] = True
            episode[rows_of] = number
        for collector_id in torch.unique(ids[done]).tolist():
            del self._open[collector_id]
        self._episode[index] = episode
        self._first[index] = first
        self._last[index] = done
        self._complete = None

    @override
    def add(self, index: int) -> None:
        self.extend(torch.tensor([index]))

    def complete_episodes(self) -> torch.Tensor:
        """The numbers of the episodes whose first and last steps are stored, ascending."""
        if self._complete is None:
            n = len(self.storage)
            episode = self._episode[:n]
            started = episode[self._first[:n]]
            ended = episode[self._last[:n]]
            self._complete = torch.unique(started[torch.isin(started, ended)])
        return self._complete

    @override
    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        recent = self.complete_episodes()[-self.window:]
        if recent.numel() == 0:
            raise RuntimeError("no complete episode in the replay buffer yet: whole-episode sampling needs an "
                               "episode to end within the first collected batch (frames_per_batch // num_envs >= "
                               "the task's max_steps)")
        chosen = recent[torch.randperm(recent.numel())[:batch_size]]
        return torch.isin(self._episode[: len(storage)], chosen).nonzero().squeeze(-1), {}

    @override
    def update_priority(self, index, priority, *, storage=None) -> None:
        return

    @override
    def mark_update(self, index, *, storage=None) -> None:
        return

    @property
    @override
    def default_priority(self) -> float:
        return 1.0

    @property
    @override
    def ran_out(self) -> bool:
        return False

    @override
    def state_dict(self) -> dict[str, Any]:
        n = len(self.storage)
        return {"episode": self._episode[:n].clone(), "first": self._first[:n].clone(),
                "last": self._last[:n].clone(), "next_episode": self._next_episode}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._empty()
        n = state_dict["episode"].numel()
        self._episode[:n] = state_dict["episode"]
        self._first[:n] = state_dict["first"]
        self._last[:n] = state_dict["last"]
        self._next_episode = int(state_dict["next_episode"])
        # a resumed run's collector starts new episodes (and may reuse ids): the ones cut by the stop stay incomplete


def buffer_state(buffer: TensorDictReplayBuffer) -> dict[str, Any]:
    """The filled part of a buffer (not its whole capacity: an early checkpoint of a 1M-transition buffer
    would otherwise be mostly zeros), its write cursor and its sampler's state, as plain tensors."""
    n = len(buffer)
    # clone: a slice is a view, and torch.save writes a view's whole underlying storage (all of the capacity)
    data = buffer.storage.get(slice(0, n)).exclude("index").clone() if n else TensorDict()
    return {
        "data": data.to_dict(),
        # nested TensorDicts keep their own batch dims (e.g. a group's [n, n_agents])
        "batch_sizes": {"/".join(unravel_key_list([key])[0] if isinstance(key, tuple) else (key,)): list(value.batch_size)
                        for key, value in data.items(True) if isinstance(value, TensorDictBase)},
        "length": n,
        "cursor": int(buffer._writer._cursor),
        "write_count": int(buffer._writer._write_count),
        "sampler": buffer.sampler.state_dict(),
    }


def load_buffer_state(buffer: TensorDictReplayBuffer, state: dict[str, Any]) -> None:
    n = state["length"]
    if n:
        data = TensorDict(state["data"], batch_size=[n])
        for key, batch_size in sorted(state["batch_sizes"].items(), key=lambda item: item[0].count("/")):
            data.get(tuple(key.split("/"))).batch_size = torch.Size(batch_size)
        # writing from position 0 puts every transition back where it was, even after wrap-around
        buffer.extend(data)
    buffer._writer._cursor = state["cursor"]
    buffer._writer._write_count = state["write_count"]
    buffer.sampler.load_state_dict(state["sampler"])


@dataclass(frozen=True)
class ReplayShape:
    """What every group's replay buffer of one algorithm looks like.

    Args:
        capacity: transitions kept (``memory_size``); the oldest are overwritten.
        where: one of :data:`BUFFER_DEVICES`.
        priority: ``(alpha, beta)`` of prioritized replay, or None for uniform sampling.
        slice_length: with recurrent policies, the steps of each sampled slice of one episode (burn-in + sequence);
            None samples single transitions.
        episodes: sample whole episodes among this many most recent complete ones (:class:`EpisodeSampler`); None
            samples single transitions.
    """

    capacity: int
    where: str = "cpu"
    priority: tuple[float, float] | None = None
    slice_length: int | None = None
    episodes: int | None = None


def replay_buffer(group: str, shape: ReplayShape, device: torch.device, scratch_dir: Path) -> TensorDictReplayBuffer:
    """The replay buffer of ``group``: its TD errors (``(group, "td_error")``) are its priorities."""
    if shape.where == "disk":
        storage = LazyMemmapStorage(shape.capacity, scratch_dir=scratch_dir / group, existsok=True)
    else:
        storage = LazyTensorStorage(shape.capacity, device="cpu" if shape.where == "cpu" else device)
    if shape.slice_length is not None:
        # slices of consecutive steps of one episode (the collector numbers each episode); burn-in steps first
        sampler = SliceSampler(slice_len=shape.slice_length, traj_key=TRAJECTORY_KEY, end_key=None,
                               strict_length=True)
    elif shape.episodes is not None:
        sampler = EpisodeSampler(storage, shape.episodes)
    elif shape.priority is not None:
        sampler = TensorPrioritizedSampler(shape.capacity, alpha=shape.priority[0], beta=shape.priority[1])
    else:
        sampler = RandomSampler()
    return TensorDictReplayBuffer(storage=storage, sampler=sampler, priority_key=(group, "td_error"))


def group_buffers(shapes: dict[str, ReplayShape], device: torch.device, scratch_dir: Path,
                  restored: dict[str, dict[str, Any]] | None = None) -> dict[str, TensorDictReplayBuffer]:
    """One :func:`replay_buffer` per group of ``shapes``, filled from ``restored`` (:func:`buffer_state` per group)
    if given."""
    buffers = {group: replay_buffer(group, shape, device, scratch_dir) for group, shape in shapes.items()}
    for group, state in (restored or {}).items():
        load_buffer_state(buffers[group], state)
    return buffers
