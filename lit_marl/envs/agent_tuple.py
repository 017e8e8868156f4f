"""Gymnasium envs of several agents in Tuple spaces (Level-Based Foraging, Multi-Robot Warehouse) as grouped tasks.

Such an env steps one episode: ``observation_space`` and ``action_space`` are Tuples with one space per agent
(a 1-D Box, a Discrete), ``step`` takes one action per agent and returns a list of per-agent rewards and one
``done``. :class:`AgentTupleEnv` makes one episode a torchrl env with grouped keys; :class:`AgentTupleTask` batches
``num_envs`` of them with :func:`lit_marl.envs.batching.batched_env` (in this process, or in ``num_workers`` worker
processes) and is the base of :class:`~lit_marl.envs.LbfTask` and :class:`~lit_marl.envs.RwareTask`.
"""

from __future__ import annotations

import functools
import importlib
from abc import abstractmethod
from typing import Any, ClassVar

import gymnasium as gym
from gymnasium.error import DependencyNotInstalled
import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Binary, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase
from typing_extensions import override

from lit_marl.envs.base import Task
from lit_marl.envs.batching import batched_env
from lit_marl.envs.grouping import group_agents
from lit_marl.envs.pettingzoo import check_workers
from lit_marl.errors import ConfigError

def import_simulator(module: str, package: str, extra: str) -> Any:
    """``module``, or a ConfigError that names the missing package and the pip command of its extra. A package
    that is installed but cannot import a dependency counts as missing: Gymnasium's ``DependencyNotInstalled``
    (gymnasium-robotics without ``mujoco``: "MuJoCo is not installed") as well as an ``ImportError``."""
    try:
        return importlib.import_module(module)
    except (ImportError, DependencyNotInstalled) as err:
        raise ConfigError(f"task: needs the {package} package, which cannot be imported ({type(err).__name__}: "
                          f"{err}); install it with pip install 'lit-marl[{extra}]'") from None


class AgentTupleEnv(EnvBase):
    """One episode of a Gymnasium env with one space per agent, with grouped keys.

    Per group: ``(group, "observation")`` float32 ``[n_agents, D]``, ``(group, "action")`` integers ``[n_agents]``,
    ``(group, "reward")`` ``[n_agents, 1]`` and, where the simulator has action masks (:attr:`has_action_mask`) and
    ``action_mask`` asks for them, ``(group, "action_mask")`` ``[n_agents, n_actions]`` (True = legal). ``done``,
    ``terminated`` and ``truncated`` are at the root, shaped ``[1]``: :meth:`_ends_task` says whether a ``done`` of
    the simulator ends the task (a time limit does not, unless ``time_limit_terminal``).

    The seed given to :meth:`set_seed` seeds the next reset (``env.reset(seed=...)``); later resets draw from the
    simulator's own generator, so a batch's episodes follow from the seed alone.

    Args:
        env: the simulator.
        groups: ``{group: [agent indices]}`` (indices into the Tuple spaces).
        device: where the env's tensors live.
        action_mask: give the action masks where the simulator has them.
        time_limit_terminal: mark every end of an episode ``terminated``, the time limit's too (EPyMARL's 2021
            convention, see :class:`AgentTupleTask`); by default a time limit is a truncation.
    """

    #: whether :meth:`_action_mask` reads the simulator's legal actions
    has_action_mask: ClassVar[bool] = False

    def __init__(self, env: gym.Env, groups: dict[str, list[int]], device: torch.device | str = "cpu",
                 action_mask: bool = True, time_limit_terminal: bool = False) -> None:
        super().__init__(device=device, batch_size=torch.Size([]))
        self._masked = self.has_action_mask and action_mask
        self._time_limit_terminal = time_limit_terminal
        self._env = env
        self._groups = {g: list(indices) for g, indices in groups.items()}
        self._n_agents = len(env.observation_space)
        observation, action = env.observation_space[0], env.action_space[0]
        self._n_actions = int(action.n)
        self._pending_seed: int | None = None
        observations, actions, rewards = {}, {}, {}
        for group, indices in self._groups.items():
            n = len(indices)
            entries = {"observation": Unbounded((n, *observation.shape), dtype=torch.float32, device=device)}
            if self._masked:
                entries["action_mask"] = Binary(n=self._n_actions, shape=(n, self._n_actions), dtype=torch.bool,
                                                device=device)
            observations[group] = Composite(entries, shape=(n,), device=device)
            actions[group] = Composite({"action": Categorical(self._n_actions, shape=(n,), dtype=torch.int64,
                                                              device=device)}, shape=(n,), device=device)
            rewards[group] = Composite({"reward": Unbounded((n, 1), device=device)}, shape=(n,), device=device)
        self.observation_spec = Composite(observations, device=device)
        self.action_spec = Composite(actions, device=device)
        self.reward_spec = Composite(rewards, device=device)
        flag = Categorical(2, shape=(1,), dtype=torch.bool, device=device)
        self.done_spec = Composite({"done": flag, "terminated": flag.clone(), "truncated": flag.clone()}, device=device)

    @property
    def simulator(self) -> gym.Env:
        """The wrapped Gymnasium env (unwrapped)."""
        return self._env.unwrapped

    def _action_mask(self) -> np.ndarray:
        """``[n_agents, n_actions]`` booleans of the actions legal now: every action, for a simulator without masks;
        subclasses that read the simulator's legal actions override it and set :attr:`has_action_mask`."""
        return np.ones((self._n_agents, self._n_actions), dtype=bool)

    def _ends_task(self) -> bool:
        """Asked when the simulator reports ``done``: whether the episode reached an end of the task (True) rather
        than a time limit (False, a truncation: values bootstrap through it)."""
        return True

    def _observations(self, observations: Any) -> TensorDict:
        stacked = torch.as_tensor(np.stack([np.asarray(o, dtype=np.float32) for o in observations]), device=self.device)
        mask = torch.as_tensor(self._action_mask(), dtype=torch.bool, device=self.device) if self._masked else None
        out = {}
        for group, indices in self._groups.items():
            out[group] = {"observation": stacked[indices]}
            if mask is not None:
                out[group]["action_mask"] = mask[indices]
        return TensorDict(out, batch_size=[], device=self.device)

    @override
    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        observations, _ = self._env.reset(seed=self._pending_seed)
        self._pending_seed = None
        out = self._observations(observations)
        for key in ("done", "terminated", "truncated"):
            out.set(key, torch.zeros(1, dtype=torch.bool, device=self.device))
        return out

    @override
    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        actions = [0] * self._n_agents
        for group, indices in self._groups.items():
            for i, action in zip(indices, tensordict.get((group, "action")).tolist()):
                actions[i] = int(action)
        observations, rewards, done, truncated, _ = self._env.step(tuple(actions))
        ended = bool(done) or bool(truncated)
        terminated = ended if self._time_limit_terminal else bool(done) and self._ends_task()
        out = self._observations(observations)
        reward = torch.as_tensor(np.asarray(rewards, dtype=np.float32), device=self.device).unsqueeze(-1)
        for group, indices in self._groups.items():
            out.set((group, "reward"), reward[indices])
        out.set("done", torch.tensor([ended], device=self.device))
        out.set("terminated", torch.tensor([terminated], device=self.device))
        out.set("truncated", torch.tensor([ended and not terminated], device=self.device))
        return out

    @override
    def _set_seed(self, seed: int | None) -> None:
        self._pending_seed = seed

    @override
    def close(self, *, raise_if_closed: bool = True) -> None:
        self._env.close()
        super().close(raise_if_closed=raise_if_closed)


def _make_episode(env_type: type[AgentTupleEnv], simulator: str, kwargs: dict[str, Any], groups: dict[str, list[int]],
                  device: str, action_mask: bool, time_limit_terminal: bool) -> AgentTupleEnv:
    """One episode (module level, so worker processes can unpickle it through functools.partial)."""
    module, _, name = simulator.rpartition(".")
    return env_type(getattr(importlib.import_module(module), name)(**kwargs), groups, device, action_mask,
                    time_limit_terminal)


class AgentTupleTask(Task):
    """A task of a Gymnasium env with one space per agent; subclasses say which simulator and with what arguments.

    Subclasses set :attr:`env_type` (an :class:`AgentTupleEnv` subclass) and :attr:`simulator_class` (the env's
    import path), and implement :meth:`simulator_kwargs`, :attr:`agents` and :attr:`name`; their ``__init__`` sets
    ``_max_steps``, ``agent_groups`` (checked with :func:`group_agents`) and ``num_workers`` (checked with
    :func:`check_workers`). Actions are discrete.

    ``time_limit_terminal`` (an argument of the EPyMARL-suite tasks, LBF and RWARE) stores an episode cut by its time
    limit as ``terminated``, so no value bootstraps through the cut. That biases the value targets of a task whose
    state does not show the time left (Pardo et al. 2018) and is off by default; EPyMARL's 2021 code, which its
    paper's LBF and RWARE results came from, did it (its gymma wrapper returned an empty info, so its runners never
    saw ``episode_limit``), as pymarlzooplus's wrapper still does. Set it to compare with those numbers.
    """

    simulator_arguments = "env_kwargs"
    _continuous_actions = False
    #: give the simulator's action masks (where :attr:`env_type` has them); subclasses may make it an argument
    action_mask: bool = True
    #: store an episode cut by the time limit as terminated (see the class docstring); subclasses make it an argument
    time_limit_terminal: bool = False
    env_type: type[AgentTupleEnv] = AgentTupleEnv
    simulator_class: str = ""

    @abstractmethod
    def simulator_kwargs(self) -> dict[str, Any]:
        """The arguments the simulator is built with."""

    @property
    @abstractmethod
    def agents(self) -> list[str]:
        """The agents' names, in the order of the simulator's Tuple spaces (``agent_0``, ``agent_1``, …)."""

    @property
    def groups(self) -> dict[str, list[str]]:
        """``{group: [agent names]}`` from ``agent_groups``."""
        return group_agents(self.agent_groups, self.agents)

    def _set_workers(self, num_workers: Any) -> None:
        self.num_workers = check_workers(num_workers, turn_based=False)

    @override
    def _make_env(self, num_envs: int, seed: int | None, device: torch.device | str) -> EnvBase:
        index = {agent: i for i, agent in enumerate(self.agents)}
        groups = {g: [index[a] for a in members] for g, members in self.groups.items()}
        make = functools.partial(_make_episode, self.env_type, self.simulator_class, self.simulator_kwargs(), groups,
                                 str(device), self.action_mask, self.time_limit_terminal)
        return batched_env(make, num_envs, device, num_workers=self.num_workers, seed=seed)

    @override
    def _group_map(self, env: EnvBase) -> dict[str, list[str]]:
        return self.groups

    @override
    def _simulator_label(self) -> str:
        arguments = ", ".join(f"{k}={v!r}" for k, v in self.simulator_kwargs().items())
        return f"{self.simulator_class.rpartition('.')[2]}({arguments})"

    @override
    def _probe_allowed(self, field: str, label: str) -> str:
        return f"allowed: arguments and values {self.simulator_class} accepts (task.{field} and the task's own)"
