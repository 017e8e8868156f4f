"""Tiny user-defined environments of each kind CustomTask accepts, importable by path (``tests.helpers.custom_envs.X``).

- :class:`LineWalkEnv`: a torchrl ``EnvBase``, one episode per object, that never ends by itself (or after 2-5 steps).
- :class:`MatchParallelEnv`: a PettingZoo ``ParallelEnv``: each player is paid for naming the shown symbol.
- :class:`NimAECEnv`: a PettingZoo ``AECEnv`` (turn-based, action masks): take 1 or 2 stones, the last one wins.
- :class:`ReachGymEnv`: a ``gymnasium.Env`` that reports ``info["is_success"]``.
- :class:`UngroupedEnv`, :func:`make_line_walk`, :class:`NotAnEnv`: what CustomTask must refuse.
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import torch
from pettingzoo.utils.agent_selector import AgentSelector
from pettingzoo.utils.env import AECEnv, ParallelEnv
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase


class LineWalkEnv(EnvBase):
    """Two walkers on a line, paid ``-|x - goal|`` each step; one episode, no end of its own (the task's
    ``max_steps`` truncates it). Observation ``[x, goal]``, action a step in ``[-1, 1]`` scaled by ``speed``."""

    def __init__(self, n_agents: int = 2, goal: float = 1.0, speed: float = 0.25, random_length: bool = False) -> None:
        super().__init__(batch_size=torch.Size([]))
        self.n_agents, self.goal, self.speed = n_agents, goal, speed
        #: end each episode after 2-5 steps (drawn at reset) instead of never
        self.random_length = random_length
        n = n_agents
        self.group_map = {"walkers": [f"walker_{i}" for i in range(n)]}
        self.observation_spec = Composite(walkers=Composite(observation=Unbounded((n, 2)), shape=(n,)))
        self.action_spec = Composite(walkers=Composite(action=Bounded(-1.0, 1.0, (n, 1)), shape=(n,)))
        self.reward_spec = Composite(walkers=Composite(reward=Unbounded((n, 1)), shape=(n,)))
        self.done_spec = Composite(done=Categorical(2, (1,), dtype=torch.bool),
                                   terminated=Categorical(2, (1,), dtype=torch.bool))
        self.x = torch.zeros(n)
        self.generator = torch.Generator().manual_seed(0)

    def _set_seed(self, seed: int | None) -> None:
        self.generator.manual_seed(0 if seed is None else int(seed))

    def _obs(self) -> torch.Tensor:
        return torch.stack([self.x, torch.full_like(self.x, self.goal)], dim=-1)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        self.x = torch.rand(self.n_agents, generator=self.generator) - 0.5
        self.t, self.length = 0, int(torch.randint(2, 6, (), generator=self.generator))
        return TensorDict({"walkers": {"observation": self._obs()}, "done": torch.zeros(1, dtype=torch.bool),
                           "terminated": torch.zeros(1, dtype=torch.bool)})

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self.x = self.x + self.speed * tensordict["walkers", "action"].reshape(self.n_agents).clamp(-1, 1)
        reward = -(self.x - self.goal).abs().unsqueeze(-1)
        self.t += 1
        end = torch.tensor([self.random_length and self.t >= self.length])
        return TensorDict({"walkers": {"observation": self._obs(), "reward": reward}, "done": end,
                           "terminated": end.clone()})


class MatchParallelEnv(ParallelEnv):
    """Each step shows one of ``n_symbols`` symbols (one-hot); a player that names it gets 1. ``max_cycles`` steps."""

    metadata = {"name": "match_v0", "is_parallelizable": True}

    def __init__(self, n_symbols: int = 3, max_cycles: int = 25) -> None:
        self.n_symbols, self.max_cycles = n_symbols, max_cycles
        self.possible_agents = ["player_0", "player_1"]
        self.agents = list(self.possible_agents)
        self.rng = np.random.default_rng(0)

    @functools.cache  # noqa: B019 - PettingZoo's convention: the same space object every call
    def observation_space(self, agent):
        return gym.spaces.Box(0.0, 1.0, (self.n_symbols,), dtype=np.float32)

    @functools.cache  # noqa: B019
    def action_space(self, agent):
        return gym.spaces.Discrete(self.n_symbols)

    @property
    def state_space(self):
        return gym.spaces.Box(0.0, 1.0, (self.n_symbols,), dtype=np.float32)

    def state(self):
        return np.eye(self.n_symbols, dtype=np.float32)[self.symbol]

    def _observe(self):
        return {agent: self.state() for agent in self.agents}

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.t = 0
        self.symbol = int(self.rng.integers(self.n_symbols))
        return self._observe(), {agent: {} for agent in self.agents}

    def step(self, actions):
        rewards = {agent: float(int(actions[agent]) == self.symbol) for agent in self.agents}
        self.t += 1
        self.symbol = int(self.rng.integers(self.n_symbols))
        truncated = self.t >= self.max_cycles
        observations = self._observe()
        terminations = {agent: False for agent in self.agents}
        truncations = {agent: truncated for agent in self.agents}
        infos = {agent: {} for agent in self.agents}
        if truncated:
            self.agents = []
        return observations, rewards, terminations, truncations, infos


class NimAECEnv(AECEnv):
    """Turn-based Nim: a pile of 3 to ``stones`` stones; players take 1 or 2 in turn; who takes the last wins (+1,
    the other -1). Taking 2 is illegal with one stone left (action mask)."""

    metadata = {"name": "nim_v0", "is_parallelizable": False}

    def __init__(self, stones: int = 5) -> None:
        super().__init__()
        self.stones = stones
        self.possible_agents = ["player_0", "player_1"]
        self.agents = list(self.possible_agents)
        self._spaces = {"observation": gym.spaces.Dict({
            "observation": gym.spaces.Box(0, 1, (stones + 1,), dtype=np.int8),
            "action_mask": gym.spaces.Box(0, 1, (2,), dtype=np.int8)}), "action": gym.spaces.Discrete(2)}
        self.rng = np.random.default_rng(0)
        self._selector = AgentSelector(self.agents)

    def observation_space(self, agent):
        return self._spaces["observation"]

    def action_space(self, agent):
        return self._spaces["action"]

    def observe(self, agent):
        board = np.zeros(self.stones + 1, dtype=np.int8)
        board[self.pile] = 1
        mask = np.zeros(2, dtype=np.int8)
        if agent == self.agent_selection and self.pile > 0:
            mask[0], mask[1] = 1, int(self.pile >= 2)
        return {"observation": board, "action_mask": mask}

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.pile = int(self.rng.integers(3, self.stones + 1))
        self.agents = list(self.possible_agents)
        self.rewards = dict.fromkeys(self.agents, 0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {agent: {} for agent in self.agents}
        self._selector.reinit(self.agents)
        self.agent_selection = self._selector.reset()

    def step(self, action):
        if self.terminations[self.agent_selection] or self.truncations[self.agent_selection]:
            return self._was_dead_step(None)  # PettingZoo's convention: a finished agent's action is None
        mover = self.agent_selection
        self.pile -= min(int(action) + 1, self.pile)
        if self.pile == 0:
            other = self.agents[1 - self.agents.index(mover)]
            self.rewards[mover], self.rewards[other] = 1, -1
            self.terminations = dict.fromkeys(self.agents, True)
            self._accumulate_rewards()
        self.agent_selection = self._selector.next()


class ReachGymEnv(gym.Env):
    """Move a point from near 0 to ``goal`` (action 1 steps +0.25); ``info["is_success"]`` on arrival."""

    observation_space = gym.spaces.Box(-10, 10, (1,), dtype=np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, goal: float = 1.0) -> None:
        self.goal = goal

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = float(self.np_random.uniform(-0.1, -0.05))
        return np.array([self.x], dtype=np.float32), {"is_success": False}

    def step(self, action):
        self.x += 0.25 if int(action) == 1 else -0.25
        success = self.x >= self.goal
        return np.array([self.x], dtype=np.float32), float(success), success, False, {"is_success": success}


class PointsGymEnv(gym.Env):
    """A one-agent env observing ``n_points`` zeros; it refuses a count below 1 with a bare ``assert``, as simulators
    often do (kept out of test modules, whose asserts pytest rewrites)."""

    action_space = gym.spaces.Discrete(2)

    def __init__(self, n_points: int = 2) -> None:
        assert n_points >= 1
        self.observation_space = gym.spaces.Box(-1, 1, (n_points,), dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(self.observation_space.shape, dtype=np.float32), {}

    def step(self, action):
        return np.zeros(self.observation_space.shape, dtype=np.float32), 0.0, False, False, {}


class UngroupedEnv(LineWalkEnv):
    """A torchrl env with flat keys (single-agent style): no group_map, no nested (group, ...) keys."""

    def __init__(self) -> None:
        super().__init__()
        del self.group_map
        self.observation_spec = Composite(observation=Unbounded((2,)))


def make_line_walk() -> LineWalkEnv:
    """A factory function, not a class."""
    return LineWalkEnv()


class NotAnEnv:
    """A class that is no environment."""
