"""Gymnasium tasks: any registered single-agent env as a one-agent group.

The env id is built ``num_envs`` times into a Gymnasium vector env (``SyncVectorEnv`` in this process, or
``AsyncVectorEnv`` with one worker process per env), wrapped by torchrl's :class:`~torchrl.envs.GymWrapper`
and given a group: ``(group, "observation")`` ``[*B, 1, D]``, ``(group, "reward")`` ``[*B, 1, 1]``,
``(group, "action")``. Every multi-agent algorithm then trains it as a team of one (MAPPO/IPPO with one
agent is PPO). Where the env reports ``info["is_success"]`` it becomes ``(group, "is_success")`` and the
evaluation's success rate.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from functools import cached_property
from typing import Any

import gymnasium as gym
import torch
from torchrl.data import Categorical
from torchrl.envs import Compose, EnvBase, GymWrapper, RenameTransform, TransformedEnv, UnsqueezeTransform
from torchrl.envs.gym_like import default_info_dict_reader
from typing_extensions import override

from lit_marl.envs.base import Task
from lit_marl.errors import ConfigError, check_types, one_of, positive_int, did_you_mean

VECTORIZATION = ("sync", "async")


def _make_one(env_id: str, max_steps: int, kwargs: dict[str, Any]) -> gym.Env:
    return gym.make(env_id, max_episode_steps=max_steps, **kwargs)


class GymnasiumTask(Task):
    """A registered Gymnasium env (``gymnasium.make(env_id)``) as one agent.

    Args:
        env_id: a registered id, e.g. ``"CartPole-v1"``, ``"Pendulum-v1"``, ``"LunarLander-v3"``.
        max_steps: episode length limit (Gymnasium's ``max_episode_steps``); default: the id's registered one.
        env_kwargs: arguments of ``gymnasium.make`` for this env (e.g. ``{"g": 9.81}`` for Pendulum).
        vectorization: ``"sync"`` steps the envs one after another in this process; ``"async"`` in one worker
            process each (worth it for slow simulators).
        group: the name of the one-agent group (the metrics' ``train/<group>/…``).

    The env's refusal of ``env_kwargs`` (when it is made, reset or stepped once) is a ``ConfigError`` naming
    ``task.env_kwargs`` (see :class:`~lit_marl.envs.base.Task`).
    """

    simulator_arguments = "env_kwargs"

    def __init__(
        self,
        env_id: str = "CartPole-v1",
        max_steps: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
        vectorization: str = "sync",
        group: str = "agent",
    ) -> None:
        check_types(GymnasiumTask.__init__, dict(env_id=env_id, max_steps=max_steps, env_kwargs=env_kwargs,
                                                 vectorization=vectorization, group=group), prefix="task.")
        if env_id not in gym.registry:
            hint = did_you_mean(env_id, gym.registry, cutoff=0.6)
            raise ConfigError(f"task.env_id: {env_id!r} is not a registered Gymnasium env; {hint}allowed: any id in "
                              f"gymnasium.registry (after importing the package that registers it)")
        self.env_id = env_id
        registered = gym.registry[env_id].max_episode_steps
        if max_steps is None and registered is None:
            raise ConfigError(f"task.max_steps: {env_id} registers no episode limit; allowed: a positive integer")
        self._max_steps = positive_int("task.max_steps", max_steps if max_steps is not None else registered)
        self.env_kwargs = dict(env_kwargs or {})
        self.vectorization = one_of("task.vectorization", vectorization, VECTORIZATION)
        if not isinstance(group, str) or not group:
            raise ConfigError(f"task.group: must be a non-empty name, got {group!r}")
        self.group = group
        self._check_spaces(env_id)

    def _check_spaces(self, label: str) -> None:
        observation_space, space, _ = self._spaces
        if not (isinstance(observation_space, gym.spaces.Box) and len(observation_space.shape) == 1):
            raise ConfigError(f"{self._source_field}: {label} observes {observation_space}; allowed: a one-dimensional "
                              f"Box (wrap other observations in a custom env that flattens them)")
        if not isinstance(space, (gym.spaces.Box, gym.spaces.Discrete)):
            raise ConfigError(f"{self._source_field}: {label} has a {type(space).__name__} action space; allowed: Box "
                              f"(continuous) or Discrete")

    @property
    @override
    def continuous_actions(self) -> bool:
        return isinstance(self._spaces[1], gym.spaces.Box)

    @property
    @override
    def name(self) -> str:
        return f"gymnasium/{self.env_id}"

    @property
    @override
    def success_key(self) -> str | None:  # type: ignore[override]
        """``"is_success"`` where the env reports ``info["is_success"]``."""
        return "is_success" if self._spaces[2] else None

    @cached_property
    def _spaces(self) -> tuple[gym.Space, gym.Space, bool]:
        """Observation and action space, and whether the env reports ``info["is_success"]`` (a probe: one env made,
        reset and stepped; a failure, such as a missing extra (box2d, mujoco) or a bad env_kwargs, is a ConfigError)."""
        with self.probing():
            env = self._one_env()()
            try:
                _, info = env.reset(seed=0)
                _, _, _, _, step_info = env.step(env.action_space.sample())
                return env.observation_space, env.action_space, "is_success" in info or "is_success" in step_info
            finally:
                env.close()

    #: the init arg that names the env (in error messages)
    _source_field = "task.env_id"

    @override
    def _simulator_label(self) -> str:
        return f"gymnasium.make({self.env_id!r})"

    @override
    def _probe_allowed(self, field: str, label: str) -> str:
        return f"allowed: arguments the env registered as task.env_id {self.env_id!r} accepts, with values it accepts"

    def _one_env(self) -> Callable[[], gym.Env]:
        """A picklable factory of one episode's env (``async`` workers build their own)."""
        return functools.partial(_make_one, self.env_id, self.max_steps, self.env_kwargs)

    @override
    def _make_env(self, num_envs: int, seed: int | None, device: torch.device | str) -> EnvBase:
        make = self._one_env()
        autoreset = gym.vector.AutoresetMode.SAME_STEP  # what torchrl's wrapper expects
        if self.vectorization == "async":
            # fork (fast start) unless CUDA is initialised, where only spawn is safe
            context = "spawn" if torch.cuda.is_available() and torch.cuda.is_initialized() else "fork"
            vec_env = gym.vector.AsyncVectorEnv([make] * num_envs, autoreset_mode=autoreset, context=context)
        else:
            vec_env = gym.vector.SyncVectorEnv([make] * num_envs, autoreset_mode=autoreset)
        base = GymWrapper(vec_env, categorical_action_encoding=True, device=device)
        per_step = ["observation", "reward"]
        if self.success_key is not None:
            flag = Categorical(n=2, shape=(num_envs,), dtype=torch.bool, device=device)
            base.set_info_dict_reader(default_info_dict_reader(["is_success"], spec={"is_success": flag}))
            per_step.append("is_success")
        grouped = [(self.group, key) for key in per_step]
        action_dim = -2 if self.continuous_actions else -1  # [*B, A] -> [*B, 1, A]; [*B] -> [*B, 1]
        flags = [UnsqueezeTransform(dim=-1, in_keys=["is_success"])] if "is_success" in per_step else []
        env = TransformedEnv(base, Compose(
            UnsqueezeTransform(dim=-2, in_keys=["observation", "reward"]),  # [*B, D] -> [*B, 1, D]
            *flags,  # [*B] -> [*B, 1]
            UnsqueezeTransform(dim=action_dim, in_keys_inv=["action"]),
            RenameTransform(in_keys=per_step, out_keys=grouped, in_keys_inv=["action"],
                            out_keys_inv=[(self.group, "action")], create_copy=False),
        ))
        if seed is not None:
            env.set_seed(seed)
        return env

    @override
    def _group_map(self, env: EnvBase) -> dict[str, list[str]]:
        return {self.group: [f"{self.group}_0"]}

    @override
    def render(self, env: EnvBase, env_index: int = 0):
        raise ConfigError(f"rendering: {self.name} is vectorised by Gymnasium, which renders no single env; "
                          f"allowed: tasks that implement Task.render, such as VmasTask")

