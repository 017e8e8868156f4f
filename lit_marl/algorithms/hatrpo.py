"""Heterogeneous-agent TRPO: HATRPO (Kuba et al., 2022; the HARL code is the reference for details).

HAPPO's sequence of agents with each agent's clipped surrogate replaced by one trust-region step: agent *m* maximises
``E[ratio_m × factor × A]`` subject to ``KL(π_m,old || π_m) <= kl_threshold`` (conjugate gradient on Fisher-vector
products, then a backtracking line search: :func:`~lit_marl.algorithms.trust_region.trust_region_step`), on the whole
batch at once; the factor and the critic are HAPPO's. On the learners: :class:`TrustRegionPPO` (HAPPO's learner with
the step, taken in its :meth:`~TrustRegionPPO.own_update`: no optimizer step for it; its loop gives each agent's turn
one "minibatch", the whole batch) and :class:`HATRPO` (a run like any other).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from tensordict import TensorDict, TensorDictBase
from torch.distributions import Categorical, Normal, kl_divergence
from typing_extensions import override

from lit_marl.algorithms.base import MarlAlgorithm
from lit_marl.algorithms.happo import HAPPO, SequentialPPO
from lit_marl.algorithms.loops import FACTOR
from lit_marl.algorithms.trust_region import trust_region_step
from lit_marl.errors import positive_float, positive_int, unit_interval


class TrustRegionPPO(SequentialPPO):
    """What one group learns with HATRPO: HAPPO's per-agent policies and critic, each agent's policy moved by one
    trust-region step on the whole batch.

    Args:
        kl_threshold: the largest KL (old → new policy of the agent, mean over the batch) a step may make.
        cg_iterations: conjugate-gradient iterations for the natural-gradient direction.
        cg_damping: added to the Fisher matrix (times the identity) for the conjugate gradient.
        line_search_steps: fractions of the full step the line search tries (``backtrack_coef`` ^ k).
        backtrack_coef: the factor between two fractions the line search tries.
        accept_ratio: the least share of its first-order improvement an accepted step must realise.
    """

    algorithm_label: ClassVar[str] = "HATRPO"
    #: each agent's turn is one step on the whole batch (the sequential loop yields the batch once per agent)
    whole_batch_turns: ClassVar[bool] = True

    def __init__(self, task, group, run, kl_threshold: float = 0.01, cg_iterations: int = 10,
                 cg_damping: float = 0.1, line_search_steps: int = 10, backtrack_coef: float = 0.8,
                 accept_ratio: float = 0.5, **kwargs: Any) -> None:
        self.kl_threshold = positive_float("kl_threshold", kl_threshold)
        self.cg_iterations = positive_int("cg_iterations", cg_iterations)
        self.cg_damping = positive_float("cg_damping", cg_damping)
        self.line_search_steps = positive_int("line_search_steps", line_search_steps)
        self.backtrack_coef = unit_interval("backtrack_coef", backtrack_coef)
        self.accept_ratio = unit_interval("accept_ratio", accept_ratio)
        super().__init__(task, group, run, **kwargs)

    def _distribution(self, batch: TensorDictBase, agent: int):
        """The agent's action distribution, before any tanh (KL is the same through the bijection)."""
        params = self.policy.get_dist_params(batch.select(*self.policy.in_keys, strict=False))
        if self.task.continuous_actions:
            return Normal(params.get((self.group, "loc"))[:, agent], params.get((self.group, "scale"))[:, agent])
        return Categorical(logits=params.get((self.group, "logits"))[:, agent])

    @override
    def own_update(self, batch: TensorDictBase) -> TensorDictBase | None:
        """In this group's agent's turn: its trust-region step (the run takes no gradient step); else None."""
        phase = self.turn(batch)
        if phase.kind != "actor" or phase.group != self.group:
            return None
        return self.trust_region_update(batch, phase.agent)

    def trust_region_update(self, batch: TensorDictBase, agent: int) -> TensorDictBase:
        """One trust-region step of agent ``agent``'s policy on ``batch`` (advantage × factor); returns what it did."""
        with torch.no_grad():
            old = self._distribution(batch, agent)
        old_log_prob = batch.get((self.group, "action_log_prob"))[:, agent]
        weighted = batch.get((self.group, "advantage"))[:, agent, 0] * batch.get(FACTOR).squeeze(-1)

        def surrogate() -> torch.Tensor:
            return ((self.agent_log_prob(batch, agent) - old_log_prob).exp() * weighted).mean()

        def kl() -> torch.Tensor:
            divergence = kl_divergence(old, self._distribution(batch, agent))
            return (divergence.sum(-1) if divergence.dim() > 1 else divergence).mean()

        result = trust_region_step(self.actor_parameters(agent), surrogate, kl, self.kl_threshold,
                                   self.cg_iterations, self.cg_damping, self.backtrack_coef, self.line_search_steps,
                                   self.accept_ratio)
        return TensorDict({"kl": torch.tensor(result.kl), "surrogate_improvement": torch.tensor(result.improvement),
                           "step_fraction": torch.tensor(result.step_fraction)}, batch_size=[])


class HATRPO(MarlAlgorithm):
    """Heterogeneous-agent TRPO (see the module docstring): HAPPO's order, factor and critic, each agent's policy moved
    by one trust-region step on the whole batch.

    Examples:
        One iteration on VMAS *balance*, two agents, toy sizes (BenchMARL's: ``configs/hatrpo_vmas_balance.yaml``):

        >>> import lightning.pytorch as pl
        >>> from lit_marl.algorithms import HATRPO
        >>> from lit_marl.envs import VmasTask
        >>> model = HATRPO(VmasTask("balance", max_steps=10, n_agents=2), kl_threshold=0.005, num_envs=2,
        ...                frames_per_batch=20, max_frames=20, minibatch_size=10, n_minibatch_iters=2,
        ...                evaluation_episodes=1)
        >>> pl.Trainer(max_epochs=-1, logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(model)
        >>> model.agent_orders  # each agent's turn is one trust-region step, in this order
        [['agents/agent_...', 'agents/agent_...']]
    """

    algorithm_name: ClassVar[str] = "hatrpo"
    learner_class = TrustRegionPPO
    learner_settings: ClassVar[dict[str, Any]] = HAPPO.learner_settings
    agent_orders = HAPPO.agent_orders
