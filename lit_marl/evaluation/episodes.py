"""Per-episode records from evaluation rollouts.

An evaluation rollout (:class:`~lit_marl.data.evaluator.Evaluator`) is ``[num_envs, max_steps]`` with
``("episode", "mask")`` marking the steps of each env's *first* episode. Everything here reads real steps only: returns are sums over them, the
largest and mean step reward are taken over them (an episode of negative rewards has a negative maximum),
and the length is their count.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from lit_marl.envs.base import Task


def episode_records(task: Task, rollout: TensorDictBase, seed: int, first_episode: int) -> list[dict[str, Any]]:
    """One record per env of ``rollout`` (an evaluation batch rolled out from ``seed``).

    Each record: ``episode`` (index over the whole evaluation), ``seed`` and ``env_index`` (the batch seed and
    the env's place in it: together they reproduce the episode), ``return`` (mean over groups of each group's
    mean agent return, the number logged as ``test/return``), ``return_per_group``, ``return_per_agent``,
    ``length``, ``reward_max`` and ``reward_mean`` (the team's step reward, i.e. the mean over every agent, over
    real steps), and ``success`` where the task defines it (``None`` otherwise).
    """
    mask = rollout.get(("episode", "mask")).bool()  # [E, T]
    num_envs = mask.shape[0]
    lengths = mask.sum(-1)  # [E]
    group_returns: dict[str, torch.Tensor] = {}
    agent_returns: dict[str, torch.Tensor] = {}
    step_rewards = []
    for group in task.group_map:
        reward = rollout.get(("next", group, "reward")).reshape(*mask.shape, -1).double()  # [E, T, n_agents]
        real = reward * mask.unsqueeze(-1)
        agent_returns[group] = real.sum(1)  # [E, n_agents]
        group_returns[group] = agent_returns[group].mean(-1)
        step_rewards.append(reward.mean(-1))
    team_step = torch.stack(step_rewards).mean(0)  # [E, T]
    reward_max = team_step.masked_fill(~mask, float("-inf")).max(-1).values
    reward_mean = (team_step * mask).sum(-1) / lengths.clamp(min=1)
    total = torch.stack(list(group_returns.values())).mean(0)
    success = _success(task, rollout, mask)

    records = []
    for i in range(num_envs):
        records.append({
            "episode": first_episode + i,
            "seed": int(seed),
            "env_index": i,
            "return": float(total[i]),
            "return_per_group": {g: float(r[i]) for g, r in group_returns.items()},
            "return_per_agent": {agent: float(agent_returns[g][i, j])
                                 for g, agents in task.group_map.items() for j, agent in enumerate(agents)},
            "length": int(lengths[i]),
            "reward_max": float(reward_max[i]),
            "reward_mean": float(reward_mean[i]),
            "success": None if success is None else bool(success[i]),
            "video": None,
        })
    return records


def _success(task: Task, rollout: TensorDictBase, mask: torch.Tensor) -> torch.Tensor | None:
    """An episode succeeded if, at some real step, every agent of every group reports success."""
    if task.success_key is None:
        return None
    flags = []
    for group in task.group_map:
        key = ("next", group, task.success_key)
        if key not in rollout.keys(include_nested=True):
            return None
        flags.append(rollout.get(key).reshape(*mask.shape, -1).bool().all(-1))
    every_agent = torch.stack(flags).all(0)  # [E, T]
    return (every_agent & mask).any(-1)
