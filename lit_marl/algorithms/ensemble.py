"""Per-group algorithms in one run: an :class:`Ensemble` gives each agent group its own algorithm and networks.

As BenchMARL's ``EnsembleAlgorithm`` (``examples/ensemble``): e.g. MAPPO for the ``adversary`` group and IPPO for
``agent`` on MPE ``simple_tag``, or MADDPG and MASAC groups side by side. One Trainer, one collection, one optimizer:

- each group's algorithm is a full lit-marl algorithm built on a view of the task that holds only its group, so it
  builds its own policy, critic, loss, exploration, target updater and replay buffer exactly as it would alone, and
  the ensemble's per-group hooks (``_build_policy`` … ``param_groups``, ``process_batch``, ``loss``, target updates,
  priorities, replay buffers) call it;
- collection, evaluation, the training loop, clipping, checkpoints and metrics are the ensemble's: the same as for
  any algorithm, per group as ever (``train/<group>/…``, ``val/<group>/return``); each group's optimizer parameter
  groups keep their algorithm's ``lr`` and ``adam_eps``;
- what one collection and one training loop share is set once, on the ensemble (``frames_per_batch``, ``num_envs``,
  ``max_frames``, ``seed``, evaluation settings, ``collect_with_grad``, and the loop: ``n_minibatch_iters`` and
  ``minibatch_size`` on-policy, ``n_optimizer_steps`` and ``train_batch_size`` off-policy); a group that sets one of
  them is refused by name;
- the groups' algorithms are all on-policy or all off-policy (BenchMARL requires the same): an on-policy group
  trains on the batch just collected and discards it, an off-policy one on its replay buffer, and one iteration has
  one training loop. A mix is refused by name before any environment is built.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from functools import cached_property
from typing import Any, ClassVar

import lightning.pytorch as pl
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase, TensorDictSequential
from torch import nn
from torchrl.envs import EnvBase
from typing_extensions import override

from lit_marl.algorithms.base import MarlAlgorithm
from lit_marl.algorithms.off_policy import OffPolicyAlgorithm
from lit_marl.checkpoint import save_buffers_per_process
from lit_marl.data import OffPolicyData, OnPolicyData
from lit_marl.envs.base import Task, TaskSpecs
from lit_marl.errors import CheckpointError, ConfigError
from lit_marl.lightning_adapter import attached_trainer
from lit_marl.utils import Configurable

#: arguments of one collection and one evaluation: set on the ensemble, refused in a group's init_args
SHARED = ("task", "frames_per_batch", "num_envs", "max_frames", "seed", "sampling_device", "collect_with_grad",
          "compile", "evaluation_episodes", "evaluation_batch_size", "evaluation_deterministic", "evaluation_seed",
          "test_episodes", "test_videos")
#: the training loop's sizes, set on the ensemble: on-policy and off-policy
LOOP = {True: ("n_minibatch_iters", "minibatch_size"), False: ("n_optimizer_steps", "train_batch_size")}


class GroupsOf(Task):
    """The task as one algorithm of an ensemble sees it: the same task (specs, state, masks, config), with only
    ``groups`` in its group map. It never builds environments: the ensemble collects and evaluates."""

    def __init__(self, task: Task, groups: list[str]) -> None:
        self.task = task
        self.groups = list(groups)
        self.state_key, self.success_key = task.state_key, task.success_key
        self.simulator_arguments, self.differentiable = task.simulator_arguments, task.differentiable

    @property
    @override
    def name(self) -> str:
        return self.task.name

    @property
    @override
    def max_steps(self) -> int:
        return self.task.max_steps

    @property
    @override
    def continuous_actions(self) -> bool:
        return self.task.continuous_actions

    @cached_property
    @override
    def specs(self) -> TaskSpecs:
        full = self.task.specs
        return dataclasses.replace(full, group_map={g: list(full.group_map[g]) for g in self.groups})

    @override
    def _make_env(self, num_envs: int, seed: int | None, device: torch.device | str) -> EnvBase:
        raise RuntimeError("an ensemble's per-group algorithm builds no environments; the ensemble does")

    @override
    def to_config(self) -> dict[str, Any]:
        return self.task.to_config()


def _algorithm_class(group: str, entry: Any) -> tuple[type[MarlAlgorithm], dict[str, Any]]:
    """The class and init_args of ``algorithms.<group>``, refused by name unless it is a lit-marl algorithm."""
    from lit_marl.algorithms.registry import algorithms_by_name

    allowed = ", ".join(c.__name__ for c in algorithms_by_name().values() if c is not Ensemble)
    if not isinstance(entry, dict) or not isinstance(entry.get("class_path"), str):
        raise ConfigError(f"algorithms.{group}: expected {{class_path: <algorithm>, init_args: {{…}}}}, got {entry!r}; "
                          f"allowed algorithms: {allowed}")
    unknown = sorted(set(entry) - {"class_path", "init_args"})
    if unknown:
        raise ConfigError(f"algorithms.{group}: unknown key(s) {', '.join(unknown)}; allowed: class_path, init_args")
    path = entry["class_path"]
    module_name, _, cls_name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name or "lit_marl.algorithms"), cls_name)
    except (ImportError, AttributeError, ValueError):
        cls = None
    if not (isinstance(cls, type) and issubclass(cls, MarlAlgorithm) and cls.algorithm_name) or cls is Ensemble \
            or issubclass(cls, Ensemble):
        raise ConfigError(f"algorithms.{group}.class_path: {path!r} is not a lit-marl algorithm; allowed: {allowed} "
                          f"(as lit_marl.algorithms.<name>), or a subclass of one")
    init_args = dict(entry.get("init_args") or {})
    parameters = inspect.signature(cls.__init__).parameters
    for name in init_args:
        if name in SHARED or name in LOOP[True] + LOOP[False]:
            raise ConfigError(f"algorithms.{group}.init_args.{name}: set once for all groups on the ensemble "
                              f"(model.init_args.{name}), since the groups share one collection and training loop; "
                              f"allowed: leave it out of algorithms.{group}")
        if name not in parameters:
            own = ", ".join(p for p in parameters if p != "self" and p not in SHARED and p not in LOOP[cls.on_policy])
            raise ConfigError(f"algorithms.{group}.init_args.{name}: {cls.__name__} has no such argument; "
                              f"allowed: {own}")
    return cls, init_args


class Ensemble(MarlAlgorithm):
    """Each agent group trained by its own algorithm (BenchMARL's ``EnsembleAlgorithm``); see the module docstring.

    Args (the collection and evaluation arguments are :class:`~lit_marl.algorithms.base.MarlAlgorithm`'s):
        algorithms: ``{group: {class_path: <algorithm>, init_args: {…}}}``, one entry for every group of the task;
            ``init_args`` are that algorithm's own (``actor_model``, ``lr``, ``clip_epsilon``, ``memory_size`` …),
            without the shared ones below. All on-policy (MAPPO, IPPO) or all off-policy (the others).
        n_minibatch_iters / minibatch_size: on-policy: passes and minibatch frames of the one training loop
            (default: the algorithms' own default, which must then agree).
        n_optimizer_steps / train_batch_size: off-policy: optimizer steps per iteration and transitions per group
            per step (default: as above).

    Examples:
        >>> Ensemble(VmasTask("simple_tag"), algorithms={
        ...     "adversary": {"class_path": "lit_marl.algorithms.MAPPO", "init_args": {"lr": 3e-4}},
        ...     "agent": {"class_path": "lit_marl.algorithms.IPPO"}})
    """

    algorithm_name: ClassVar[str] = "ensemble"
    #: what actions and models an ensemble takes is its algorithms' to say (each checks its own group), so the
    #: registry never suggests it by its capability flags
    per_group_algorithms: ClassVar[bool] = True

    def __init__(
        self,
        task: Task,
        algorithms: dict[str, dict[str, Any]],
        frames_per_batch: int = 6000,
        num_envs: int = 10,
        max_frames: int = 3_000_000,
        n_minibatch_iters: int | None = None,
        minibatch_size: int | None = None,
        n_optimizer_steps: int | None = None,
        train_batch_size: int | None = None,
        evaluation_episodes: int = 10,
        evaluation_batch_size: int | None = None,
        evaluation_deterministic: bool = True,
        evaluation_seed: int | None = None,
        test_episodes: int = 100,
        test_videos: int = 0,
        sampling_device: str | None = None,
        compile: bool = False,
        seed: int = 0,
        collect_with_grad: bool = False,
    ) -> None:
        base_args = self.base_init_args(locals())  # checks every argument's type first
        if not isinstance(algorithms, dict) or not algorithms:
            raise ConfigError(f"algorithms: expected one entry per agent group, {{group: {{class_path, init_args}}}}, "
                              f"got {algorithms!r}")
        self._configured = {str(g): _algorithm_class(str(g), entry) for g, entry in algorithms.items()}
        kinds = {g: cls.on_policy for g, (cls, _) in self._configured.items()}
        if len(set(kinds.values())) > 1:
            described = ", ".join(f"{g}: {self._configured[g][0].__name__} ({'on' if on else 'off'}-policy)"
                                  for g, on in kinds.items())
            raise ConfigError(f"algorithms: {described}; an ensemble collects once and trains every group in one loop "
                              f"per iteration, so its algorithms are all on-policy or all off-policy (as BenchMARL's "
                              f"EnsembleAlgorithm); allowed: on-policy MAPPO, IPPO, or off-policy MADDPG, IDDPG, MASAC, "
                              f"ISAC, IQL, VDN, QMIX")
        self.on_policy = next(iter(kinds.values()))  # an instance attribute: the class's says nothing
        given = {"n_minibatch_iters": n_minibatch_iters, "minibatch_size": minibatch_size,
                 "n_optimizer_steps": n_optimizer_steps, "train_batch_size": train_batch_size}
        for name in LOOP[not self.on_policy]:
            if given[name] is not None:
                own = " and ".join(LOOP[self.on_policy])
                raise ConfigError(f"{name}: {given[name]!r} is {'an off' if self.on_policy else 'an on'}-policy "
                                  f"setting and the ensemble's algorithms are {'on' if self.on_policy else 'off'}-"
                                  f"policy; allowed: null (their loop is set by {own})")
        self._loop = {name: self._loop_value(name, given[name]) for name in LOOP[self.on_policy]}
        super().__init__(**base_args)
        # the groups' algorithms as configured, as plain data (a checkpoint loads with weights_only=True)
        plain = {g: {"class_path": f"{cls.__module__}.{cls.__qualname__}",
                     "init_args": {k: v.to_config() if isinstance(v, Configurable) else v for k, v in args.items()}}
                 for g, (cls, args) in self._configured.items()}
        self.hparams["algorithms"] = self._hparams_initial["algorithms"] = plain

    def _loop_value(self, name: str, value: int | None) -> int:
        """The ensemble's ``name``, else the algorithms' common default (refused when their defaults differ)."""
        if value is not None:
            return value
        defaults = {g: inspect.signature(cls.__init__).parameters[name].default for g, (cls, _) in self._configured.items()}
        if len(set(defaults.values())) > 1:
            described = ", ".join(f"{g}: {self._configured[g][0].__name__} {v}" for g, v in defaults.items())
            raise ConfigError(f"{name}: the algorithms' defaults differ ({described}) and the groups share one "
                              f"training loop; allowed: set model.init_args.{name} on the ensemble")
        return next(iter(defaults.values()))

    # ------------------------------------------------------------------ the groups' algorithms
    @override
    def _build_networks(self) -> None:
        groups = list(self.task.group_map)
        for name in self._configured:
            if name not in groups:
                raise ConfigError(f"algorithms.{name}: the task {self.task.name} has no agent group {name!r}; "
                                  f"allowed: {', '.join(groups)}")
        missing = [g for g in groups if g not in self._configured]
        if missing:
            raise ConfigError(f"algorithms: no algorithm for group(s) {', '.join(map(repr, missing))} of the task "
                              f"{self.task.name}; allowed: one entry for each group: {', '.join(groups)}")
        shared = {name: getattr(self, name) for name in SHARED if name not in ("task", "compile")}
        shared["compile"] = self.compile_losses  # (``self.compile`` is nn.Module's method)
        members = {}
        for group in groups:
            cls, init_args = self._configured[group]
            try:
                members[group] = cls(task=GroupsOf(self.task, [group]), **init_args, **shared, **self._loop)
            except ConfigError as err:
                where = f"algorithms.{group} ({cls.__name__}): " if str(err).startswith("task") \
                    else f"algorithms.{group}.init_args."
                raise ConfigError(where + str(err)) from None
        #: each group's algorithm (submodules: they hold the networks, and follow the ensemble's device and Trainer)
        self.algorithms = nn.ModuleDict(members)
        # the networks by group, as every algorithm has them (not registered twice: plain dicts)
        self.policies = {g: a.policies[g] for g, a in members.items()}
        self.critics = {g: a.critics[g] for g, a in members.items() if g in a.critics}
        self.losses = {g: a.losses[g] for g, a in members.items()}
        for name in ("chunk_length", "burn_in"):
            values = {g: getattr(a, name, None) for g, a in members.items()}
            if len(set(values.values())) > 1:
                raise ConfigError(f"{name}: the groups' algorithms train on different slices ({values}) but share one "
                                  f"training loop; allowed: the same actor_model recurrence, sequence_length and "
                                  f"burn_in in every group")
        for name, value in self._loop.items():
            setattr(self, name, value)

    @property
    def members(self) -> list[MarlAlgorithm]:
        """The groups' algorithms, in the task's group order."""
        return [self.algorithms[g] for g in self.groups]

    def _off_policy_members(self) -> list[OffPolicyAlgorithm]:
        return [a for a in self.members if isinstance(a, OffPolicyAlgorithm)]

    @property
    @override
    def trainer(self) -> pl.Trainer:
        return pl.LightningModule.trainer.fget(self)

    @trainer.setter
    def trainer(self, trainer: pl.Trainer | None) -> None:
        pl.LightningModule.trainer.fset(self, trainer)
        if "algorithms" in self._modules:  # Lightning only reaches LightningModules that are direct children
            for algorithm in self.algorithms.values():
                algorithm.trainer = trainer

    @override
    def _check_fits(self) -> None:
        """Each group's algorithm checks its own task and models when it is built."""

    @override
    def _build_policy(self, group: str) -> TensorDictModuleBase:
        return self.algorithms[group]._build_policy(group)

    @override
    def _build_critic(self, group: str) -> TensorDictModuleBase | None:
        return self.algorithms[group]._build_critic(group)

    @override
    def _build_loss(self, group: str) -> nn.Module:
        return self.algorithms[group]._build_loss(group)

    @override
    def param_groups(self, group: str) -> dict[str, list[nn.Parameter]]:
        return self.algorithms[group].param_groups(group)

    @override
    def process_batch(self, batch: TensorDictBase) -> TensorDictBase:
        for algorithm in self.members:  # each reads and writes its own group's entries
            batch = algorithm.process_batch(batch)
        return batch

    @override
    def loss(self, group: str, batch: TensorDictBase) -> TensorDictBase:
        return self.algorithms[group].loss(group, batch)

    @override
    def group_batch(self, batch: TensorDictBase, group: str) -> TensorDictBase:
        return self.algorithms[group].group_batch(batch, group)

    @override
    def training_keys(self) -> list:
        return list(dict.fromkeys(key for algorithm in self.members for key in algorithm.training_keys()))

    def group_keys(self, group: str) -> list:
        """Off-policy: what ``group``'s replay buffer stores (its algorithm's choice)."""
        return self.algorithms[group].group_keys(group)

    def replay_buffers(self) -> dict[str, Any]:
        """Off-policy: every group's replay buffer (each built by the group's algorithm)."""
        return {g: buffer for algorithm in self._off_policy_members() for g, buffer in algorithm.replay_buffers().items()}

    @property
    def chunk_length(self) -> int | None:
        return self.members[0].chunk_length

    @property
    def burn_in(self) -> int:
        return getattr(self.members[0], "burn_in", 0)

    @property
    def minibatches_per_iteration(self) -> int:
        return self.members[0].minibatches_per_iteration

    @override
    def policy_for_collection(self) -> TensorDictModuleBase:
        modules = [algorithm.policy_for_collection() for algorithm in self.members]  # exploration included
        return modules[0] if len(modules) == 1 else TensorDictSequential(*modules)

    @override
    def train_dataloader(self) -> OnPolicyData | OffPolicyData:
        return OnPolicyData(self) if self.on_policy else OffPolicyData(self)

    @override
    def configure_optimizers(self) -> torch.optim.Optimizer:
        groups = []
        for group in self.groups:
            algorithm = self.algorithms[group]
            for role, params in algorithm.param_groups(group).items():
                params = [p for p in params if p.requires_grad]
                if params:  # the group's own learning rate and epsilon
                    groups.append({"params": params, "name": f"{group}/{role}", "lr": algorithm.lr,
                                   "eps": algorithm.adam_eps, "clip": algorithm.clip_group(group, role)})
        return torch.optim.Adam(groups)

    # ------------------------------------------------------------------ per iteration / step (off-policy parts)
    @override
    def collect_batch(self) -> TensorDictBase:
        self._get_sampler()  # builds the groups' collection policies (and their random-action switches)
        for algorithm in self._off_policy_members():  # what OffPolicyAlgorithm.collect_batch does, per group
            algorithm.prepare_collection(self.frames)
        batch = super().collect_batch()
        for algorithm in self.members:
            algorithm.frames = self.frames
        for algorithm in self._off_policy_members():
            algorithm.advance_exploration(batch.numel())
        return batch

    @override
    def on_train_epoch_end(self) -> None:
        super().on_train_epoch_end()
        for algorithm in self.members:  # the counters each group's algorithm reads (exploration, warm-up, tokens)
            algorithm.frames, algorithm.iteration = self.frames, self.iteration

    @override
    def on_train_batch_end(self, outputs: Any, batch: TensorDictBase, batch_idx: int) -> None:
        for algorithm in self._off_policy_members():  # priorities and target networks of each group
            algorithm.update_skipped = self.update_skipped
            algorithm.on_train_batch_end(outputs, batch, batch_idx)

    # ------------------------------------------------------------------ checkpoints
    @override
    def setup(self, stage: str) -> None:
        super().setup(stage)
        if self._off_policy_members() and attached_trainer(self) is not None and self.world_size > 1:
            save_buffers_per_process(self.trainer.strategy)

    @override
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        meta = checkpoint["lit_marl"]
        meta["ensemble"] = {g: self.algorithms[g].algorithm_name for g in self.groups}
        for algorithm in self._off_policy_members():  # replay buffers and target updaters, by group
            own: dict[str, Any] = {}
            algorithm.on_save_checkpoint(own)
            for key in ("replay_buffers", "rank_buffers_state", "target_updaters"):
                if key in own["lit_marl"]:
                    meta.setdefault(key, {}).update(own["lit_marl"][key])
            if "rank_buffers" in own["lit_marl"]:
                meta["rank_buffers"] = own["lit_marl"]["rank_buffers"]

    @override
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        saved = (checkpoint.get("lit_marl") or {}).get("ensemble")
        current = {g: self.algorithms[g].algorithm_name for g in self.groups}
        if saved is not None and saved != current:
            raise CheckpointError(f"checkpoint: its groups were trained by {saved}, but the ensemble's algorithms are "
                                  f"{current}; allowed: the same algorithm for each group")
        super().on_load_checkpoint(checkpoint)
        meta = checkpoint["lit_marl"]
        for algorithm in self.members:
            algorithm.frames, algorithm.iteration = self.frames, self.iteration
        for algorithm in self._off_policy_members():  # each takes its own groups' buffers and target updaters
            own = {**meta, "algorithm": algorithm.algorithm_name, "group_map": algorithm.task.group_map}
            for key in ("replay_buffers", "target_updaters"):
                if key in meta:
                    own[key] = {g: s for g, s in meta[key].items() if g in algorithm.groups}
            algorithm.on_load_checkpoint({"lit_marl": own})
            restored = algorithm._restored
            if restored is not None and "replay_buffers" in restored:  # a DDP sidecar holds every group's
                restored["replay_buffers"] = {g: s for g, s in restored["replay_buffers"].items()
                                              if g in algorithm.groups}
