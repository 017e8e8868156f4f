"""VMAS tasks: vectorised multi-robot scenarios simulated in PyTorch (Bettini et al., 2022)."""

from __future__ import annotations

import functools
import warnings
from typing import Any

import torch
import vmas
from torchrl.envs import EnvBase
from typing_extensions import override

from lit_marl.envs.base import Task
from lit_marl.envs.grouping import check_grouping, group_agents
from lit_marl.envs.vmas_batched import BatchedResetVmasEnv
from lit_marl.utils import pack_numpy_rng, unpack_numpy_rng
from lit_marl.errors import ConfigError, check_types, did_you_mean, positive_int


def _vmas_random_state() -> list:
    return vmas.simulator.environment.environment.Environment.vmas_random_state


#: the start of the warning VMAS gives for scenario_kwargs a scenario does not use (an error in VMAS's future versions)
_UNUSED_KWARGS = "Scenario kwargs: "


#: every scenario name VMAS ships (its main, MPE and debug collections)
VMAS_SCENARIOS: tuple[str, ...] = tuple(sorted({*vmas.scenarios, *vmas.mpe_scenarios, *vmas.debug_scenarios}))


def _unphysical_entities(world) -> list[str]:
    """Entities of a built VMAS world with a mass or a shape size (radius, length, width) that is not a positive
    finite number: VMAS takes e.g. ``package_mass: -5`` and integrates it, so forces push the wrong way."""
    problems = []
    for entity in world.entities:
        sizes = {"mass": entity.mass}
        sizes.update({name.lstrip("_"): value for name, value in vars(entity.shape).items()
                      if name in ("_radius", "_length", "_width")})
        for name, value in sizes.items():
            number = float(value) if not isinstance(value, torch.Tensor) or value.numel() == 1 else None
            if number is not None and not (number > 0 and number != float("inf")):
                problems.append(f"entity {entity.name!r} with {name} {number:g}")
    return problems


class VmasTask(Task):
    """A VMAS scenario with its settings.

    Args:
        scenario: VMAS scenario name, e.g. ``"balance"``, ``"navigation"``, ``"simple_tag"``.
        max_steps: episode length; VMAS reports ``done`` when it is reached.
        continuous_actions: continuous forces (True) or VMAS's discrete action set (False).
        scenario_kwargs: the scenario's own parameters, e.g. ``{"n_agents": 4, "package_mass": 5}``.
        agent_groups: how agents form groups (each group has its own networks and loss): ``None`` groups
            agents by name prefix (``adversary_0`` → ``adversary``; VMAS's default), ``"all_in_one_group"``,
            ``"one_group_per_agent"``, or an explicit ``{group: [agent names]}``.
        batched_resets: reset the environments that finished in one batched VMAS reset
            (:mod:`lit_marl.envs.vmas_batched`); False resets them one at a time as torchrl's ``VmasEnv`` (and
            BenchMARL) do. The two give finished environments different, equally distributed starts from the same
            seed.
        **kwargs: more scenario parameters, merged into ``scenario_kwargs`` (Python convenience).

    Examples:
        >>> task = VmasTask("balance", max_steps=100, n_agents=4, package_mass=5)
        >>> env = task.make_env(num_envs=8, seed=0)

    A scenario's refusal of ``scenario_kwargs`` (a bare ``assert``, a wrong type, an argument it does not use:
    VMAS only warns about those, lit-marl refuses them as VMAS's future versions will) is a ``ConfigError`` naming
    ``task.scenario_kwargs`` (see :class:`~lit_marl.envs.base.Task`).
    """

    simulator_arguments = "scenario_kwargs"
    #: VMAS simulates in PyTorch, and with ``grad_enabled`` it does not detach actions (``collect_with_grad``)
    differentiable = True

    def __init__(
        self,
        scenario: str = "balance",
        max_steps: int = 100,
        continuous_actions: bool = True,
        scenario_kwargs: dict[str, Any] | None = None,
        agent_groups: str | dict[str, list[str]] | None = None,
        batched_resets: bool = True,
        **kwargs: Any,
    ) -> None:
        check_types(VmasTask.__init__, {"scenario": scenario, "max_steps": max_steps,
                                        "continuous_actions": continuous_actions, "scenario_kwargs": scenario_kwargs,
                                        "agent_groups": agent_groups, "batched_resets": batched_resets},
                    prefix="task.")
        if scenario not in VMAS_SCENARIOS:
            raise ConfigError(f"task.scenario: unknown VMAS scenario {scenario!r}; "
                              f"{did_you_mean(scenario, VMAS_SCENARIOS)}allowed: {', '.join(VMAS_SCENARIOS)}")
        positive_int("task.max_steps", max_steps)
        self.agent_groups = check_grouping(agent_groups)
        self.batched_resets = batched_resets
        self.scenario = scenario
        self._max_steps = max_steps
        self._continuous_actions = bool(continuous_actions)
        self.scenario_kwargs = {**(scenario_kwargs or {}), **kwargs}

    @property
    @override
    def name(self) -> str:
        return f"vmas/{self.scenario}"

    @override
    def _make_env(self, num_envs: int, seed: int | None, device: torch.device | str,
                  grad_enabled: bool = False) -> EnvBase:
        # None: torchrl's grouping by name prefix (BenchMARL's); otherwise checked against the scenario's agents
        group_map = None if self.agent_groups is None else group_agents(self.agent_groups, self._agent_names)
        return self._vmas_env(num_envs, seed, device, grad_enabled, group_map)

    @functools.cached_property
    def _agent_names(self) -> list[str]:
        """The scenario's agents, from one env on the CPU (built only for a grouping other than the default)."""
        env = self._vmas_env(1, None, "cpu", False, None)  # unseeded: VMAS seeds torch's global generator
        return list(env.agent_names)

    def _vmas_env(self, num_envs: int, seed: int | None, device: torch.device | str, grad_enabled: bool,
                  group_map: dict[str, list[str]] | None) -> EnvBase:
        with warnings.catch_warnings():
            # a misspelt argument would otherwise train the scenario's default without a word
            warnings.filterwarnings("error", message=_UNUSED_KWARGS, category=UserWarning)
            try:
                return BatchedResetVmasEnv(
                    self.scenario,
                    num_envs=num_envs,
                    continuous_actions=self.continuous_actions,
                    max_steps=self.max_steps,
                    seed=seed,
                    device=device,
                    categorical_actions=True,
                    grad_enabled=grad_enabled,
                    scenario_kwargs=dict(self.scenario_kwargs),
                    group_map=group_map,
                    batched_resets=self.batched_resets,
                )
            except UserWarning as warning:
                if not str(warning).startswith(_UNUSED_KWARGS):
                    raise
                # what VMAS raises itself with check_kwargs_consumed(warn=False), without its note on future versions
                raise ValueError(str(warning).split(" This will turn into an error")[0]) from None

    @override
    def _probe_step(self, env: EnvBase) -> None:
        super()._probe_step(env)
        base = env.base_env if hasattr(env, "base_env") else env
        problems = _unphysical_entities(base._env.world)
        if problems:  # inside probing: a ConfigError naming task.scenario_kwargs and what was given
            raise ValueError(f"the scenario built {'; '.join(problems)} (a non-positive mass or size flips or "
                             f"zeroes its physics)")

    @override
    def simulator_rng_state(self) -> dict[str, Any]:
        # VMAS draws from one process-wide generator state kept on its Environment class (shared by
        # every VMAS env, training and evaluation alike) and swapped in around each call.
        torch_state, np_state, py_state = _vmas_random_state()
        return {"torch": torch_state.clone(), "numpy": pack_numpy_rng(np_state), "python": py_state}

    @override
    def set_simulator_rng_state(self, state: dict[str, Any]) -> None:
        shared = _vmas_random_state()
        version, internal, gauss = state["python"]
        shared[:] = [state["torch"].clone(), unpack_numpy_rng(state["numpy"]), (version, tuple(internal), gauss)]

    @override
    def render(self, env: EnvBase, env_index: int = 0):
        base = env.base_env if hasattr(env, "base_env") else env
        return base.render(mode="rgb_array", env_index=env_index, visualize_when_rgb=False)
