"""Multi-agent MuJoCo (MaMuJoCo; Peng et al. 2021, "FACMAC"), as ``gymnasium_robotics.mamujoco_v1`` ships it.

A Gymnasium MuJoCo robot (HalfCheetah, Ant, Hopper, …) whose joints are split among agents (``agent_conf``: ``2x3``
is two agents of three joints each). Every agent acts on its own joints with continuous torques in [-1, 1], sees its
joints and those up to ``agent_obsk`` hops away, and all agents share the robot's reward. The robot's full
observation is the global state (``state()``), for centralised critics and mixers. Reaching ``max_steps`` truncates
an episode; a robot that falls (Ant, Hopper, Walker2d, Humanoid: Gymnasium's ``terminate_when_unhealthy``)
terminates it.

Install: ``pip install 'lit-marl[mamujoco]'``. Videos render through MuJoCo's headless OpenGL (``MUJOCO_GL=egl`` by
default here, or ``osmesa``); where neither works, asking for videos is refused by name.
"""

from __future__ import annotations

import functools
import os
import warnings
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase
from typing_extensions import override

from lit_marl.envs.agent_tuple import import_simulator
from lit_marl.envs.grouping import group_agents
from lit_marl.envs.base import Task
from lit_marl.envs.batching import batched_env, episode_in_process
from lit_marl.envs.pettingzoo import check_workers
from lit_marl.errors import ConfigError, check_types, did_you_mean, positive_int

#: every scenario with the agent_confs gymnasium-robotics 1.4 factorises it into (``obsk.get_parts_and_edges``).
#: Not offered: CoupledHalfCheetah (fails to build in gymnasium-robotics 1.4.2: IndexError in its observations),
#: ManySegmentAnt/ManySegmentSwimmer (each build writes a generated model file into the installed package and
#: deletes it: unsafe for episodes built at once in worker processes), InvertedPendulum/InvertedDoublePendulum (one
#: actuator: no multi-agent factorisation).
SCENARIOS: dict[str, tuple[str, ...]] = {
    "HalfCheetah": ("2x3", "6x1"),
    "Ant": ("2x4", "2x4d", "4x2"),
    "Hopper": ("3x1",),
    "Walker2d": ("2x3",),
    "Humanoid": ("9|8",),
    "HumanoidStandup": ("9|8",),
    "Swimmer": ("2x1",),
    "Reacher": ("2x1",),
    "Pusher": ("3p",),
}
#: Gymnasium MuJoCo arguments lit-marl sets itself
_OWN = {"max_episode_steps": "task.max_steps", "render_mode": "'rgb_array', for videos"}
#: MaMuJoCo's episode length (Gymnasium MuJoCo's time limit)
DEFAULT_MAX_STEPS = 1000


def _headless_gl() -> None:
    """MuJoCo renders through GLFW (a display) unless told otherwise: default to EGL, headless."""
    os.environ.setdefault("MUJOCO_GL", "egl")


def _warnings_as_python_warnings() -> None:
    """MuJoCo writes its warnings (mujoco 4 warns about HalfCheetah's ``settotalmass`` at every build) to
    ``MUJOCO_LOG.TXT`` in the working directory unless a handler is set: where none is, send them to Python's
    ``warnings`` (shown once per place, never a file)."""
    import mujoco

    if mujoco.get_mju_user_warning() is None:
        mujoco.set_mju_user_warning(lambda text: warnings.warn(f"MuJoCo: {text.strip()}", stacklevel=2))


def _make_simulator(scenario: str, agent_conf: str, agent_obsk: int, max_steps: int, env_kwargs: dict[str, Any]):
    from gymnasium_robotics import mamujoco_v1

    _warnings_as_python_warnings()

    return mamujoco_v1.parallel_env(scenario, agent_conf, agent_obsk=agent_obsk, render_mode="rgb_array",
                                    max_episode_steps=max_steps, **env_kwargs)


class MaMuJoCoEnv(EnvBase):
    """One MaMuJoCo episode with grouped keys.

    Per group: ``(group, "observation")`` float32 ``[n_agents, D]``, ``(group, "action")`` ``[n_agents, A]`` bounded
    by the joints' limits, ``(group, "reward")`` ``[n_agents, 1]`` (the shared reward). At the root: ``"state"``, the
    robot's full observation ``[S]``, and ``done``, ``terminated``, ``truncated`` ``[1]``. The seed given to
    :meth:`set_seed` seeds the next reset; later resets draw from the simulator's own generator.
    """

    def __init__(self, simulator: Any, groups: dict[str, list[str]], max_steps: int,
                 device: torch.device | str = "cpu") -> None:
        super().__init__(device=device, batch_size=torch.Size([]))
        self._env = simulator
        self._groups = {g: list(agents) for g, agents in groups.items()}
        self._max_steps = max_steps
        self._steps = 0
        self._pending_seed: int | None = None
        observations, actions, rewards = {}, {}, {}
        for group, agents in self._groups.items():
            n = len(agents)
            obs, act = simulator.observation_space(agents[0]), simulator.action_space(agents[0])
            observations[group] = Composite(
                {"observation": Unbounded((n, *obs.shape), dtype=torch.float32, device=device)}, shape=(n,),
                device=device)
            low = torch.as_tensor(np.stack([simulator.action_space(a).low for a in agents]), dtype=torch.float32)
            high = torch.as_tensor(np.stack([simulator.action_space(a).high for a in agents]), dtype=torch.float32)
            actions[group] = Composite({"action": Bounded(low, high, shape=(n, *act.shape), dtype=torch.float32,
                                                          device=device)}, shape=(n,), device=device)
            rewards[group] = Composite({"reward": Unbounded((n, 1), device=device)}, shape=(n,), device=device)
        state = simulator.state()
        observations["state"] = Unbounded(state.shape, dtype=torch.float32, device=device)
        self.observation_spec = Composite(observations, device=device)
        self.action_spec = Composite(actions, device=device)
        self.reward_spec = Composite(rewards, device=device)
        flag = Categorical(2, shape=(1,), dtype=torch.bool, device=device)
        self.done_spec = Composite({"done": flag, "terminated": flag.clone(), "truncated": flag.clone()}, device=device)

    @property
    def simulator(self) -> Any:
        """The wrapped ``MultiAgentMujocoEnv``."""
        return self._env

    def _tensor(self, value: Any) -> torch.Tensor:
        return torch.as_tensor(np.asarray(value, dtype=np.float32), device=self.device)

    def _observations(self, observations: dict[str, np.ndarray]) -> TensorDict:
        out = {group: {"observation": self._tensor(np.stack([observations[a] for a in agents]))}
               for group, agents in self._groups.items()}
        out["state"] = self._tensor(self._env.state())
        return TensorDict(out, batch_size=[], device=self.device)

    @override
    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        observations, _ = self._env.reset(seed=self._pending_seed)
        self._pending_seed = None
        self._steps = 0
        out = self._observations(observations)
        for key in ("done", "terminated", "truncated"):
            out.set(key, torch.zeros(1, dtype=torch.bool, device=self.device))
        return out

    @override
    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        actions = {}
        for group, agents in self._groups.items():
            for agent, action in zip(agents, tensordict.get((group, "action")).detach().cpu().numpy()):
                actions[agent] = action.astype(np.float64)
        observations, rewards, terminations, truncations, _ = self._env.step(actions)
        self._steps += 1
        terminated = any(bool(terminations[a]) for a in self._env.possible_agents)
        truncated = not terminated and (any(bool(truncations[a]) for a in self._env.possible_agents)
                                        or self._steps >= self._max_steps)
        out = self._observations(observations)
        for group, agents in self._groups.items():
            out.set((group, "reward"), self._tensor([[rewards[a]] for a in agents]))
        out.set("done", torch.tensor([terminated or truncated], device=self.device))
        out.set("terminated", torch.tensor([terminated], device=self.device))
        out.set("truncated", torch.tensor([truncated], device=self.device))
        return out

    @override
    def _set_seed(self, seed: int | None) -> None:
        self._pending_seed = seed

    def render(self) -> np.ndarray:
        """An RGB frame ``[H, W, 3]`` uint8 of the robot (MuJoCo's offscreen renderer)."""
        _headless_gl()
        return self._env.render()

    @override
    def close(self, *, raise_if_closed: bool = True) -> None:
        self._env.close()
        super().close(raise_if_closed=raise_if_closed)


def _make_episode(scenario: str, agent_conf: str, agent_obsk: int, max_steps: int, env_kwargs: dict[str, Any],
                  groups: dict[str, list[str]], device: str) -> MaMuJoCoEnv:
    """One episode (module level, so worker processes can unpickle it through functools.partial)."""
    return MaMuJoCoEnv(_make_simulator(scenario, agent_conf, agent_obsk, max_steps, env_kwargs), groups, max_steps,
                       device)


class MaMuJoCoTask(Task):
    """A multi-agent MuJoCo task: a robot whose joints are split among agents, with continuous actions.

    MaMuJoCo simulates one episode per object: ``num_envs`` episodes are batched by
    :func:`lit_marl.envs.batching.batched_env`, stepped one after the other in this process or in ``num_workers``
    worker processes (it is not vectorised).

    Args:
        scenario: the robot: ``HalfCheetah``, ``Ant``, ``Hopper``, ``Walker2d``, ``Humanoid``, ``HumanoidStandup``,
            ``Swimmer``, ``Reacher``, ``Pusher``.
        agent_conf: how its joints are split (``2x3``: two agents of three joints), one of :data:`SCENARIOS`'s for
            the scenario (HalfCheetah ``2x3``/``6x1``, Ant ``2x4``/``2x4d``/``4x2``, Hopper ``3x1``, …).
        agent_obsk: how many joints away an agent sees (0: only its own joints; default 1, as HARL and FACMAC).
        max_steps: episode length limit (default 1000, MaMuJoCo's); reaching it truncates the episode, a robot that
            falls terminates it.
        env_kwargs: the Gymnasium MuJoCo env's own arguments (e.g. ``{"ctrl_cost_weight": 0.1}``; arguments that
            change the observation space do not work).
        agent_groups: ``null`` or ``"all_in_one_group"`` (every agent in group ``agents``; only where all agents'
            observation and action sizes agree), ``"one_group_per_agent"``, or ``{group: [agent names]}`` over
            ``agent_0`` … (agents of one group must have the same sizes).
        num_workers: worker processes stepping the episodes (torchrl ``ParallelEnv``, each an equal share of
            ``num_envs``); 1 steps them one after the other in this process.

    Examples:
        >>> task = MaMuJoCoTask("HalfCheetah", "2x3")
        >>> task.group_map, task.specs.observation_spec["agents", "observation"].shape, task.specs.state_spec.shape
        ({'agents': ['agent_0', 'agent_1']}, torch.Size([2, 12]), torch.Size([17]))
    """

    simulator_arguments = "env_kwargs"
    state_key = "state"
    _continuous_actions = True

    def __init__(
        self,
        scenario: str = "HalfCheetah",
        agent_conf: str = "2x3",
        agent_obsk: int = 1,
        max_steps: int = DEFAULT_MAX_STEPS,
        env_kwargs: dict[str, Any] | None = None,
        agent_groups: str | dict[str, list[str]] | None = None,
        num_workers: int = 1,
    ) -> None:
        check_types(MaMuJoCoTask.__init__, dict(scenario=scenario, agent_conf=agent_conf, agent_obsk=agent_obsk,
                                                max_steps=max_steps, env_kwargs=env_kwargs, num_workers=num_workers),
                    prefix="task.")
        if scenario not in SCENARIOS:
            raise ConfigError(f"task.scenario: unknown MaMuJoCo scenario {scenario!r}; "
                              f"{did_you_mean(scenario, SCENARIOS)}allowed: {', '.join(SCENARIOS)}")
        if agent_conf not in SCENARIOS[scenario]:
            raise ConfigError(f"task.agent_conf: {agent_conf!r} is not a split of {scenario}'s joints MaMuJoCo knows; "
                              f"allowed: {', '.join(map(repr, SCENARIOS[scenario]))}")
        if agent_obsk < 0:
            raise ConfigError(f"task.agent_obsk: must be an integer >= 0 (joints away an agent sees), got {agent_obsk}")
        self.scenario, self.agent_conf, self.agent_obsk = scenario, agent_conf, agent_obsk
        self._max_steps = positive_int("task.max_steps", max_steps)
        self.env_kwargs = dict(env_kwargs or {})
        for key in self.env_kwargs:
            if key in _OWN:
                raise ConfigError(f"task.env_kwargs: {key!r} is set by lit-marl ({_OWN[key]}); allowed: the "
                                  f"Gymnasium MuJoCo env's other arguments")
        self.num_workers = check_workers(num_workers, turn_based=False)
        # mujoco first: gymnasium-robotics imported without it fails with Gymnasium's words, not the package's name
        import_simulator("mujoco", "mujoco", "mamujoco")
        import_simulator("gymnasium_robotics", "gymnasium-robotics", "mamujoco")
        self.agent_groups = agent_groups
        self.groups  # noqa: B018 - checks agent_groups against the agents and their sizes

    @property
    @override
    def name(self) -> str:
        return f"mamujoco/{self.scenario}-{self.agent_conf}"

    def _simulator(self):
        return _make_simulator(self.scenario, self.agent_conf, self.agent_obsk, self.max_steps, self.env_kwargs)

    @functools.cached_property
    def _agent_sizes(self) -> dict[str, tuple[int, int]]:
        """``{agent: (observation size, action size)}``, from one simulator built for it."""
        with self.probing():
            simulator = self._simulator()
        try:
            return {a: (simulator.observation_space(a).shape[0], simulator.action_space(a).shape[0])
                    for a in simulator.possible_agents}
        finally:
            simulator.close()

    @property
    def agents(self) -> list[str]:
        """The agents' names (``agent_0``, ``agent_1``, …)."""
        return list(self._agent_sizes)

    @property
    def groups(self) -> dict[str, list[str]]:
        """``{group: [agent names]}`` from ``agent_groups``; every group's agents have the same sizes."""
        groups = group_agents(self.agent_groups, self.agents)
        sizes = self._agent_sizes
        for group, agents in groups.items():
            if len({sizes[a] for a in agents}) > 1:
                described = ", ".join(f"{a}: {sizes[a][0]}/{sizes[a][1]}" for a in agents)
                allowed = ("'one_group_per_agent', or a mapping that groups only agents of equal sizes"
                           if self.agent_groups in (None, "all_in_one_group") else
                           "a mapping that groups only agents of equal sizes, or 'one_group_per_agent'")
                raise ConfigError(f"task.agent_groups: group {group!r} of {self.name} mixes agents of different "
                                  f"observation/action sizes ({described}); allowed: {allowed}")
        return groups

    @override
    def _make_env(self, num_envs: int, seed: int | None, device: torch.device | str) -> EnvBase:
        make = functools.partial(_make_episode, self.scenario, self.agent_conf, self.agent_obsk, self.max_steps,
                                 self.env_kwargs, self.groups, str(device))
        return batched_env(make, num_envs, device, num_workers=self.num_workers, seed=seed)

    @override
    def _group_map(self, env: EnvBase) -> dict[str, list[str]]:
        return self.groups

    @override
    def render(self, env: EnvBase, env_index: int = 0):
        episode = episode_in_process(env, env_index)
        if episode is None:  # episodes in worker processes
            return super().render(env, env_index)
        return episode.render()

    @override
    def renderer_problem(self) -> str | None:
        return _renderer_problem(self.scenario, self.agent_conf)


@functools.cache
def _renderer_problem(scenario: str, agent_conf: str) -> str | None:
    """Why MuJoCo cannot render a frame in this process (``None`` where it can): tried once per scenario."""
    _headless_gl()
    try:
        simulator = _make_simulator(scenario, agent_conf, 1, DEFAULT_MAX_STEPS, {})
        try:
            simulator.reset(seed=0)
            frame = simulator.render()
        finally:
            simulator.close()
        if not isinstance(frame, np.ndarray) or frame.ndim != 3:
            return f"MuJoCo returned no RGB frame ({type(frame).__name__})"
    except Exception as err:
        return (f"MuJoCo's headless rendering failed with MUJOCO_GL={os.environ.get('MUJOCO_GL')!r} "
                f"({type(err).__name__}: {err}); set MUJOCO_GL to 'egl' or 'osmesa' where that library is installed")
    return None
