"""What the learning checks measure a trained policy against: the same seeded evaluation episodes played by the
untrained policy and by a policy that does nothing (every agent's "no-op" action: zero force for continuous
actions, action 0 — VMAS's and MPE's "stay" — for discrete ones).

A check that only compares against the untrained start can pass without learning: in VMAS navigation an agent that
stays put scores exactly 0 (the shaping is the change of distance to its goal) while a random network scores below
it, so a Q-network collapsed onto "stay" "rises" by the untrained policy's deficit. Each check asserts its margin
above the better of the two."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from lit_marl.data.evaluator import episode_returns


class DoNothing(TensorDictModuleBase):
    """Writes each group's no-op action: zeros of the action spec's shape and dtype (a discrete action 0)."""

    def __init__(self, action_spec) -> None:
        super().__init__()
        self.action_spec = action_spec
        self.groups = [key[0] for key in action_spec.keys(True, True) if key[-1] == "action"]
        self.in_keys, self.out_keys = [], [(group, "action") for group in self.groups]

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        for group in self.groups:
            spec = self.action_spec[group, "action"]  # a batched env's spec: its shape starts with the env batch
            tensordict.set((group, "action"), torch.zeros(spec.shape, dtype=spec.dtype, device=tensordict.device))
        return tensordict


def mean_return(model, policy: TensorDictModuleBase | None = None, seed: int = 12345, episodes: int = 50) -> float:
    """The mean over groups of the mean evaluation return of ``episodes`` seeded episodes, with ``policy`` (the
    model's evaluation policy by default)."""
    evaluation = model.evaluation
    rollout = evaluation.evaluator.rollout(policy if policy is not None else evaluation.policy, seed, episodes,
                                           model.evaluation_deterministic)
    return torch.stack(list(episode_returns(model.groups, rollout).values())).mean().item()


def do_nothing_return(model, seed: int = 12345, episodes: int = 50) -> float:
    """:func:`mean_return` of :class:`DoNothing` on the same episodes."""
    env = model.evaluation.evaluator.env(episodes)
    return mean_return(model, DoNothing(env.full_action_spec), seed, episodes)
