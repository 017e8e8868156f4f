"""Model configurations: what network to build for a group, given only sizes.

A model config is chosen in YAML (``actor_model``, ``critic_model``) and built per group by the
algorithm, which knows the sizes from the task's specs. Later model families (CNN, GRU, GNN…)
implement the same two builders.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch import nn

from lit_marl.utils import Configurable


class ModelConfig(Configurable, ABC):
    """Builds the networks of one group."""

    @abstractmethod
    def build_multi_agent(
        self,
        n_agent_inputs: int,
        n_agent_outputs: int,
        n_agents: int,
        centralised: bool,
        share_params: bool,
        device: torch.device | str | None = None,
    ) -> nn.Module:
        """Maps ``[*B, n_agents, n_agent_inputs]`` to ``[*B, n_agents, n_agent_outputs]``.

        ``centralised``: every agent's output sees all agents' inputs (MAPPO/MADDPG critics);
        ``share_params``: one set of weights for all agents of the group.
        """

    @abstractmethod
    def build_single(self, in_features: int, out_features: int, device: torch.device | str | None = None) -> nn.Module:
        """Maps ``[*B, in_features]`` to ``[*B, out_features]`` (e.g. a critic of the global state)."""
