"""How a run trains on what it collects: the loop object it holds (one Lightning epoch is one iteration).

A learner names the loop it needs (:attr:`~lit_marl.algorithms.learner.GroupLearner.loop`, and ``sequential_agents``
where its agents train one after another); the run builds that loop once, with its sizes (arguments of the algorithm,
declared here: ``n_minibatch_iters`` and ``minibatch_size`` on-policy, ``n_optimizer_steps`` and ``train_batch_size``
off-policy), and hands it to Lightning as the training data. A loop is a sized iterable of one iteration's minibatches:
its length tells Lightning where the epoch ends, so it never fetches (and so never collects) ahead of the last step.
What it iterates is at the end of this module: the on-policy training batch and its shuffled minibatches
(:func:`training_batch`, :func:`shuffled_minibatches`), the replay buffers' samples (:func:`replay_minibatches`).

:class:`SequentialAgents` wraps an on-policy loop for HAPPO and HATRPO (Kuba et al., 2022): a fresh random order of
the agents each iteration, each agent's turn on the advantage times the factor of the earlier agents' ratios, the
critic last. The order, the factor and the phase live in it; each minibatch carries its phase (:func:`phase_of`) to
the learners, which read nothing the loop set on them. Over an off-policy loop (HASAC, Liu et al., 2024) the order is
drawn for every update: each sampled minibatch trains the critics first, then each agent in turn, and after each turn
the agent's learner re-samples that agent's action from its updated policy (:meth:`after_turn`), so the agents after
it condition on it; the update's last turn closes it (:meth:`TrainingLoop.closes_update`: target networks move then).
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from functools import cached_property
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import TensorDictReplayBuffer
from typing_extensions import override

from lit_marl.errors import ConfigError, check_types, positive_int

#: the batch entry HAPPO's factor (the product of the earlier agents' probability ratios) travels in
FACTOR = "happo_factor"
#: the minibatch entry a phase travels in (a non-tensor entry)
PHASE = "phase"


@dataclass(frozen=True)
class Phase:
    """What a minibatch of a sequential loop trains: ``actor`` — agent ``agent`` of ``group``; ``critic`` — every
    group's critic."""

    kind: str
    group: str | None = None
    agent: int | None = None
    #: the last step of an update (off-policy: the target networks move after it)
    closes: bool = False


CRITIC = Phase("critic")


def phase_of(batch: TensorDictBase) -> Phase | None:
    """The phase a minibatch carries (None outside a sequential loop)."""
    return batch.get_non_tensor(PHASE) if PHASE in batch.keys() else None


class TrainingLoop(ABC):
    """One iteration's minibatches for the run that holds this loop; a subclass declares its sizes in ``__init__``
    (they become arguments of every algorithm whose learner names it)."""

    #: trains on the frames just collected (True) or on replay buffers (False)
    on_policy: ClassVar[bool]

    def __init__(self, run: Any) -> None:
        #: the run (a :class:`~lit_marl.algorithms.MarlAlgorithm`) that holds this loop and collects for it
        self.run = run

    @property
    @abstractmethod
    def batch_size(self) -> int:
        """Frames per minibatch (on-policy) or transitions per group per optimizer step (off-policy)."""

    @property
    @abstractmethod
    def global_sizes(self) -> dict[str, int]:
        """The minibatch size by its argument's name (DDP splits it over the processes)."""

    def validate(self) -> None:
        """Refuse sizes that do not fit the run's (before any learner is built)."""

    @abstractmethod
    def __len__(self) -> int:
        """Optimizer steps per iteration."""

    @abstractmethod
    def __iter__(self) -> Iterator[TensorDictBase]:
        """Collect this iteration's frames (through the run), then yield its minibatches."""

    def after_backward(self) -> None:
        """Between backward and the optimizer step of each minibatch (a sequential loop keeps its phase's gradients)."""

    def closes_update(self, batch: TensorDictBase) -> bool:
        """Whether the optimizer step just taken on ``batch`` ends an update (then the learners' :meth:`after_step`
        runs: target networks, priorities); every step but within a sequential off-policy update."""
        return True


class OnPolicyLoop(TrainingLoop):
    """Trains ``n_minibatch_iters`` epochs of shuffled minibatches of ``minibatch_size`` frames on the frames just
    collected, then discards them (the PPO family).

    Args:
        n_minibatch_iters: passes (PPO epochs) over each collected batch.
        minibatch_size: frames per minibatch (one optimizer step each).
    """

    on_policy: ClassVar[bool] = True

    def __init__(self, run: Any, n_minibatch_iters: int = 45, minibatch_size: int = 400) -> None:
        self.n_minibatch_iters = positive_int("n_minibatch_iters", n_minibatch_iters)
        self.minibatch_size = positive_int("minibatch_size", minibatch_size)
        super().__init__(run)

    @property
    @override
    def batch_size(self) -> int:
        return self.minibatch_size

    @property
    @override
    def global_sizes(self) -> dict[str, int]:
        return {"minibatch_size": self.minibatch_size}

    @override
    def validate(self) -> None:
        frames = self.run.frames_per_batch
        if self.minibatch_size > frames:
            raise ConfigError(f"minibatch_size: {self.minibatch_size} is larger than frames_per_batch={frames}; "
                              f"allowed: 1..{frames}")

    def minibatches_per_epoch(self) -> int:
        """Optimizer steps per pass over the batch (with recurrent networks, counted in trajectory chunks)."""
        chunk = self.run.chunk_length
        if chunk is None:
            return self.run.frames_per_batch // self.minibatch_size
        return (self.run.frames_per_batch // chunk) // (self.minibatch_size // chunk)

    @override
    def __len__(self) -> int:
        return self.n_minibatch_iters * self.minibatches_per_epoch()

    def prepare(self) -> tuple[TensorDictBase, int]:
        """This iteration's processed frames and this process's minibatch size (:func:`training_batch`)."""
        return training_batch(self.run, self.minibatch_size)

    def minibatches(self, batch: TensorDictBase, size: int) -> Iterator[TensorDictBase]:
        """``n_minibatch_iters`` passes over ``batch`` in shuffled minibatches of ``size`` (each HAPPO turn's too)."""
        return shuffled_minibatches(batch, self.n_minibatch_iters, size)

    @override
    def __iter__(self) -> Iterator[TensorDictBase]:
        yield from self.minibatches(*self.prepare())


class OffPolicyLoop(TrainingLoop):
    """Adds each iteration's frames to every group's replay buffer, then trains ``n_optimizer_steps`` minibatches of
    ``train_batch_size`` transitions per group sampled from them.

    Args:
        n_optimizer_steps: minibatches (optimizer steps) per iteration.
        train_batch_size: transitions per group per minibatch.
    """

    on_policy: ClassVar[bool] = False

    def __init__(self, run: Any, n_optimizer_steps: int = 1000, train_batch_size: int = 128) -> None:
        self.n_optimizer_steps = positive_int("n_optimizer_steps", n_optimizer_steps)
        self.train_batch_size = positive_int("train_batch_size", train_batch_size)
        super().__init__(run)

    @property
    @override
    def batch_size(self) -> int:
        return self.train_batch_size

    @property
    @override
    def global_sizes(self) -> dict[str, int]:
        return {"train_batch_size": self.train_batch_size}

    @override
    def __len__(self) -> int:
        return self.n_optimizer_steps

    @override
    def __iter__(self) -> Iterator[TensorDictBase]:
        yield from replay_minibatches(self.run, self.n_optimizer_steps, self.train_batch_size)


class SequentialAgents(TrainingLoop):
    """The agents of every group trained one after another over an inner loop; the order is a fresh random
    permutation of all agents (torch's generator: a resumed run draws the same orders), kept in :attr:`agent_orders`.

    Over an on-policy loop (HAPPO's scheme), once per iteration: the iteration's batch as the inner loop prepares it,
    each agent's turn — the inner loop's minibatches, or one step on the whole batch where the learners take
    ``whole_batch_turns`` (HATRPO) — after which the factor takes that agent's ratio; the critics last, on the inner
    loop's minibatches.

    Over an off-policy loop (HASAC's scheme), once per update, on each sampled minibatch: the critics first, then
    every learner draws its agents' actions from the current policies (:meth:`before_turns`), then each agent's turn,
    after which its learner re-samples that agent's action from the updated policy (:meth:`after_turn`, for every
    agent but the last); the last turn closes the update.

    Between backward and the step only the phase's parameters keep their gradients."""

    def __init__(self, inner: OnPolicyLoop | OffPolicyLoop, whole_batch_turns: bool = False) -> None:
        if not isinstance(inner, (OnPolicyLoop, OffPolicyLoop)):
            raise TypeError(f"SequentialAgents wraps an on-policy or off-policy loop, not {type(inner).__name__}")
        if whole_batch_turns and not inner.on_policy:
            raise TypeError("whole_batch_turns: one step per turn on the whole batch is an on-policy scheme (HATRPO)")
        super().__init__(inner.run)
        self.inner = inner
        self.whole_batch_turns = whole_batch_turns
        #: each iteration's (on-policy) or update's (off-policy) order of the agents, as ``group/agent`` names
        self.agent_orders: list[list[str]] = []
        self._phase: Phase | None = None

    on_policy = property(lambda self: self.inner.on_policy, doc="Whether the inner loop trains on fresh frames.")

    @property
    @override
    def batch_size(self) -> int:
        return self.inner.batch_size

    @property
    @override
    def global_sizes(self) -> dict[str, int]:
        return self.inner.global_sizes

    @override
    def validate(self) -> None:
        self.inner.validate()

    @cached_property
    def _roster(self) -> list[tuple[str, int, str]]:
        """Every agent as ``(group, index, "group/agent")``, found once (off-policy an order is drawn per update)."""
        group_map = self.run.task.group_map
        return [(group, i, f"{group}/{agent}") for group in self.run.groups for i, agent in enumerate(group_map[group])]

    def _order(self) -> list[tuple[str, int]]:
        """A fresh random order of every agent, recorded by name."""
        order = [self._roster[k] for k in torch.randperm(len(self._roster)).tolist()]
        self.agent_orders.append([name for _, _, name in order])
        return [(group, i) for group, i, _ in order]

    @override
    def __len__(self) -> int:
        if not self.on_policy:  # per update: the critics' step and one step per agent
            return len(self.inner) * (1 + len(self._roster))
        turn = 1 if self.whole_batch_turns else len(self.inner)
        return len(self._roster) * turn + len(self.inner)

    @override
    def __iter__(self) -> Iterator[TensorDictBase]:
        yield from (self._on_policy() if self.on_policy else self._off_policy())
        self._phase = None

    def _on_policy(self) -> Iterator[TensorDictBase]:
        run = self.run
        batch, size = self.inner.prepare()
        batch.set(FACTOR, torch.ones(batch.shape[0], 1, device=batch.device))
        for group, agent in self._order():
            phase = Phase("actor", group, agent)
            turn = [batch] if self.whole_batch_turns else self.inner.minibatches(batch, size)
            for minibatch in turn:
                yield self._carrying(minibatch, phase)
            learner = run.learners[group]
            with torch.no_grad():
                ratio = (learner.agent_log_prob(batch, agent)
                         - batch.get((group, "action_log_prob")).reshape(batch.shape[0], -1)[:, agent]).exp()
            batch.set(FACTOR, batch.get(FACTOR) * ratio.unsqueeze(-1))
        for minibatch in self.inner.minibatches(batch, size):
            yield self._carrying(minibatch, CRITIC)

    def _off_policy(self) -> Iterator[TensorDictBase]:
        learners = self.run.learners
        for minibatch in self.inner:  # a fresh sample the loop owns: each phase is marked on it (what one step
            # writes, the critics' TD errors for the priorities, the next sees)
            yield self._marked(minibatch, CRITIC)
            with torch.no_grad():
                for group, learner in learners.items():
                    learner.before_turns(minibatch.get(group))
            order = self._order()
            for k, (group, agent) in enumerate(order):
                last = k == len(order) - 1
                yield self._marked(minibatch, Phase("actor", group, agent, closes=last))
                if not last:  # the next update draws every action afresh
                    with torch.no_grad():
                        learners[group].after_turn(minibatch.get(group), agent)

    def _carrying(self, minibatch: TensorDictBase, phase: Phase) -> TensorDictBase:
        """The minibatch with its phase (a shallow copy: the loop's batch is not written)."""
        self._phase = phase
        carrying = minibatch.clone(recurse=False)
        carrying.set_non_tensor(PHASE, phase)
        return carrying

    def _marked(self, minibatch: TensorDictBase, phase: Phase) -> TensorDictBase:
        """The minibatch itself, marked with its phase."""
        self._phase = phase
        minibatch.set_non_tensor(PHASE, phase)
        return minibatch

    @override
    def after_backward(self) -> None:
        """Keep only the gradients of what this phase trains: a parameter without a gradient is left alone by Adam (no
        step from its moments), so each agent's weights move only in its own turn."""
        active = {id(p) for learner in self.run.learners.values() for p in learner.active_parameters(self._phase)}
        for p in self.run.parameters():
            if id(p) not in active:
                p.grad = None

    @override
    def closes_update(self, batch: TensorDictBase) -> bool:
        phase = phase_of(batch)
        return self.on_policy or phase is None or phase.closes


# ------------------------------------------------------------------ the data the loops iterate
class Collects(Protocol):
    """The run's collection (:class:`~lit_marl.algorithms.collection.Collection`) as the loops use it."""

    def collect(self) -> TensorDictBase: ...
    def mark_training_start(self) -> None: ...


class OnPolicySource(Protocol):
    """What :func:`training_batch` reads of the run it collects for (a ``MarlAlgorithm``)."""

    device: torch.device
    world_size: int
    chunk_length: int | None
    collection: Collects

    def process_batch(self, batch: TensorDictBase) -> TensorDictBase: ...
    def training_keys(self) -> list: ...


def training_batch(run: OnPolicySource, minibatch_size: int) -> tuple[TensorDictBase, int]:
    """This iteration's frames, collected and processed (without grad), reduced to the training keys and flattened
    (with recurrent networks: cut into trajectory chunks ``[chunks, chunk_length]``, in time order), on the training
    device; and this process's minibatch size (in frames, or in chunks)."""
    batch = run.collection.collect()
    run.collection.mark_training_start()  # training time includes processing the batch (GAE), as BenchMARL counts it
    with torch.no_grad():
        batch = run.process_batch(batch)
    batch = batch.select(*run.training_keys(), strict=False)
    if run.chunk_length is not None:
        batch = batch.reshape(-1, run.chunk_length).to(run.device)
        size = minibatch_size // run.world_size // run.chunk_length
    else:
        batch = batch.reshape(-1).to(run.device)
        size = minibatch_size // run.world_size  # DDP: each process's share of the global minibatch
    return batch, size


def shuffled_minibatches(batch: TensorDictBase, epochs: int, size: int) -> Iterator[TensorDictBase]:
    """``epochs`` passes over ``batch`` (its first dim) in shuffled minibatches of ``size`` (a remainder is left out)."""
    n = batch.shape[0]
    for _ in range(epochs):
        # one gather per epoch; each minibatch is a view of it (the same minibatches as a gather per step)
        shuffled = batch[torch.randperm(n, device=batch.device)]
        for start in range(0, n - size + 1, size):
            yield shuffled[start : start + size]


class OffPolicySource(Protocol):
    """What :func:`replay_minibatches` reads of the run it collects for (a ``MarlAlgorithm``)."""

    device: torch.device
    world_size: int
    chunk_length: int | None
    collection: Collects
    learners: Any  # by group: each has replay_frames(batch) (what its buffer stores) and burn_in (recurrent slices)

    def process_batch(self, batch: TensorDictBase) -> TensorDictBase: ...
    def replay_buffers(self) -> dict[str, TensorDictReplayBuffer]: ...


def replay_minibatches(run: OffPolicySource, steps: int, batch_size: int) -> Iterator[TensorDictBase]:
    """Collect ``frames_per_batch`` frames, add each group's part to that group's replay buffer, then yield ``steps``
    minibatches ``{group: sample}`` of ``batch_size`` transitions each (with a recurrent policy: slices of
    ``burn_in + chunk_length`` consecutive steps; with ``sample_episodes``: every step of ``batch_size`` episodes)."""
    batch = run.collection.collect()
    run.collection.mark_training_start()  # training time includes processing the batch and storing it
    with torch.no_grad():
        batch = run.process_batch(batch)
    buffers = run.replay_buffers()
    for group, buffer in buffers.items():
        buffer.extend(run.learners[group].replay_frames(batch))
    size = batch_size // run.world_size  # DDP: each process's share of the global minibatch
    if run.chunk_length is None:
        for _ in range(steps):
            samples = {group: buffer.sample(size).to(run.device) for group, buffer in buffers.items()}
            # whole episodes (EpisodeSampler): each group's sample has as many rows as its episodes have steps
            rows = {sample.batch_size[0] for sample in samples.values()}
            yield TensorDict(samples, batch_size=[size] if rows == {size} else [], device=run.device)
        return
    # recurrent policy: [slices, burn_in + chunk_length] of consecutive steps
    span = getattr(next(iter(run.learners.values())), "burn_in", 0) + run.chunk_length
    slices = max(1, size // run.chunk_length)
    for _ in range(steps):
        samples = {group: buffer.sample(slices * span).reshape(slices, span).to(run.device)
                   for group, buffer in buffers.items()}
        yield TensorDict(samples, batch_size=[slices, span], device=run.device)


def loop_sizes(loop: type[TrainingLoop]) -> list[str]:
    """The arguments that size ``loop``: those of its ``__init__`` after the run, and, where that ``__init__`` takes
    ``**kwargs``, those of the next class up whose ``__init__`` receives them (as the run's own signature follows
    them: a loop subclass that forwards ``**kwargs`` still gets the sizes its base declares)."""
    names: list[str] = []
    for klass in loop.__mro__:
        init = vars(klass).get("__init__")
        if init is None:
            continue
        parameters = list(inspect.signature(init).parameters.values())
        names += [p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
                  and p.name not in ("self", "run") and p.name not in names]
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            break
    return names


def loop_kind(learner: type) -> tuple[type[TrainingLoop], bool, bool]:
    """What makes two learners' loops one: the loop class, agents one after another, whole-batch turns."""
    return (learner.loop, bool(getattr(learner, "sequential_agents", False)),
            bool(getattr(learner, "whole_batch_turns", False)))


def loop_name(learner: type) -> str:
    """How ``learner``'s loop reads in a message."""
    loop, sequential, whole_batch = loop_kind(learner)
    name = "on-policy" if loop.on_policy else "off-policy"
    if sequential:
        return f"agents one after another{' (one step each on the whole batch)' if whole_batch else ''}, {name}"
    return name


def build_loop(run: Any, learner: type, sizes: dict[str, Any]) -> TrainingLoop:
    """The loop ``learner`` (a class) names, sized by ``sizes`` (refused by name where of the wrong type)."""
    loop, sequential, whole_batch = loop_kind(learner)
    check_types(loop.__init__, sizes)
    inner = loop(run, **sizes)
    return SequentialAgents(inner, whole_batch) if sequential else inner
