"""A user's own environment class, named by import path: a torchrl ``EnvBase``, a PettingZoo env or a Gymnasium env.

.. code-block:: yaml

    task:
      class_path: lit_marl.envs.CustomTask
      init_args:
        env_class: my_pkg.my_module.MyEnv     # importable from where lit-marl runs
        env_kwargs: {n_agents: 3}
        max_steps: 50

What the class is decides how it is built; algorithms see the same grouped keys either way:

- a **torchrl** :class:`~torchrl.envs.EnvBase` subclass must already speak the multi-agent API: a ``group_map``
  attribute ``{group: [agent names]}``, per group the nested keys ``(group, "observation")``,
  ``(group, "action")`` and ``(group, "reward")`` (the group's spec shaped ``[*batch, n_agents]``) and a root
  ``"done"``. If its constructor takes ``num_envs`` it is built once with ``num_envs`` (and ``device``, ``seed``
  where it takes them) and must have batch size ``[num_envs]``; otherwise each object is one episode and
  torchrl's :class:`~torchrl.envs.SerialEnv` batches ``num_envs`` of them.
- a **PettingZoo** ``ParallelEnv`` or ``AECEnv`` subclass is wrapped like :class:`~lit_marl.envs.PettingZooTask`'s
  tasks (agents grouped by name prefix; turn-based AEC envs with action masks for the waiting player).
- a **Gymnasium** ``gymnasium.Env`` subclass becomes a one-agent group, as :class:`~lit_marl.envs.GymnasiumTask`.

Episodes are cut at ``max_steps`` (torchrl's :class:`~torchrl.envs.StepCounter`, Gymnasium's ``TimeLimit``) where
the env does not end them itself. Everything is checked when the task is built, before any training.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import torch
from torchrl.data import Categorical, Composite
from torchrl.envs import EnvBase, StepCounter, TransformedEnv
from typing_extensions import override

from lit_marl.envs.base import Task
from lit_marl.envs.batching import batched_env
from lit_marl.envs.grouping import check_grouping
from lit_marl.envs.gymnasium import VECTORIZATION, GymnasiumTask
from lit_marl.envs.pettingzoo import PettingZooEntry, PettingZooTask, check_workers, wrap_pettingzoo
from lit_marl.errors import ConfigError, check_types, one_of, positive_int, did_you_mean

KINDS = ("torchrl", "pettingzoo", "gymnasium")
_ALLOWED = ("allowed: 'package.module.ClassName' of a torchrl EnvBase subclass with grouped keys, a PettingZoo "
            "ParallelEnv/AECEnv subclass or a gymnasium.Env subclass")


def import_env_class(path: Any, field: str = "task.env_class") -> type:
    """The class named by ``package.module.ClassName`` (or ``package.module:ClassName``), or a ConfigError."""
    if not isinstance(path, str) or not ("." in path or ":" in path):
        raise ConfigError(f"{field}: {path!r} is not an import path; {_ALLOWED}")
    module_name, _, name = path.rpartition(":") if ":" in path else path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # ImportError, or the module failing at import time
        raise ConfigError(f"{field}: cannot import module {module_name!r} of {path!r} ({type(err).__name__}: {err}); "
                          f"{_ALLOWED}, importable from where lit-marl runs") from None
    if not hasattr(module, name):
        classes = [n for n, v in vars(module).items() if isinstance(v, type) and not n.startswith("_")]
        hint = did_you_mean(name, classes, prefix=f"{module_name}.")
        raise ConfigError(f"{field}: module {module_name!r} has no {name!r}; {hint}{_ALLOWED}")
    cls = getattr(module, name)
    if not isinstance(cls, type):
        raise ConfigError(f"{field}: {path!r} is a {type(cls).__name__}, not a class; {_ALLOWED}")
    return cls


def env_kind(cls: type, path: str, field: str = "task.env_class") -> str:
    """``"torchrl"``, ``"pettingzoo"`` or ``"gymnasium"``: the API the class follows."""
    if issubclass(cls, EnvBase):
        return "torchrl"
    if issubclass(cls, gym.Env):
        return "gymnasium"
    try:
        from pettingzoo.utils.env import AECEnv, ParallelEnv
    except ImportError:
        AECEnv = ParallelEnv = ()  # noqa: N806 - without pettingzoo no class can be one
    if issubclass(cls, (AECEnv, ParallelEnv)):
        return "pettingzoo"
    bases = ", ".join(k.__qualname__ for k in cls.__mro__[1:-1]) or "object"
    raise ConfigError(f"{field}: {path!r} is a class (bases: {bases}) but no environment; {_ALLOWED}")


def _accepts(cls: type, name: str) -> bool:
    parameters = inspect.signature(cls.__init__).parameters
    return name in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def _class_allowed(path: str, api: str) -> str:
    """The "allowed" part of a probe failure of a user's class (Task.probing)."""
    return f"allowed: arguments {path} accepts (task.env_kwargs), and as task.env_class {api}"


def _make_torchrl_one(path: str, kwargs: dict[str, Any]) -> EnvBase:
    return import_env_class(path)(**kwargs)


def _make_gymnasium_one(path: str, max_steps: int, kwargs: dict[str, Any]) -> gym.Env:
    return gym.wrappers.TimeLimit(import_env_class(path)(**kwargs), max_episode_steps=max_steps)


def _make_pettingzoo_one(path: str, turn_based: bool, kwargs: dict[str, Any], agent_groups: Any, return_state: bool,
                         device: str) -> EnvBase:
    return wrap_pettingzoo(import_env_class(path)(**kwargs), turn_based, agent_groups, return_state, device)


class CustomTask(Task):
    """A user's own environment class (torchrl ``EnvBase``, PettingZoo or Gymnasium), named by import path.

    Args:
        env_class: ``"package.module.ClassName"`` (see the module docstring for what each kind must provide).
        max_steps: episode length limit; episodes the env does not end by then are truncated there.
        env_kwargs: the class's constructor arguments.
        agent_groups: PettingZoo envs: ``None`` (by name prefix; turn-based: one group ``agents``),
            ``"all_in_one_group"``, ``"one_group_per_agent"`` or ``{group: [agent names]}``.
        state_key: a global state for centralised critics and mixers: a root observation key of a torchrl env,
            or ``"state"`` for a PettingZoo env's ``state()``; ``None`` for none.
        success_key: torchrl envs: a per-agent boolean key under each group that marks success
            (Gymnasium envs report ``info["is_success"]`` by themselves: ``None`` or ``"is_success"``).
        group: Gymnasium envs: the name of the one-agent group.
        vectorization: Gymnasium envs: ``"sync"`` or ``"async"`` (see :class:`~lit_marl.envs.GymnasiumTask`).
        num_workers: PettingZoo envs and torchrl envs of one episode per object: worker processes that step the
            episodes (see :class:`~lit_marl.envs.PettingZooTask`); the class must then be importable in them.

    Examples:
        >>> task = CustomTask("tests.helpers.custom_envs.MatchParallelEnv", max_steps=10)
        >>> task.group_map
        {'player': ['player_0', 'player_1']}

    Any exception the class raises while the probe env is built, reset or inspected (a bad ``env_kwargs``, a broken
    class) is a ``ConfigError`` naming ``task.env_kwargs``, the class and its message (see
    :class:`~lit_marl.envs.base.Task`).
    """

    simulator_arguments = "env_kwargs"

    def __init__(
        self,
        env_class: str,
        max_steps: int,
        env_kwargs: dict[str, Any] | None = None,
        agent_groups: str | dict[str, list[str]] | None = None,
        state_key: str | None = None,
        success_key: str | None = None,
        group: str = "agent",
        vectorization: str = "sync",
        num_workers: int = 1,
    ) -> None:
        check_types(CustomTask.__init__, dict(env_class=env_class, max_steps=max_steps, env_kwargs=env_kwargs,
                                              agent_groups=agent_groups, state_key=state_key, success_key=success_key,
                                              group=group, vectorization=vectorization, num_workers=num_workers),
                    prefix="task.")
        cls = import_env_class(env_class)
        self.kind = env_kind(cls, env_class)
        self.env_class = env_class
        self._class_name = cls.__name__
        self._max_steps = positive_int("task.max_steps", max_steps)
        if env_kwargs is not None and not isinstance(env_kwargs, dict):
            raise ConfigError(f"task.env_kwargs: must be a mapping of {cls.__name__}'s arguments, got {env_kwargs!r}")
        self.env_kwargs = dict(env_kwargs or {})
        self.agent_groups = agent_groups
        self.group = group
        self.vectorization = one_of("task.vectorization", vectorization, VECTORIZATION)
        self._state_key, self._success_key = state_key, success_key
        self.num_workers = positive_int("task.num_workers", num_workers)
        if num_workers > 1 and (self.kind == "gymnasium" or (self.kind == "torchrl" and _accepts(cls, "num_envs"))):
            raise ConfigError(f"task.num_workers: {env_class} is "
                              + ("a Gymnasium env (use vectorization: async for worker processes)"
                                 if self.kind == "gymnasium" else "a batched torchrl env (it steps every episode at once)")
                              + f", got {num_workers}; allowed: 1")
        if self.kind != "pettingzoo" and agent_groups is not None:
            raise ConfigError(f"task.agent_groups: {env_class} is a {self.kind} env, whose groups the env itself "
                              f"defines; allowed: null (agent_groups is for PettingZoo envs)")
        if self.kind == "torchrl":
            if (group, vectorization) != ("agent", "sync"):
                raise ConfigError(f"task.group / task.vectorization: {env_class} is a torchrl env; allowed: the "
                                  f"defaults ('agent', 'sync'), which are for Gymnasium envs")
            self._inner: Task | None = None
            self._continuous = self._check_torchrl_specs()
        elif self.kind == "pettingzoo":
            if state_key not in (None, "state"):
                raise ConfigError(f"task.state_key: a PettingZoo env's global state is its state(); got {state_key!r}; "
                                  f"allowed: null or 'state'")
            if success_key is not None:
                raise ConfigError(f"task.success_key: {env_class} is a PettingZoo env, which reports no success "
                                  f"flag; allowed: null")
            self._inner = _PettingZooClassTask(cls, env_class, self._max_steps, self.env_kwargs, agent_groups,
                                               state_key == "state", self.num_workers)
        else:
            if state_key is not None:
                raise ConfigError(f"task.state_key: {env_class} is a one-agent Gymnasium env; allowed: null")
            self._inner = _GymnasiumClassTask(env_class, self._max_steps, self.env_kwargs, group, vectorization)
            if success_key not in (None, self._inner.success_key):
                raise ConfigError(f"task.success_key: {env_class} reports "
                                  f"{'info[is_success]' if self._inner.success_key else 'no info[is_success]'}; "
                                  f"got {success_key!r}; allowed: null"
                                  + (" or 'is_success'" if self._inner.success_key else ""))
        self.specs  # the probe: an env that does not follow the API is refused here, before any training

    # Configurable writes init args back from attributes of the same name.
    @property
    @override
    def continuous_actions(self) -> bool:
        return self._continuous if self._inner is None else self._inner.continuous_actions

    @property
    @override
    def state_key(self) -> str | None:  # type: ignore[override]
        return self._state_key if self._inner is None else self._inner.state_key

    @property
    @override
    def success_key(self) -> str | None:  # type: ignore[override]
        return self._success_key if self._inner is None else self._inner.success_key

    @property
    @override
    def name(self) -> str:
        return f"custom/{self._class_name}"

    @property
    def turn_based(self) -> bool:
        """Whether agents act one at a time (a PettingZoo env class of the AEC API, e.g. a board game)."""
        return bool(getattr(self._inner, "turn_based", False))

    @override
    def _make_env(self, num_envs: int, seed: int | None, device: torch.device | str) -> EnvBase:
        if self._inner is not None:
            env = self._inner._make_env(num_envs, seed, device)
            # Gymnasium's TimeLimit already truncates; PettingZoo envs may not end by themselves
            return env.append_transform(StepCounter(self.max_steps)) if self.kind == "pettingzoo" else env
        cls = import_env_class(self.env_class)
        if _accepts(cls, "num_envs"):  # a batched simulator
            kwargs = {**self.env_kwargs, "num_envs": num_envs}
            kwargs.update({k: v for k, v in (("device", device), ("seed", seed)) if _accepts(cls, k)})
            env = cls(**kwargs)
            if tuple(env.batch_size) != (num_envs,):
                raise ConfigError(f"task.env_class: {self.env_class}(num_envs={num_envs}) has batch size "
                                  f"{list(env.batch_size)}; allowed: [num_envs] (or no num_envs argument: one "
                                  f"episode per object)")
            if seed is not None:
                env.set_seed(seed)
        else:
            env = batched_env(functools.partial(_make_torchrl_one, self.env_class, self.env_kwargs), num_envs, device,
                              num_workers=self.num_workers, seed=seed)
        return TransformedEnv(env, StepCounter(self.max_steps))

    @override
    def _group_map(self, env: EnvBase) -> dict[str, list[str]]:
        if self._inner is not None:
            return self._inner._group_map(env)
        return self._torchrl_group_map

    @override
    def _simulator_label(self) -> str:
        return self.env_class

    @override
    def _probe_allowed(self, field: str, label: str) -> str:
        return _class_allowed(label, f"a {self.kind} env as CustomTask describes")

    def _check_torchrl_specs(self) -> bool:
        """Check a probe of a torchrl env against the grouped-key API; returns whether actions are continuous."""
        with self.probing():
            return self._check_torchrl_probe()

    def _check_torchrl_probe(self) -> bool:
        cls = import_env_class(self.env_class)
        field, path = "task.env_class", self.env_class
        kwargs = dict(self.env_kwargs)
        if _accepts(cls, "num_envs"):
            kwargs["num_envs"] = 1
        env = cls(**kwargs)
        try:
            group_map = getattr(env, "group_map", None)
            if not (isinstance(group_map, dict) and group_map and all(
                    isinstance(g, str) and isinstance(a, (list, tuple)) and a for g, a in group_map.items())):
                raise ConfigError(f"{field}: {path} has group_map={group_map!r}; allowed: an attribute group_map = "
                                  f"{{group: [agent names]}} with the keys (group, 'observation'), (group, 'action'), "
                                  f"(group, 'reward') (torchrl's multi-agent API)")
            self._torchrl_group_map = {g: list(a) for g, a in group_map.items()}
            batch = len(env.batch_size)
            kinds = set()
            for group, agents in group_map.items():
                for key, spec in (("observation", env.full_observation_spec), ("action", env.full_action_spec),
                                  ("reward", env.full_reward_spec)):
                    if (group, key) not in spec.keys(include_nested=True):
                        found = sorted(map(str, spec.keys(include_nested=True, leaves_only=True)))
                        raise ConfigError(f"{field}: {path} has no {(group, key)!r} in its {key} spec (it has "
                                          f"{', '.join(found) or 'nothing'}); allowed: grouped keys (group, "
                                          f"'{key}') for every group of group_map")
                    group_spec = spec[group]
                    if not isinstance(group_spec, Composite) or tuple(group_spec.shape[batch:]) != (len(agents),):
                        raise ConfigError(f"{field}: {path}'s {key} spec of group {group!r} is shaped "
                                          f"{list(getattr(group_spec, 'shape', []))}; allowed: a Composite shaped "
                                          f"[*batch, n_agents={len(agents)}]")
                action = env.full_action_spec[group, "action"]
                if action.domain == "discrete" and not isinstance(action, Categorical):
                    raise ConfigError(f"{field}: {path}'s {group!r} actions are {type(action).__name__}; allowed: "
                                      f"Categorical (integer actions) or a continuous Bounded/Unbounded spec")
                kinds.add(action.domain == "continuous")
            if "done" not in env.full_done_spec.keys():
                raise ConfigError(f"{field}: {path} has no root 'done' in its done spec; allowed: a done spec with "
                                  f"'done' (and 'terminated') at the root")
            if len(kinds) > 1:
                raise ConfigError(f"{field}: {path} mixes continuous and discrete actions across groups; allowed: "
                                  f"one kind for all groups")
            if self._state_key is not None and self._state_key not in env.full_observation_spec.keys():
                raise ConfigError(f"task.state_key: {path} has no root observation {self._state_key!r}; allowed: "
                                  f"null or one of {sorted(map(str, env.full_observation_spec.keys()))}")
            if self._success_key is not None:
                missing = [g for g in group_map if (g, self._success_key) not in
                           env.full_observation_spec.keys(include_nested=True)]
                if missing:
                    raise ConfigError(f"task.success_key: {path} has no ({missing[0]!r}, {self._success_key!r}) "
                                      f"observation; allowed: null or a per-agent flag present under every group")
            return kinds.pop()
        finally:
            env.close()

    @override
    def render(self, env: EnvBase, env_index: int = 0):
        return super().render(env, env_index) if self._inner is None else self._inner.render(env, env_index)


class _PettingZooClassTask(PettingZooTask):
    """PettingZooTask's wrapping (groups, masks for turn-based play) for a user's PettingZoo class."""

    simulator_arguments = "env_kwargs"

    def __init__(self, cls: type, path: str, max_steps: int, env_kwargs: dict[str, Any],
                 agent_groups: str | dict[str, list[str]] | None, return_state: bool, num_workers: int) -> None:
        from pettingzoo.utils.env import AECEnv

        self._path, self._kwargs, self._max_steps = path, env_kwargs, max_steps
        self._turn_based = issubclass(cls, AECEnv)
        self.task = cls.__name__
        self.task_kwargs = env_kwargs
        self.agent_groups = check_grouping(agent_groups)
        self.return_state = return_state
        self.num_workers = check_workers(num_workers, self._turn_based)
        with self.probing():
            raw = cls(**env_kwargs)
            raw.reset(seed=0)
            spaces = {agent: raw.action_space(agent) for agent in raw.possible_agents}
            if return_state:
                raw.state()
            raw.close()
        kinds = {type(s) for s in spaces.values()}
        if not kinds <= {gym.spaces.Box, gym.spaces.Discrete} or len(kinds) != 1:
            raise ConfigError(f"task.env_class: {path}'s action spaces are {sorted(k.__name__ for k in kinds)}; "
                              f"allowed: Box (continuous) or Discrete, the same kind for every agent")
        self._continuous_actions = kinds == {gym.spaces.Box}
        self._entry = PettingZooEntry(path, "pettingzoo", "continuous" if self._continuous_actions else "discrete")

    @property
    @override
    def state_key(self) -> str | None:  # type: ignore[override]
        return "state" if self.return_state else None

    @override
    def _simulator_arguments_given(self) -> Any:
        return self._kwargs

    @override
    def _simulator_label(self) -> str:
        return self._path

    @override
    def _probe_allowed(self, field: str, label: str) -> str:
        return _class_allowed(label, "a PettingZoo env (possible_agents, action_space(agent), observation_space(agent), "
                                     f"reset, step{', state()' if self.return_state else ''})")

    @override
    def env_kwargs(self) -> dict[str, Any]:
        return dict(self._kwargs)

    @override
    def _one_episode(self, return_state: bool, device: torch.device | str) -> Callable[[], EnvBase]:
        return functools.partial(_make_pettingzoo_one, self._path, self.turn_based, self.env_kwargs(),
                                 self.agent_groups, return_state, str(device))


class _GymnasiumClassTask(GymnasiumTask):
    """GymnasiumTask's one-agent group for a user's ``gymnasium.Env`` class."""

    _source_field = "task.env_class"

    def __init__(self, path: str, max_steps: int, env_kwargs: dict[str, Any], group: str, vectorization: str) -> None:
        self.env_id = path
        self._max_steps = max_steps
        self.env_kwargs = env_kwargs
        self.vectorization = vectorization
        if not isinstance(group, str) or not group:
            raise ConfigError(f"task.group: must be a non-empty name, got {group!r}")
        self.group = group
        self._check_spaces(path)

    @override
    def _simulator_label(self) -> str:
        return self.env_id

    @override
    def _probe_allowed(self, field: str, label: str) -> str:
        return _class_allowed(label, "a gymnasium.Env (reset, step, observation_space, action_space)")

    @override
    def _one_env(self) -> Callable[[], gym.Env]:
        return functools.partial(_make_gymnasium_one, self.env_id, self.max_steps, self.env_kwargs)
