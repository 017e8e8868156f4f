"""Batched partial resets of VMAS environments (issue 33).

torchrl's ``VmasEnv._reset`` resets the finished environments of a batch one at a time
(``for env_index, to_reset in enumerate(envs_to_reset): if to_reset: reset_at(env_index)``). In VMAS one
environment's ``reset_at`` costs about as much as resetting the whole batch, and on balance some environment finishes
at almost every step, so at 600 environments two thirds of a collection step went to resets (and on a GPU each
``if to_reset`` is a host synchronisation).

:class:`BatchedResetVmasEnv` resets every environment in one batched call and puts the unfinished ones back:

1. capture: every tensor of the simulator whose first dimension is the batch (each entity's state and action, the
   scenario's own batched tensors such as shaping terms, sensors' last readings, the step counter), found by walking
   the VMAS objects (environment, scenario, world, entities, their states, actions, sensors, dynamics) and the lists
   and dicts they hold;
2. ``Environment.reset()``: VMAS's own batched reset of all environments, drawing from VMAS's random state;
3. restore: each captured tensor becomes ``torch.where(finished, after_reset, before)``.

The finished environments so hold exactly what VMAS's batched reset gives them; the unfinished ones are bitwise what
they were. No Python loop over environments and no host synchronisation: the mask stays a tensor.

What the batched path cannot see (state kept in Python numbers, or in a tensor without the batch dimension, that a
reset changes) would make it wrong: each reset compares those before and after (a handful of small values) and, if
one changed, puts everything back as it was, resets per environment as torchrl does, and says so once in a warning
naming the scenario and the value; that environment stays on the per-environment path. ``batched_resets=False`` (the
:class:`~lit_marl.envs.VmasTask` option) keeps torchrl's per-environment resets throughout: the differential checks
against BenchMARL, which resets that way, use it.

Random numbers: a batched reset draws for every environment (VMAS's reset draws a batch of positions), the
per-environment path for the finished ones only, so the two paths give finished environments different (equally
distributed) starts from the same seed. Both draw from VMAS's random state, which checkpoints save.
"""

from __future__ import annotations

import functools
import types
import warnings
from typing import Any

import torch
import vmas
from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase
from torchrl.envs import VmasEnv
from typing_extensions import override

#: leaf values compared before and after a batched reset (state the batched path cannot restore per environment)
_SCALARS = (bool, int, float, str)


@functools.cache
def _is_vmas_class(cls: type) -> bool:
    # a scenario's class is loaded from its file with no module name of VMAS's; its base class has one
    return any((c.__module__ or "").startswith("vmas.") for c in cls.__mro__[:-1])


_TENSOR, _SCALAR, _CONTAINER, _HOLDER, _OTHER = range(5)


@functools.cache
def _kind(cls: type) -> int:
    """What the walk does with a value of this class: keep it (a tensor, or a scalar to compare), walk into it (a
    list, tuple or dict; VMAS's objects and any other plain object they hold, such as a scenario's own helper classes
    like football's scripted opponents, defined in the scenario's file), or pass it by. Decided once per class: a
    reset walks a few hundred values, and asking each one's ``isinstance`` questions was half of the walk's time."""
    if issubclass(cls, torch.Tensor):
        return _TENSOR
    if issubclass(cls, _SCALARS) or cls is type(None):
        return _SCALAR
    if issubclass(cls, (list, tuple, dict)):
        return _CONTAINER
    if _is_vmas_class(cls):
        return _HOLDER
    # instances with a __dict__ (a class without one has a zero offset), but not classes, modules or functions
    plain = getattr(cls, "__dictoffset__", 0) != 0 and not issubclass(
        cls, (type, types.ModuleType, types.FunctionType, types.MethodType))
    return _HOLDER if plain else _OTHER


class SimulatorState:
    """Where a VMAS environment keeps its state, by path from the environment
    (``Environment.scenario._world._agents[0]._state._pos``): ``batched`` tensors, whose first dimension is the
    batch, and ``unbatched`` values (tensors without the batch dimension, Python numbers and strings), each as
    ``(owner, name, value)``; with ``copy`` the tensors are copies (a capture before a reset).

    Found afresh each time: scenarios create some tensors lazily (on their first reward), and a reset may replace a
    tensor, or the object holding it, by a new one rather than write into it.
    """

    def __init__(self, root: Any, num_envs: int, copy: bool) -> None:
        self.num_envs = num_envs
        self.copy = copy
        self.batched: dict[str, tuple[Any, Any, torch.Tensor]] = {}
        self.unbatched: dict[str, tuple[Any, Any, Any]] = {}
        # for undo(): every reference to an object or container, and each list's and dict's items
        self.links: list[tuple[Any, Any, Any]] = []
        self.contents: list[tuple[list | dict, list | dict]] = []
        self._walk(root, set(), type(root).__name__)

    def _walk(self, obj: Any, seen: set[int], where: str) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        is_tuple = isinstance(obj, tuple)
        is_dict = isinstance(obj, dict)
        if isinstance(obj, list) or is_tuple:
            items = enumerate(obj)
            if self.copy and not is_tuple:
                self.contents.append((obj, list(obj)))
        elif is_dict:
            items = obj.items()
            if self.copy:
                self.contents.append((obj, dict(obj)))
        elif _kind(type(obj)) == _HOLDER:
            items = vars(obj).items()
        else:
            return
        for i, (name, value) in enumerate(list(items)):
            kind = _kind(type(value))
            if kind == _OTHER:
                continue
            # dict keys may be objects (VMAS maps entities to indices): named by their position
            here = f"{where}.{name}" if isinstance(name, str) and not is_dict else \
                f"{where}[{name if isinstance(name, (int, str)) else i}]"
            if kind == _TENSOR:
                kept = value.detach().clone() if self.copy else value
                # a tuple's items cannot be assigned: a tensor in one must come through a reset unchanged
                if value.dim() >= 1 and value.shape[0] == self.num_envs and not is_tuple:
                    self.batched[here] = (obj, name, kept)
                else:
                    self.unbatched[here] = (obj, name, kept)
            elif kind == _SCALAR:
                self.unbatched[here] = (obj, name, value)
            else:
                if self.copy and not is_tuple:
                    self.links.append((obj, name, value))
                self._walk(value, seen, here)

    def difference(self, after: SimulatorState, values: bool = True) -> str | None:
        """What keeps ``after`` (the state a reset left) from being put back per environment from this capture: a
        batched tensor that appeared, vanished or changed shape, or an unbatched value the reset changed (the first
        one's path and what happened to it); None where there is nothing. ``values=False`` leaves the values of
        unbatched tensors unread (reading them is a host synchronisation)."""
        for path in self.batched.keys() ^ after.batched.keys():
            return f"{path} ({'appeared' if path in after.batched else 'vanished'} in a reset)"
        for path, (_, _, before) in self.batched.items():
            now = after.batched[path][2]
            if now.shape != before.shape or now.dtype != before.dtype:
                return f"{path} (shape or dtype changed in a reset)"
        tensors = []
        for path, (_, _, before) in self.unbatched.items():
            now = after.unbatched.get(path, (None, None, _MISSING))[2]
            if isinstance(before, torch.Tensor):
                if not isinstance(now, torch.Tensor) or now.shape != before.shape:
                    return f"{path} (changed in a reset)"
                tensors.append((path, now, before))
            elif type(now) is not type(before) or now != before:
                return f"{path} (changed in a reset: {before!r} -> {now!r})"
        if tensors and values:  # one host synchronisation for all of them
            changed = torch.stack([(now != before).any() for _, now, before in tensors])
            if changed.any():
                return f"{tensors[int(changed.nonzero()[0])][0]} (changed in a reset)"
        return None

    def undo(self) -> None:
        """Put everything captured back as it was (a capture made with ``copy``): the items of every list and dict,
        every reference to an object, then every value."""
        for container, items in self.contents:
            if isinstance(container, list):
                container[:] = items
            else:
                container.clear()
                container.update(items)
        for owner, name, value in self.links:
            _assign(owner, name, value)
        for owner, name, value in (*self.batched.values(), *self.unbatched.values()):
            if not isinstance(owner, tuple):  # a tuple comes back whole, through the reference to it
                _assign(owner, name, value)

    def put_back(self, after: SimulatorState, finished: torch.Tensor) -> None:
        """Every batched tensor of ``after`` becomes ``torch.where(finished, after, capture)``."""
        merged: dict[int, torch.Tensor] = {}
        for path, (owner, name, now) in after.batched.items():
            if id(now) not in merged:  # two paths to one tensor: one result, still shared
                mask = finished.reshape(-1, *([1] * (now.dim() - 1)))
                merged[id(now)] = torch.where(mask, now, self.batched[path][2])
            _assign(owner, name, merged[id(now)])


def _assign(owner: Any, name: Any, value: Any) -> None:
    if isinstance(owner, (list, dict)):
        owner[name] = value
    else:
        setattr(owner, name, value)


_MISSING = object()
#: the scenarios (of VMAS 1.5.2) whose batched resets are checked bitwise against VMAS's own by
#: ``tests/envs/test_vmas_batched.py``; the others keep state the batched path cannot put back per environment
VERIFIED_VMAS = "1.5.2"


class BatchedResetVmasEnv(VmasEnv):
    """torchrl's ``VmasEnv`` whose partial resets are one batched VMAS reset (module docstring).

    Args:
        batched_resets: False keeps torchrl's reset of one environment at a time.
        (the rest as :class:`torchrl.envs.VmasEnv`)
    """

    def __init__(self, *args: Any, batched_resets: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: why this env resets one environment at a time (None: it resets in one batch)
        self.per_env_reason: str | None = None if batched_resets else "task.batched_resets is false"
        self._checked_values = False
        if batched_resets:
            reason = per_env_reason(self.scenario_name)
            if reason is not None:
                self._fall_back(reason)

    # VMAS's own settings, which torchrl's VmasEnv reads at every step and reset through its ``__getattr__`` (that
    # lists the module's attributes twice per lookup: ~0.1 ms each, three or four lookups a step)
    @property
    def num_envs(self) -> int:
        return self._env.num_envs

    @property
    def n_agents(self) -> int:
        return self._env.n_agents

    @property
    def continuous_actions(self) -> bool:
        return self._env.continuous_actions

    def _fall_back(self, reason: str) -> None:
        self.per_env_reason = reason
        _notice(f"VMAS scenario {self.scenario_name!r} resets one environment at a time: {reason}")

    @override
    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        reset = None if tensordict is None else tensordict.get("_reset", None)
        if reset is None or self.per_env_reason is not None or self._env.grad_enabled:
            # a whole reset; or torchrl's per-environment loop (with gradients through the simulator, the copies
            # put back would cut the graph of the unfinished environments)
            return super()._reset(tensordict, **kwargs)
        before = SimulatorState(self._env, self.num_envs, copy=True)
        self._env.reset(return_observations=False)
        after = SimulatorState(self._env, self.num_envs, copy=False)
        # the unbatched tensors' values are read at this env's first batched reset only (one host synchronisation):
        # a reset that changes one changes it each time (the scenarios' tests check every reset of theirs)
        problem = before.difference(after, values=not self._checked_values)
        self._checked_values = True
        if problem is not None:
            before.undo()
            self._fall_back(f"a reset changes what the batched path cannot put back per environment: {problem}")
            return super()._reset(tensordict, **kwargs)
        before.put_back(after, reset.reshape(-1).to(self.device))
        return self._observe()

    def _observe(self) -> TensorDictBase:
        """What ``VmasEnv._reset`` returns after resetting: every group's observations (and infos), done and
        terminated."""
        obs, dones, infos = self._env.get_from_scenario(get_observations=True, get_infos=True, get_rewards=False,
                                                        get_dones=True)
        dones = self.read_done(dones)
        source: dict[str, Any] = {"done": dones, "terminated": dones.clone()}
        for group, agent_names in self.group_map.items():
            agent_tds = []
            for agent_name in agent_names:
                i = self.agent_names_to_indices_map[agent_name]
                agent_td = TensorDict({"observation": self.read_obs(obs[i])}, batch_size=self.batch_size,
                                      device=self.device)
                info = self.read_info(infos[i])
                if info is not None:
                    agent_td.set("info", info)
                agent_tds.append(agent_td)
            stacked = LazyStackedTensorDict.maybe_dense_stack(agent_tds, dim=1)
            source[group] = stacked if self.het_specs_map[group] else stacked.to_tensordict()
        return TensorDict(source, batch_size=self.batch_size, device=self.device)


#: the VMAS scenarios whose state a reset changes without a batch dimension, or that the batched path cannot see
#: (measured on VMAS 1.5.2 by ``tests/envs/test_vmas_batched.py``, which fails if this list is wrong either way)
PER_ENV_SCENARIOS: dict[str, str] = {
    "ball_passage": "a reset changes the landmarks' neighbour attribute, one for all environments",
    "football": "its scripted opponents keep per-episode state without a batch dimension",
    "het_mass": "a reset draws the agents' masses, one for all environments",
    "road_traffic": "a reset restarts a wall-clock timer kept without a batch dimension",
    "simple_push": "a reset reassigns the agents' goals and colours, one for all environments",
    "simple_reference": "a reset reassigns the agents' goals and colours, one for all environments",
    "simple_speaker_listener": "a reset reassigns the goal and colours, one for all environments",
}


def per_env_reason(scenario: Any) -> str | None:
    """Why ``scenario`` resets one environment at a time (None: in one batch)."""
    if not isinstance(scenario, str):
        return "a scenario object (not one of VMAS's by name) is not checked for batched resets"
    if vmas.__version__ != VERIFIED_VMAS:
        return f"batched resets are checked on VMAS {VERIFIED_VMAS}, this is {vmas.__version__}"
    return PER_ENV_SCENARIOS.get(scenario)


_NOTICES: set[str] = set()


def _notice(message: str) -> None:
    """A one-line warning, once per process."""
    if message not in _NOTICES:
        _NOTICES.add(message)
        warnings.warn(message, stacklevel=3)
