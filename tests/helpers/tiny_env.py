"""A tiny deterministic multi-agent env whose evaluation numbers can be computed by hand.

Env ``e`` of a batch seeded with ``seed`` plays a first episode of ``L = 2 + (seed + e) % 3`` steps; at step
``t = 1..L`` agent ``j`` gets reward ``s * (t + j)`` with ``s = +1`` when ``seed + e`` is even and ``-1``
otherwise (an episode of only negative rewards), whatever the actions. Every later episode of the same env
(after the batched env auto-resets it) pays 1000 per step, so counting a step after the first episode ended
shows at once. Agents report ``success`` on the last step of a positive episode.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

from lit_marl.envs.base import Task

N_AGENTS = 2
GROUP = "agents"


def first_episode(seed: int, env_index: int) -> tuple[int, int]:
    """``(length, sign)`` of env ``env_index``'s first episode in a batch seeded with ``seed``."""
    return 2 + (seed + env_index) % 3, 1 if (seed + env_index) % 2 == 0 else -1


class CountdownEnv(EnvBase):
    def __init__(self, num_envs: int, seed: int | None = 0, device="cpu") -> None:
        super().__init__(device=device, batch_size=torch.Size([num_envs]))
        n = num_envs
        self.observation_spec = Composite({GROUP: Composite(
            {"observation": Unbounded((n, N_AGENTS, 3)), "success": Categorical(2, (n, N_AGENTS, 1), dtype=torch.bool)},
            shape=(n, N_AGENTS))}, shape=(n,))
        self.action_spec = Composite({GROUP: Composite({"action": Bounded(-1.0, 1.0, (n, N_AGENTS, 1))},
                                                       shape=(n, N_AGENTS))}, shape=(n,))
        self.reward_spec = Composite({GROUP: Composite({"reward": Unbounded((n, N_AGENTS, 1))},
                                                       shape=(n, N_AGENTS))}, shape=(n,))
        self.done_spec = Composite({"done": Categorical(2, (n, 1), dtype=torch.bool),
                                    "terminated": Categorical(2, (n, 1), dtype=torch.bool)}, shape=(n,))
        self.group_map = {GROUP: [f"agent_{j}" for j in range(N_AGENTS)]}
        self._seed = 0 if seed is None else int(seed)
        self.t = torch.zeros(n, dtype=torch.long)
        self.episode = torch.zeros(n, dtype=torch.long)
        self.reset_all()

    def reset_all(self) -> None:
        index = torch.arange(self.batch_size[0])
        self.length = 2 + (self._seed + index) % 3
        self.sign = torch.where((self._seed + index) % 2 == 0, 1.0, -1.0)
        self.t.zero_()
        self.episode.zero_()

    def _set_seed(self, seed: int | None) -> None:
        self._seed = 0 if seed is None else int(seed)
        self.reset_all()

    def _observation(self) -> torch.Tensor:
        n = self.batch_size[0]
        obs = torch.zeros(n, N_AGENTS, 3)
        obs[..., 0] = self.t.unsqueeze(-1).float()
        obs[..., 1] = self.sign.unsqueeze(-1)
        obs[..., 2] = torch.arange(N_AGENTS).float()
        return obs

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        n = self.batch_size[0]
        reset = tensordict.get("_reset", None) if tensordict is not None else None
        if reset is None:
            self.reset_all()
        else:
            which = reset.reshape(n)
            self.t[which] = 0
            self.episode[which] += 1
        return TensorDict({
            GROUP: {"observation": self._observation(), "success": torch.zeros(n, N_AGENTS, 1, dtype=torch.bool)},
            "done": torch.zeros(n, 1, dtype=torch.bool), "terminated": torch.zeros(n, 1, dtype=torch.bool),
        }, batch_size=self.batch_size)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        self.t += 1
        agent = torch.arange(N_AGENTS).float()
        first = (self.sign.unsqueeze(-1) * (self.t.unsqueeze(-1).float() + agent))  # [n, agents]
        reward = torch.where((self.episode == 0).unsqueeze(-1), first, torch.full_like(first, 1000.0))
        done = self.t >= self.length
        success = (done & (self.sign > 0) & (self.episode == 0)).unsqueeze(-1).expand(-1, N_AGENTS)
        return TensorDict({
            GROUP: {"observation": self._observation(), "reward": reward.unsqueeze(-1),
                    "success": success.unsqueeze(-1).clone()},
            "done": done.unsqueeze(-1), "terminated": done.unsqueeze(-1).clone(),
        }, batch_size=self.batch_size)


class CountdownTask(Task):
    """:class:`CountdownEnv` as a task (episode limit ``max_steps``, longer than every first episode)."""

    success_key = "success"

    def __init__(self, max_steps: int = 5) -> None:
        self._max_steps = max_steps

    @property
    def name(self) -> str:
        return "countdown/countdown"

    @property
    def max_steps(self) -> int:
        return self._max_steps

    @property
    def continuous_actions(self) -> bool:
        return True

    def _make_env(self, num_envs, seed, device):
        return CountdownEnv(num_envs, seed=seed, device=device)
