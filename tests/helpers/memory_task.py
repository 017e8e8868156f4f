"""A task only memory solves: each agent sees a cue (+1 or -1) on the first step of an episode and zeros after;
on the last step it is paid +1 for the action that names its cue and -1 otherwise.

A feed-forward policy sees the same observation on the last step whatever the cue was, so its expected return is
0; a policy that remembers the cue earns 1.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

from lit_marl.envs.base import Task


class CueMemoryEnv(EnvBase):
    """Batched env of ``num_envs`` episodes of ``length`` steps, group ``agents``."""

    def __init__(self, num_envs: int, n_agents: int = 2, length: int = 4, device="cpu") -> None:
        super().__init__(device=device, batch_size=torch.Size([num_envs]))
        self.n_agents, self.length = n_agents, length
        self.group_map = {"agents": [f"agent_{i}" for i in range(n_agents)]}
        agents = (num_envs, n_agents)
        self.observation_spec = Composite(
            agents=Composite(observation=Unbounded((*agents, 3), device=device), shape=agents, device=device),
            shape=(num_envs,), device=device)
        self.action_spec = Composite(
            agents=Composite(action=Categorical(2, shape=agents, device=device), shape=agents, device=device),
            shape=(num_envs,), device=device)
        self.reward_spec = Composite(
            agents=Composite(reward=Unbounded((*agents, 1), device=device), shape=agents, device=device),
            shape=(num_envs,), device=device)
        self.done_spec = Composite(
            done=Categorical(2, (num_envs, 1), dtype=torch.bool, device=device),
            terminated=Categorical(2, (num_envs, 1), dtype=torch.bool, device=device),
            shape=(num_envs,), device=device)
        self._generator = torch.Generator(device=device)
        self.cue = torch.zeros(agents, device=device)
        self.t = torch.zeros(num_envs, dtype=torch.long, device=device)

    def _observation(self) -> torch.Tensor:
        first = (self.t == 0).float().unsqueeze(-1)
        last = (self.t == self.length - 1).float().unsqueeze(-1).expand(-1, self.n_agents)
        progress = (self.t.float() / self.length).unsqueeze(-1).expand(-1, self.n_agents)
        return torch.stack([self.cue * first, progress, last], dim=-1)

    def _reset(self, tensordict: TensorDictBase | None, **kwargs) -> TensorDictBase:
        reset = tensordict.get("_reset", None) if tensordict is not None else None
        mask = torch.ones(self.batch_size, dtype=torch.bool, device=self.device) if reset is None else reset.view(-1)
        draws = torch.randint(0, 2, (int(mask.sum()), self.n_agents), generator=self._generator, device=self.device)
        self.cue[mask] = draws.float() * 2 - 1
        self.t[mask] = 0
        done = torch.zeros((*self.batch_size, 1), dtype=torch.bool, device=self.device)
        return TensorDict({"agents": self._group(observation=self._observation()), "done": done,
                           "terminated": done.clone()}, batch_size=self.batch_size, device=self.device)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = tensordict.get(("agents", "action"))
        last = (self.t == self.length - 1).unsqueeze(-1)  # [E, 1]
        matches = (action.float() * 2 - 1) == self.cue
        reward = torch.where(last, matches.float() * 2 - 1, torch.zeros_like(self.cue)).unsqueeze(-1)
        self.t = self.t + 1
        done = (self.t >= self.length).unsqueeze(-1)
        return TensorDict({"agents": self._group(observation=self._observation(), reward=reward), "done": done,
                           "terminated": done.clone()}, batch_size=self.batch_size, device=self.device)

    def _group(self, **entries: torch.Tensor) -> TensorDict:
        return TensorDict(entries, batch_size=(*self.batch_size, self.n_agents), device=self.device)

    def _set_seed(self, seed: int | None) -> None:
        self._generator.manual_seed(int(seed) if seed is not None else 0)


class CueMemoryTask(Task):
    """:class:`CueMemoryEnv` as a lit-marl task."""

    def __init__(self, n_agents: int = 2, length: int = 4) -> None:
        self.n_agents, self.length = n_agents, length

    @property
    def name(self) -> str:
        return "test/cue_memory"

    @property
    def max_steps(self) -> int:
        return self.length

    @property
    def continuous_actions(self) -> bool:
        return False

    def _make_env(self, num_envs, seed, device):
        env = CueMemoryEnv(num_envs, self.n_agents, self.length, device=device)
        env.set_seed(seed)
        return env
