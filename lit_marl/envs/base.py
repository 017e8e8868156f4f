"""The Task contract: how one benchmark task becomes torchrl environments.

A Task knows a simulator and nothing about learning. Algorithms read its specs (built once from a
cheap probe environment) to size their networks, and ask it for batched environments to collect
and evaluate with.
"""

from __future__ import annotations

import contextlib
import math
import re
import traceback
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch
from torchrl.data import Composite, TensorSpec
from torchrl.envs import EnvBase, RewardSum, TransformedEnv

from lit_marl.errors import ConfigError
from lit_marl.utils import Configurable, isolated_rng


@dataclass(frozen=True)
class TaskSpecs:
    """What an algorithm needs to know to build its networks (batch dimensions stripped)."""

    #: the agent groups, ``{group: [agent names]}``
    group_map: dict[str, list[str]]
    #: every observation entry, per group ``(group, "observation")`` shaped ``[n_agents, ...]`` and its infos, and the
    #: state where the task has one
    observation_spec: Composite
    #: per group ``(group, "action")``
    action_spec: Composite
    #: per group ``(group, "reward")``
    reward_spec: Composite
    #: the ``done`` and ``terminated`` entries (``truncated`` where the env reports it)
    done_spec: Composite
    #: the global state's spec, where the task has one (:attr:`Task.state_key`)
    state_spec: TensorSpec | None

    def n_agents(self, group: str) -> int:
        """Agents in ``group``."""
        return len(self.group_map[group])

    def group_action_spec(self, group: str) -> TensorSpec:
        """The action spec of one agent-stacked ``group`` (``[n_agents, *action_shape]``)."""
        return self.action_spec[group, "action"]


class Task(Configurable, ABC):
    """One benchmark task (a scenario of a simulator with its settings).

    Subclasses implement :meth:`_make_env` (a batched torchrl env, groups as nested keys) and say
    whether actions are continuous. Everything else (specs, episode-return bookkeeping) is shared.

    **A simulator's refusal is a config error.** The probe env behind :attr:`specs` is built inside
    :meth:`probing`, which turns any exception the simulator raises (VMAS's bare ``assert self.n_agents > 1``, a
    ``TypeError`` for an unknown keyword, …) into a :class:`~lit_marl.errors.ConfigError` that names the init
    argument holding the simulator's own arguments (:attr:`simulator_arguments`), the arguments given and the
    simulator's message (for an exception without one, such as a bare ``assert``, the failing source line). The
    CLI prints it and exits with code 2 before any training env, collector or run folder is made. A new Task family
    gets this by setting :attr:`simulator_arguments` (e.g. ``"substrate_kwargs"``); a family that builds a probe
    of its own outside :attr:`specs` (say, in ``__init__``) wraps it in ``with self.probing(): ...``, and may
    override :meth:`_simulator_label` / :meth:`_probe_allowed` to word the message.
    """

    #: key of the global state at the root of the env's TensorDict, where the task has one
    state_key: str | None = None
    #: key under each group of a per-agent success flag, where the task defines success
    success_key: str | None = None
    #: the init argument that holds the simulator's own arguments (``"scenario_kwargs"``, ``"task_kwargs"``,
    #: ``"env_kwargs"``): what a failure while building the probe env is reported under (``task.<field>``);
    #: ``None`` reports it under ``task`` with all init arguments
    simulator_arguments: str | None = None
    #: whether the simulator can keep the autograd graph from actions to what it returns (``collect_with_grad``);
    #: a task that sets it accepts ``grad_enabled=True`` in :meth:`_make_env`
    differentiable: bool = False

    @property
    @abstractmethod
    def name(self) -> str:
        """``family/scenario``, used in run names and checkpoint compatibility checks."""

    @property
    def max_steps(self) -> int:
        """Episode length limit (steps); subclasses keep it in ``_max_steps`` (or override this)."""
        return self._max_steps

    @property
    def continuous_actions(self) -> bool:
        """Whether the task is configured with continuous (True) or discrete (False) actions; subclasses keep it
        in ``_continuous_actions`` (or override this)."""
        return self._continuous_actions

    @abstractmethod
    def _make_env(self, num_envs: int, seed: int | None, device: torch.device | str) -> EnvBase:
        """A batched torchrl env with ``num_envs`` parallel episodes and grouped nested keys."""

    def make_env(self, num_envs: int, seed: int | None = None, device: torch.device | str = "cpu",
                 grad_enabled: bool = False) -> EnvBase:
        """The env wrapped with per-group episode-return tracking (``(group, "episode_reward")``); with
        ``grad_enabled`` (only where :attr:`differentiable`), one whose steps keep the autograd graph."""
        if grad_enabled and not self.differentiable:
            raise ConfigError(f"collect_with_grad: {type(self).__name__} ({self.name}) is not differentiable; "
                              f"allowed: false, or a differentiable task such as VmasTask")
        extra = {"grad_enabled": True} if grad_enabled else {}  # other tasks take no such argument
        env = self._make_env(num_envs=num_envs, seed=seed, device=device, **extra)
        reward_keys, reset_keys = list(env.reward_keys), list(env.reset_keys)
        # each group's return restarts with that group's reset flag where the env has one (PettingZoo),
        # else with the root one (VMAS)
        reset_keys = [(key[0], "_reset") if isinstance(key, tuple) and (key[0], "_reset") in reset_keys
                      else "_reset" for key in reward_keys]
        return TransformedEnv(env, RewardSum(in_keys=reward_keys, reset_keys=reset_keys))

    def simulator_rng_state(self) -> Any:
        """State of random generators the simulator keeps outside torch/numpy/random's global ones
        (plain data for checkpoints); ``None`` where it has none."""
        return None

    def set_simulator_rng_state(self, state: Any) -> None:
        """Restore what :meth:`simulator_rng_state` returned."""

    @contextlib.contextmanager
    def isolated_rng(self, seed: int | None = None) -> Iterator[None]:
        """Like :func:`lit_marl.utils.isolated_rng`, and the simulator's own generators are restored too:
        seeding an evaluation env must not change what the training envs draw next."""
        simulator_state = self.simulator_rng_state()
        try:
            with isolated_rng(seed):
                yield
        finally:
            if simulator_state is not None:
                self.set_simulator_rng_state(simulator_state)

    @contextlib.contextmanager
    def probing(self) -> Iterator[None]:
        """Build a probe env from the user's arguments inside this: any exception but a :class:`ConfigError`
        becomes a ConfigError naming :attr:`simulator_arguments`, the arguments given and the simulator's message
        (see the class docstring). ``KeyboardInterrupt`` and other ``BaseException`` pass through."""
        try:
            yield
        except ConfigError:
            raise
        except Exception as err:
            raise ConfigError(self._probe_failure(err)) from err

    def _check_finite_arguments(self) -> None:
        """A NaN or infinity among the simulator's arguments (``.nan`` in a YAML file) is refused by name: simulators
        take it and fail later, mid-step (VMAS: a bare assertion at the first action), or train on it."""
        if self.simulator_arguments is None:
            return

        def walk(value: Any, where: str) -> None:
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"task.{where}: {value!r} is not a finite number; allowed: a finite number")
            if isinstance(value, dict):
                for key, item in value.items():
                    walk(item, f"{where}.{key}")
            elif isinstance(value, (list, tuple)):
                for i, item in enumerate(value):
                    walk(item, f"{where}[{i}]")

        walk(getattr(self, self.simulator_arguments, None), self.simulator_arguments)

    def _probe_failure(self, err: Exception) -> str:
        """The message of :meth:`probing`'s ConfigError for ``err``."""
        field = self.simulator_arguments
        detail = simulator_message(err)
        label = self._simulator_label()
        if field is None:
            try:
                settings = repr(self)
            except Exception:  # a task that failed half-way through its __init__
                settings = type(self).__name__
            return f"task: {label} failed to build with {settings}: {detail}; allowed: settings {label} accepts"
        return (f"task.{field}: {label} failed to build with {field}={self._simulator_arguments_given()!r}: "
                f"{detail}; {self._probe_allowed(field, label)}")

    def _simulator_arguments_given(self) -> Any:
        """The value of :attr:`simulator_arguments` as the user gave it (default: the attribute of that name)."""
        return getattr(self, self.simulator_arguments or "", None)

    def _simulator_label(self) -> str:
        """What was built, in :meth:`probing`'s messages (default: :attr:`name`, e.g. ``vmas/balance``)."""
        return self.name

    def _probe_allowed(self, field: str, label: str) -> str:
        """The "allowed" part of :meth:`probing`'s messages."""
        return f"allowed: arguments {label} accepts, with values it accepts (task.{field})"

    @cached_property
    def specs(self) -> TaskSpecs:
        """Specs read from a one-env probe, built on CPU without touching the caller's RNG (inside
        :meth:`probing`: a simulator's refusal of the task's arguments is a :class:`ConfigError`)."""
        self._check_finite_arguments()
        with self.probing(), self.isolated_rng():
            env = self._make_env(num_envs=1, seed=0, device="cpu")
            try:
                batch = env.batch_size

                def strip(spec: Composite) -> Composite:
                    # drop the env batch dims so specs describe one environment
                    return spec[(0,) * len(batch)] if len(batch) else spec

                group_map = {g: list(agents) for g, agents in self._group_map(env).items()}
                observation_spec = strip(env.full_observation_spec.clone())
                self._probe_step(env)
                return TaskSpecs(
                    group_map=group_map,
                    observation_spec=observation_spec,
                    action_spec=strip(env.full_action_spec.clone()),
                    reward_spec=strip(env.full_reward_spec.clone()),
                    done_spec=strip(env.full_done_spec.clone()),
                    state_spec=observation_spec[self.state_key] if self.state_key is not None else None,
                )
            finally:
                env.close()

    def _probe_step(self, env: EnvBase) -> None:
        """Reset the probe env and step it once with a random legal action: simulator arguments of a wrong type or
        value that building and resetting accept (VMAS reads most scenario arguments only when it steps) fail here,
        as a :class:`ConfigError` of :meth:`probing`, instead of at the first collection step."""
        env.rand_step(env.reset())

    def _group_map(self, env: EnvBase) -> dict[str, list[str]]:
        """The groups of the probe env (torchrl's multi-agent envs report ``env.group_map``)."""
        return env.group_map

    @property
    def group_map(self) -> dict[str, list[str]]:
        """The agent groups, ``{group: [agent names]}``: each group has its own networks and loss."""
        return self.specs.group_map

    @property
    def has_state(self) -> bool:
        """Whether the task reports a global state (:attr:`state_key`), which centralised critics and QMIX's mixer
        then read instead of the joint observations."""
        return self.state_key is not None

    def action_mask_key(self, group: str) -> tuple[str, str] | None:
        """``(group, "action_mask")`` where the task marks each agent's legal discrete actions (True = legal)."""
        key = (group, "action_mask")
        return key if key in self.specs.observation_spec.keys(include_nested=True) else None

    def renderer_problem(self) -> str | None:
        """Why :meth:`render` cannot draw frames on this machine (a missing OpenGL library…), checked before videos
        are recorded; ``None`` where it can (or where the task cannot render at all: see :meth:`render`)."""
        return None

    def render(self, env: EnvBase, env_index: int = 0):
        """An RGB frame (H, W, 3 uint8 array) of one sub-environment, for videos."""
        raise ConfigError(f"rendering: {type(self).__name__} ({self.name}) cannot render frames; allowed: tasks that "
                          f"implement Task.render, such as VmasTask")


def simulator_message(err: BaseException) -> str:
    """``Type: message`` of a simulator's exception; for one without a message (a bare ``assert``), the failing
    source line instead: ``AssertionError at vmas/scenarios/balance.py:22: assert self.n_agents > 1``."""
    text = str(err).strip()
    if text:
        return f"{type(err).__name__}: {text}"
    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return f"{type(err).__name__} (no message)"
    frame = frames[-1]
    # a path inside site-packages from the package on (vmas/scenarios/balance.py), else as it is
    path = re.split(r"[/\\](?:site|dist)-packages[/\\]", frame.filename)[-1]
    return f"{type(err).__name__} at {path}:{frame.lineno}: {(frame.line or '').strip() or '(source not available)'}"
