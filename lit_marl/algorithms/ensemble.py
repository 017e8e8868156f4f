"""Per-group algorithms in one run (BenchMARL's ``EnsembleAlgorithm``): e.g. MAPPO for the ``adversary`` group and
IPPO for ``agent`` on MPE ``simple_tag``. An :class:`Ensemble` is a run whose learners are of different classes: each
group's is the one its algorithm would build alone, with that algorithm's own arguments (models, ``lr``…); the rest
(collection, evaluation, loop, optimizer, clipping, checkpoints) is the run's, set once on the ensemble (a group that
sets it is refused by name). The groups' learners name one loop kind (all on-policy, all off-policy, or all HAPPO's or
all HATRPO's agents one after another): one iteration has one training loop, and a mix is refused by name.
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

from typing_extensions import override

from lit_marl.algorithms.arguments import algorithm_entry, build_learner
from lit_marl.algorithms.base import MarlAlgorithm
from lit_marl.algorithms.learner import GroupLearner
from lit_marl.algorithms.loops import TrainingLoop, build_loop, loop_kind, loop_name, loop_sizes
from lit_marl.errors import CheckpointError, ConfigError
from lit_marl.utils import Configurable

class Ensemble(MarlAlgorithm):
    """Each agent group trained by its own algorithm's learner (BenchMARL's ``EnsembleAlgorithm``); see the module
    docstring.

    Examples:
        MAPPO for the three adversaries of VMAS *simple_tag* and IPPO for the agent they chase, at toy sizes
        (``configs/ensemble_mpe_simple_tag.yaml`` holds BenchMARL's, on PettingZoo's MPE):

        >>> import lightning.pytorch as pl
        >>> from lit_marl.algorithms import Ensemble
        >>> from lit_marl.envs import VmasTask
        >>> task = VmasTask("simple_tag", max_steps=10)
        >>> task.group_map
        {'adversary': ['adversary_0', 'adversary_1', 'adversary_2'], 'agent': ['agent_0']}
        >>> model = Ensemble(task, algorithms={
        ...     "adversary": {"class_path": "lit_marl.algorithms.MAPPO", "init_args": {"lr": 3e-4}},
        ...     "agent": {"class_path": "lit_marl.algorithms.IPPO"},
        ... }, num_envs=2, frames_per_batch=20, max_frames=20, minibatch_size=10, n_minibatch_iters=1,
        ...    evaluation_episodes=1)
        >>> pl.Trainer(max_epochs=-1, logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(model)
        >>> model.learners["adversary"].centralised_critic, model.learners["agent"].centralised_critic
        (True, False)

    Args:
        algorithms: ``{group: {class_path: <algorithm>, init_args: {…}}}``, one entry for every group of the task;
            ``init_args`` are that algorithm's own (``actor_model``, ``lr``, ``clip_epsilon``, ``memory_size`` …),
            without the run's. All on-policy (MAPPO, IPPO), all off-policy (the others), or one of HAPPO and
            HATRPO in every group.
        n_minibatch_iters: on-policy: passes over each batch (default: the algorithms' common default).
        minibatch_size: on-policy: frames per minibatch (default: as above).
        n_optimizer_steps: off-policy: optimizer steps per iteration (default: as above).
        train_batch_size: off-policy: transitions per group per step (default: as above).
    """

    algorithm_name: ClassVar[str] = "ensemble"
    #: what actions and models an ensemble takes is its algorithms' to say, so the registry never suggests it
    per_group_algorithms: ClassVar[bool] = True
    def __init__(self, task, algorithms: dict[str, dict[str, Any]], n_minibatch_iters: int | None = None,
                 minibatch_size: int | None = None, n_optimizer_steps: int | None = None,
                 train_batch_size: int | None = None, **kwargs: Any) -> None:
        if not isinstance(algorithms, dict) or not algorithms:
            raise ConfigError(f"algorithms: expected one entry per agent group, {{group: {{class_path, init_args}}}}, "
                              f"got {algorithms!r}")
        self._configured = {str(g): algorithm_entry(f"algorithms.{g}", entry) for g, entry in algorithms.items()}
        learners = {g: cls.learner_class for g, (cls, _) in self._configured.items()}
        if len({loop_kind(learner) for learner in learners.values()}) > 1:
            described = ", ".join(f"{g}: {self._configured[g][0].__name__} ({loop_name(learner)})"
                                  for g, learner in learners.items())
            raise ConfigError(f"algorithms: {described}; an ensemble collects once and trains every group in one loop "
                              f"per iteration, so its algorithms share one loop kind (as BenchMARL's "
                              f"EnsembleAlgorithm: all on-policy or all off-policy); allowed: on-policy MAPPO, IPPO, "
                              f"or off-policy MADDPG, IDDPG, MASAC, ISAC, IQL, VDN, QMIX, or HAPPO (or HATRPO) in "
                              f"every group")
        self._learner_kind = next(iter(learners.values()))
        loop = self._learner_kind.loop
        self.on_policy = loop.on_policy  # an instance attribute: the class's says nothing
        given = {"n_minibatch_iters": n_minibatch_iters, "minibatch_size": minibatch_size,
                 "n_optimizer_steps": n_optimizer_steps, "train_batch_size": train_batch_size}
        own = loop_sizes(loop)
        for name, value in given.items():
            if name not in own and value is not None:
                raise ConfigError(f"{name}: {value!r} is {'an off' if self.on_policy else 'an on'}-policy setting and "
                                  f"the ensemble's algorithms are {'on' if self.on_policy else 'off'}-policy; allowed: "
                                  f"null (their loop is set by {' and '.join(own)})")
        self._loop_sizes = {name: given[name] if given[name] is not None else self._common_default(name)
                            for name in own}
        super().__init__(task, **kwargs)
        # the groups' algorithms as configured, as plain data (a checkpoint loads with weights_only=True)
        self.hparams["algorithms"] = self._hparams_initial["algorithms"] = {
            g: {"class_path": f"{cls.__module__}.{cls.__qualname__}",
                "init_args": {k: v.to_config() if isinstance(v, Configurable) else v for k, v in args.items()}}
            for g, (cls, args) in self._configured.items()}

    @property
    def algorithm_classes(self) -> dict[str, type[MarlAlgorithm]]:
        """Each group's algorithm (whose learner it trains with)."""
        return {g: cls for g, (cls, _) in self._configured.items()}

    def _common_default(self, name: str) -> int:
        """The algorithms' common default of the loop size ``name`` (refused when their defaults differ)."""
        defaults = {g: inspect.signature(cls).parameters[name].default for g, (cls, _) in self._configured.items()}
        if len(set(defaults.values())) > 1:
            described = ", ".join(f"{g}: {self._configured[g][0].__name__} {v}" for g, v in defaults.items())
            raise ConfigError(f"{name}: the algorithms' defaults differ ({described}) and the groups share one "
                              f"training loop; allowed: set model.init_args.{name} on the ensemble")
        return next(iter(defaults.values()))

    @override
    def build_loop(self, arguments: dict[str, Any]) -> TrainingLoop:
        """The loop its groups' learners name (one kind, checked above), with the ensemble's sizes."""
        return build_loop(self, self._learner_kind, dict(self._loop_sizes))

    @override
    def check_learners(self, arguments: dict[str, Any]) -> None:
        for group, (cls, init_args) in self._configured.items():
            build_learner(cls, self.task, None, self.run_facts(), init_args, entry=f"algorithms.{group}")

    @override
    def build_learners(self, arguments: dict[str, Any], groups: list[str]) -> dict[str, GroupLearner]:
        for name in self._configured:
            if name not in groups:
                raise ConfigError(f"algorithms.{name}: the task {self.task.name} has no agent group {name!r}; "
                                  f"allowed: {', '.join(groups)}")
        missing = [g for g in groups if g not in self._configured]
        if missing:
            raise ConfigError(f"algorithms: no algorithm for group(s) {', '.join(map(repr, missing))} of the task "
                              f"{self.task.name}; allowed: one entry for each group: {', '.join(groups)}")
        learners = {}
        for group in groups:
            cls, init_args = self._configured[group]
            learners[group] = build_learner(cls, self.task, group, self.run_facts(), init_args, f"algorithms.{group}")
        chunks = {g: learner.chunk_length for g, learner in learners.items()}
        if len(set(chunks.values())) > 1:
            raise ConfigError(f"chunk_length: the groups' algorithms train on different slices ({chunks}) but share one "
                              f"training loop; allowed: the same actor_model recurrence, sequence_length and burn_in "
                              f"in every group")
        return learners

    @override
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint["lit_marl"]["ensemble"] = {g: self._configured[g][0].algorithm_name for g in self.groups}

    @override
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        saved = (checkpoint.get("lit_marl") or {}).get("ensemble")
        current = {g: self._configured[g][0].algorithm_name for g in self.groups}
        if saved is not None and saved != current:
            raise CheckpointError(f"checkpoint: its groups were trained by {saved}, but the ensemble's algorithms are "
                                  f"{current}; allowed: the same algorithm for each group")
        super().on_load_checkpoint(checkpoint)
