"""What one agent group learns: :class:`GroupLearner`.

A learner owns one group's networks (``policy``, ``critic``), its torchrl loss (``objective``), its optimizer
parameter groups and how their gradients are clipped together (:func:`adam`, :func:`clip_per_loss`: the run's
one optimizer and its clipping per loss, as BenchMARL clips), what it does to a collected batch before training
(:meth:`GroupLearner.process_batch`), the keys it trains on and the loss terms of a minibatch. Off-policy learners
(:class:`~lit_marl.algorithms.off_policy.OffPolicyLearner`) add exploration, replay settings, target networks and
priorities. The run (:class:`~lit_marl.algorithms.MarlAlgorithm`, the LightningModule) collects, evaluates, loops,
optimizes, clips and checkpoints, holding one learner per group in ``learners``; it hands each learner the few facts
of the run it may read (:class:`RunFacts`), and nothing else flows back.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn

from lit_marl.algorithms.loops import TrainingLoop
from lit_marl.envs.base import Task
from lit_marl.errors import positive_float, unit_interval
from lit_marl.models import ModelConfig, Mlp
from lit_marl.utils import deepcopy_keeping_shared_tensors, instantiate


@dataclass(frozen=True)
class RunFacts:
    """What a learner may read of the run that trains it, fixed before any learner is built."""

    #: the run's frame budget
    max_frames: int
    #: environment steps collected per iteration (all envs together)
    frames_per_batch: int
    #: parallel training environments
    num_envs: int
    #: frames per minibatch (on-policy) or transitions per group per optimizer step (off-policy)
    batch_size: int
    #: whether collection keeps the autograd graph through a differentiable simulator (the run's argument)
    collect_with_grad: bool = False


class GroupLearner(nn.Module, ABC):
    """What one agent group learns; a family (PPO, DDPG, SAC, Q-learning) is a subclass.

    A subclass checks and stores its own arguments, then calls ``super().__init__`` (which builds
    :meth:`build_policy`, :meth:`build_critic` and :meth:`build_objective`, in that order), and implements
    :meth:`param_groups`. The run builds one per group from the ``task``, the ``group``'s name and the
    :class:`RunFacts` it may read (``run``). Built with ``group=None``, a learner only checks its arguments and builds
    nothing: the run does that before any environment (even the probe that finds the groups) is built.

    Args:
        actor_model: network of each group's policy (default ``Mlp()``: 256-256, Tanh).
        critic_model: network of each group's critic, where the algorithm has one (default ``Mlp()``).
        share_policy_params: one policy network shared by all agents of a group.
        lr: Adam learning rate (every parameter group).
        adam_eps: Adam epsilon.
        gamma: discount factor.
    """

    #: trains on the frames just collected (True) or on a replay buffer (False)
    on_policy: ClassVar[bool] = False
    #: the loop the run trains this learner with (:mod:`~lit_marl.algorithms.loops`; a family names it)
    loop: ClassVar[type[TrainingLoop] | None] = None
    #: the agents of each group train one after another (the run wraps ``loop`` in ``SequentialAgents``)
    sequential_agents: ClassVar[bool] = False
    supports_recurrent: ClassVar[bool] = False
    supports_continuous_actions: ClassVar[bool] = True
    supports_discrete_actions: ClassVar[bool] = True
    #: whether the family has a critic (else ``critic_model`` is not one of its arguments)
    has_critic: ClassVar[bool] = True
    __deepcopy__ = deepcopy_keeping_shared_tensors  # a copy's loss reads the tensors its optimizer updates

    def __init__(
        self,
        task: Task,
        group: str | None,
        run: RunFacts,
        actor_model: ModelConfig | None = None,
        critic_model: ModelConfig | None = None,
        share_policy_params: bool = True,
        lr: float = 5e-5,
        adam_eps: float = 1e-6,
        gamma: float = 0.99,
    ) -> None:
        super().__init__()
        self.task, self.group, self.run = task, group, run
        self.actor_model = instantiate(actor_model if actor_model is not None else Mlp(), ModelConfig, "actor_model")
        self.critic_model = instantiate(critic_model if critic_model is not None else Mlp(), ModelConfig, "critic_model")
        self.share_policy_params = bool(share_policy_params)
        self.lr = positive_float("lr", lr)
        self.adam_eps = positive_float("adam_eps", adam_eps)
        self.gamma = unit_interval("gamma", gamma)
        self.validate()
        if group is None:  # arguments checked: nothing to build
            return
        self.policy = self.build_policy()
        self.critic = self.build_critic()
        self.objective = self.build_objective()
        #: run the objective through ``torch.compile`` (the run's ``compile``); the compiled form is kept out of the
        #: module tree (the same parameters, no new state)
        self.compile_objective = False
        self._compiled: dict[str, Any] = {}

    # ------------------------------------------------------------------ building
    def validate(self) -> None:
        """Refuse settings that cannot train, by name, before any network is built (a subclass adds its own)."""

    @abstractmethod
    def build_policy(self) -> TensorDictModuleBase:
        """The group's policy: reads ``(group, "observation")``, writes ``(group, "action")``."""

    def build_critic(self) -> TensorDictModuleBase | None:
        """The group's critic (None where the family has none); built before the objective."""
        return None

    @abstractmethod
    def build_objective(self) -> nn.Module:
        """The torchrl loss module of the group, with its keys set to the group's nested keys."""

    @abstractmethod
    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """Parameters by role (``actor``, ``critic``…); each becomes the optimizer group ``<group>/<role>``."""

    def lr_of(self, role: str) -> float:
        """The learning rate of ``role``'s parameters (``lr`` for every role unless a family sets its own)."""
        return self.lr

    def clip_group(self, role: str) -> str:
        """Which parameters ``role``'s gradients are clipped together with (by their joint norm, logged as
        ``train/<group>/<name>/grad_norm``): by default each role alone, as BenchMARL clips each loss's parameters."""
        return role

    @property
    def recurrent(self) -> bool:
        """Whether a network of this learner carries a hidden state from step to step (the policy here; PPO's critic
        too), so it trains on sequences."""
        return self.actor_model.is_recurrent

    @property
    def chunk_length(self) -> int | None:
        """Steps per training slice where the learner trains on sequences (recurrent networks), or None where it trains
        on single steps."""
        return None

    # ------------------------------------------------------------------ collection
    def collection_policy(self) -> TensorDictModuleBase:
        """What steps the training envs for this group (off-policy learners add exploration)."""
        return self.policy

    def prepare_collection(self, frames: int) -> None:
        """Before each collection, with the frames collected so far."""

    def after_collection(self, frames: int) -> None:
        """After each collection of ``frames`` frames, every DDP process's (exploration annealing)."""

    # ------------------------------------------------------------------ training
    def process_batch(self, batch: TensorDictBase) -> TensorDictBase:
        """Called (without grad) on every collected batch before training; reads and writes this group's entries.

        Gives the group its own ``("next", group, "done"|"terminated")`` of shape ``[*B, n_agents, 1]``, expanded
        from the root where the task reports them once (VMAS): torchrl's value estimators need them beside the
        group's reward."""
        nxt = batch.get("next")
        reward_shape = nxt.get((self.group, "reward")).shape
        for key in ("done", "terminated"):
            if (self.group, key) not in nxt.keys(include_nested=True):
                nxt.set((self.group, key), nxt.get(key).unsqueeze(-2).expand(reward_shape))
        return batch

    def training_keys(self) -> list:
        """Keys of a processed batch that training reads (on-policy: the rest is dropped before minibatching;
        off-policy: what the group's replay buffer stores)."""
        return list(self.objective.in_keys)

    def group_batch(self, batch: TensorDictBase) -> TensorDictBase:
        """The part of a training minibatch this group's loss reads (on-policy: all of it)."""
        return batch

    def loss(self, batch: TensorDictBase) -> TensorDictBase:
        """Loss terms on a minibatch: every ``loss`` or ``loss_*`` entry is summed into the objective, every other
        scalar is logged. Override to add terms::

            def loss(self, batch):
                terms = super().loss(batch)
                terms["loss_l2"] = 1e-4 * sum(p.square().sum() for p in self.policy.parameters())
                return terms
        """
        return self.objective_fn()(batch)

    def own_update(self, batch: TensorDictBase) -> TensorDictBase | None:
        """A learner that moves its weights itself on this minibatch (the run's, as the loop yielded it), without a
        gradient step (HATRPO's trust-region step), does it here and returns what to log; None (the default): the run
        takes a gradient step on :meth:`loss`."""
        return None

    def after_step(self, batch: TensorDictBase) -> torch.Tensor | None:
        """After each optimizer step that was taken, with this group's part of its minibatch: off-policy learners move
        their target networks and return the sampled transitions' new priorities (None: no priorities)."""
        return None

    def objective_fn(self) -> Any:
        """The objective as training calls it: the torchrl loss, or that loss compiled by ``torch.compile``."""
        if not self.compile_objective:
            return self.objective
        if "objective" not in self._compiled:
            device = next(self.parameters()).device
            compiled = torch.compile(self.objective, mode="reduce-overhead" if device.type == "cuda" else None,
                                     dynamic=False)
            self._compiled["objective"] = _CudaGraphOutputs(compiled) if device.type == "cuda" else compiled
        return self._compiled["objective"]

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_state(self) -> dict[str, Any]:
        """Plain data beside the weights that a resumed run needs (off-policy: target-update counters)."""
        return {}

    def load_checkpoint_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`checkpoint_state`."""


def adam(learners: Mapping[str, GroupLearner]) -> torch.optim.Adam:
    """One Adam over every group's parameter groups (``<group>/<role>``), each with its learner's ``lr_of(role)`` and
    ``adam_eps``, and the name of the gradients it is clipped with (``clip``: ``<group>/<clip_group(role)>``, what
    :func:`clip_per_loss` reads)."""
    groups = []
    for group, learner in learners.items():
        for role, params in learner.param_groups().items():
            params = [p for p in params if p.requires_grad]
            if params:
                groups.append({"params": params, "name": f"{group}/{role}", "lr": learner.lr_of(role),
                               "eps": learner.adam_eps, "clip": f"{group}/{learner.clip_group(role)}"})
    # the fused kernel updates every tensor of a group in one call (~0.6 ms less per step than the per-tensor loop for
    # MLPs 256-256 on a CPU core; the same update to within one float rounding)
    fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for g in groups for p in g["params"])
    return torch.optim.Adam(groups, fused=fused or None)


def clip_per_loss(optimizer: torch.optim.Optimizer, clip_val: float | None, algorithm: str | None,
                  skip_non_finite: Callable[[str], bool]) -> dict[str, torch.Tensor]:
    """Clip the gradients of each clip group (the ``clip`` name of the optimizer's parameter groups: a learner's
    ``clip_group``) by that group's own total norm, by ``clip_val`` (None or 0: no clipping, as in Lightning;
    ``algorithm`` ``"value"`` clips each gradient's values instead). Returns each group's norm before clipping, in
    order. A norm that is not finite is reported to ``skip_non_finite`` (the NaN policy: it raises, or returns whether
    to skip the step); to skip, every gradient is dropped (Adam leaves a parameter without one alone) and the norms so
    far are returned."""
    clip_groups: dict[str, list[torch.Tensor]] = {}
    for param_group in optimizer.param_groups:
        name = param_group.get("clip", param_group.get("name"))
        clip_groups.setdefault(name, []).extend(p for p in param_group["params"] if p.grad is not None)
    norms: dict[str, torch.Tensor] = {}
    for name, params in clip_groups.items():
        if not params:
            continue
        norm = torch.nn.utils.get_total_norm([p.grad for p in params])  # once: checked, clipped with, reported
        if not torch.isfinite(norm) and skip_non_finite(f"gradient of {name} is {norm.item()} (norm)"):
            for group in optimizer.param_groups:
                for p in group["params"]:
                    p.grad = None
            return norms
        if clip_val and algorithm == "value":
            torch.nn.utils.clip_grad_value_(params, clip_val)
        elif clip_val:
            torch.nn.utils.clip_grads_with_norm_(params, float(clip_val), norm)
        norms[name] = norm
    return norms


class _CudaGraphOutputs:
    """A loss compiled with CUDA graphs (``reduce-overhead``) whose outputs outlive the next call: CUDA graphs reuse
    their output memory at every replay, so loss terms kept for the iteration's metrics (or a second group's loss in
    the same step) would read overwritten memory. Each call starts a new graph step and clones the terms (scalars:
    the clone is free, and differentiable)."""

    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled

    def __call__(self, batch: TensorDictBase) -> TensorDictBase:
        torch.compiler.cudagraph_mark_step_begin()
        return self.compiled(batch).clone()
