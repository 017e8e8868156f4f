"""PettingZoo tasks: MPE (``mpe2``), SISL and classic games, parallel and turn-based (AEC).

Each episode is one PettingZoo env wrapped by torchrl's :class:`~torchrl.envs.PettingZooWrapper`, batched
into ``num_envs`` episodes by :func:`lit_marl.envs.batching.batched_env`. Agents form groups by name prefix
(``adversary_0`` → ``adversary``), each group with its own networks, loss and metrics.

Turn-based (AEC) games such as connect four are trained end to end with the algorithms as they are: every
env step is one move, all agents of the game see it, and the agent whose turn it is not gets an action mask
that allows only action 0 and is ignored by the game (torchrl applies only the acting agent's action). Its
policy is then deterministic on those steps (log-probability 0, no policy gradient, no entropy), while its
critic still learns the value of waiting for the opponent's move; a reward that arrives on the opponent's
move (a loss) reaches the agent on that step and is credited back to its own last move by the return or TD
target. Each agent's observation carries a last feature, 1 when it is that agent's turn.
"""

from __future__ import annotations

import functools
import importlib
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import torch
from torchrl.data import Composite, Unbounded
from torchrl.envs import EnvBase, PettingZooWrapper, Transform, TransformedEnv
from typing_extensions import override

from lit_marl.envs.base import Task
from lit_marl.envs.batching import batched_env, episode_in_process
from lit_marl.envs.grouping import check_grouping, group_agents
from lit_marl.errors import ConfigError, check_types, positive_int, did_you_mean


@dataclass(frozen=True)
class PettingZooEntry:
    """A PettingZoo task lit-marl knows: where it lives and BenchMARL's settings for it."""

    module: str
    #: extra of lit-marl's pyproject that installs it
    extra: str
    #: "both", "continuous" or "discrete"
    actions: str
    #: constructor arguments (BenchMARL's task settings where BenchMARL has the task)
    defaults: dict[str, Any] = field(default_factory=dict)
    #: the longest episode of a game without a ``max_cycles`` argument
    game_length: int | None = None
    #: the env's ``state()`` is a usable global state (BenchMARL's ``has_state``: MPE; multiwalker's ``state()``
    #: fails once a walker has fallen)
    has_state: bool = False
    #: observations are images ``[H, W, C]`` per agent, kept in that shape (a Cnn reads them; an Mlp flattens them)
    images: bool = False


def _mpe(name: str, **defaults: Any) -> PettingZooEntry:
    return PettingZooEntry(f"mpe2.{name}", "pettingzoo", "both", {"max_cycles": 100, **defaults}, has_state=True)


#: every PettingZoo task lit-marl builds (``pettingzoo`` 1.27 no longer ships SISL's waterworld)
PETTINGZOO_TASKS: dict[str, PettingZooEntry] = {
    "simple": _mpe("simple_v3"),
    "simple_adversary": _mpe("simple_adversary_v3", N=2),
    "simple_crypto": _mpe("simple_crypto_v3"),
    "simple_push": _mpe("simple_push_v3"),
    "simple_reference": _mpe("simple_reference_v3", local_ratio=0.5),
    "simple_speaker_listener": _mpe("simple_speaker_listener_v4"),
    "simple_spread": _mpe("simple_spread_v3", N=3, local_ratio=0.5),
    "simple_tag": _mpe("simple_tag_v3", num_good=2, num_adversaries=3, num_obstacles=2),
    "simple_world_comm": _mpe("simple_world_comm_v3", num_good=2, num_adversaries=4, num_obstacles=1, num_food=2,
                              num_forests=2),
    "multiwalker": PettingZooEntry(
        "pettingzoo.sisl.multiwalker_v9", "pettingzoo", "continuous",
        {"n_walkers": 3, "shared_reward": False, "max_cycles": 500, "position_noise": 1e-3, "angle_noise": 1e-3,
         "forward_reward": 1.0, "fall_reward": -10.0, "terminate_reward": -100.0, "terminate_on_fall": True,
         "remove_on_fall": True, "terrain_length": 200}),
    "pursuit": PettingZooEntry("pettingzoo.sisl.pursuit_v5", "pettingzoo", "discrete", {"max_cycles": 500}),
    "connect_four": PettingZooEntry("pettingzoo.classic.connect_four_v3", "pettingzoo", "discrete", game_length=42),
    "tic_tac_toe": PettingZooEntry("pettingzoo.classic.tictactoe_v3", "pettingzoo", "discrete", game_length=9),
    # MAgent2 gridworlds (pip install -e ".[magent2]"): two teams, 21 (battle) or 13/9 (pursuit) discrete moves and
    # attacks, each agent seeing a 13x13 (battle) or 9x9/10x10 (pursuit) window with 5 channels; BenchMARL's
    # settings for adversarial_pursuit (map 45, 500 steps), MAgent2's own for battle
    "battle": PettingZooEntry("magent2.environments.battle_v4", "magent2", "discrete",
                              {"map_size": 45, "max_cycles": 1000, "minimap_mode": False, "extra_features": False},
                              images=True),
    "adversarial_pursuit": PettingZooEntry("magent2.environments.adversarial_pursuit_v4", "magent2", "discrete",
                                           {"map_size": 45, "max_cycles": 500, "minimap_mode": False,
                                            "extra_features": False, "tag_penalty": -0.2}, images=True),
}


def _import_task_module(name: str, entry: PettingZooEntry):
    try:
        return importlib.import_module(entry.module)
    except ImportError as err:
        raise ConfigError(
            f"task.task: {name!r} needs {entry.module.split('.')[0]} ({err}); install it with "
            f"pip install -e \".[{entry.extra}]\""
        ) from None


def _make_pettingzoo(module_name: str, turn_based: bool, kwargs: dict[str, Any], agent_groups: Any,
                     return_state: bool, device: str) -> EnvBase:
    """One episode of a registered task (module level, so worker processes can pickle it through
    functools.partial)."""
    module = importlib.import_module(module_name)
    raw = module.env(**kwargs) if turn_based else module.parallel_env(**kwargs)
    return wrap_pettingzoo(raw, turn_based, agent_groups, return_state, device)


def wrap_pettingzoo(raw: Any, turn_based: bool, agent_groups: Any, return_state: bool, device: str) -> EnvBase:
    """A PettingZoo env (parallel or AEC) as a torchrl env with grouped nested keys. ``agent_groups`` ``None``:
    torchrl's grouping by name prefix (``adversary_0`` in group ``adversary``); turn-based games: one group."""
    group_map = None if agent_groups is None and not turn_based else group_agents(agent_groups, raw.possible_agents)

    with warnings.catch_warnings():  # torchrl warns about every PettingZoo version but 1.24.3
        warnings.simplefilter("ignore", UserWarning)
        return PettingZooWrapper(raw, return_state=return_state, group_map=group_map, use_mask=turn_based,
                                 categorical_actions=True, device=device)


def check_workers(num_workers: Any, turn_based: bool) -> int:
    positive_int("task.num_workers", num_workers)
    if num_workers > 1 and turn_based:
        raise ConfigError(f"task.num_workers: turn-based (AEC) games run in this process only (torchrl's ParallelEnv "
                          f"cannot share their nested observation and mask entries), got {num_workers}; allowed: 1")
    return num_workers


class PettingZooTask(Task):
    """A PettingZoo environment with its settings.

    Args:
        task: ``simple_spread``, ``simple_tag``, ``simple_adversary``, ``simple_reference``,
            ``simple_speaker_listener``, ``simple_crypto``, ``simple_push``, ``simple_world_comm``, ``simple``
            (MPE), ``multiwalker``, ``pursuit`` (SISL), ``connect_four``, ``tic_tac_toe`` (classic, turn-based),
            ``battle``, ``adversarial_pursuit`` (MAgent2; image observations ``[H, W, C]`` per agent).
        max_steps: episode length (the env's ``max_cycles``); default BenchMARL's (100 for MPE, 500 for
            SISL); games without ``max_cycles`` end by their rules (connect four within 42 moves).
        continuous_actions: MPE offers both; SISL multiwalker is continuous, pursuit and games discrete.
            Default: continuous where the task offers it (BenchMARL's ``prefer_continuous_actions``).
        task_kwargs: the env's own arguments (e.g. ``{"N": 4, "local_ratio": 0.5}``), over BenchMARL's defaults.
        agent_groups: ``None`` groups agents by name prefix (parallel envs) or puts every player in one group
            ``agents`` with shared networks (turn-based games: self-play); ``"all_in_one_group"``,
            ``"one_group_per_agent"`` or an explicit ``{group: [agent names]}``.
        return_state: put the env's global state (``state()``) at the root key ``"state"`` for centralised
            critics and mixers; default: where the env offers a usable one (MPE, as BenchMARL).
        num_workers: worker processes that step the episodes (torchrl ``ParallelEnv``, each worker stepping an
            equal share serially; ``num_envs`` is split over the largest divisor of it up to ``num_workers``);
            1 steps them all in this process. Worth it where the simulator, not the networks, takes the time.
        **kwargs: more env arguments, merged into ``task_kwargs`` (Python convenience).

    Examples:
        >>> task = PettingZooTask("simple_tag", max_steps=25, continuous_actions=False)
        >>> task.group_map
        {'adversary': ['adversary_0', 'adversary_1', 'adversary_2'], 'agent': ['agent_0', 'agent_1']}

    The env's refusal of ``task_kwargs`` (MPE's ``N``, MAgent2's ``map_size``, an unknown keyword) is a
    ``ConfigError`` naming ``task.task_kwargs`` (see :class:`~lit_marl.envs.base.Task`).
    """

    simulator_arguments = "task_kwargs"

    def __init__(
        self,
        task: str = "simple_spread",
        max_steps: int | None = None,
        continuous_actions: bool | None = None,
        task_kwargs: dict[str, Any] | None = None,
        agent_groups: str | dict[str, list[str]] | None = None,
        return_state: bool | None = None,
        num_workers: int = 1,
        **kwargs: Any,
    ) -> None:
        check_types(PettingZooTask.__init__, dict(task=task, max_steps=max_steps, continuous_actions=continuous_actions,
                                                  task_kwargs=task_kwargs, agent_groups=agent_groups,
                                                  return_state=return_state, num_workers=num_workers), prefix="task.")
        name = task.rsplit("_v", 1)[0] if task not in PETTINGZOO_TASKS and "_v" in task else task
        if name not in PETTINGZOO_TASKS:
            hint = did_you_mean(name, PETTINGZOO_TASKS)
            raise ConfigError(f"task.task: unknown PettingZoo task {task!r}; {hint}allowed: "
                              f"{', '.join(PETTINGZOO_TASKS)}")
        entry = PETTINGZOO_TASKS[name]
        self._entry = entry
        self.task = name
        module = _import_task_module(name, entry)  # a missing extra is named before anything is built
        self._turn_based = not hasattr(module, "parallel_env")
        self.task_kwargs = {**(task_kwargs or {}), **kwargs}
        if "max_cycles" in self.task_kwargs or "continuous_actions" in self.task_kwargs:
            raise ConfigError("task.task_kwargs: set max_cycles and continuous_actions through task.max_steps and "
                              "task.continuous_actions; allowed: the env's other arguments")
        if entry.game_length is not None:
            if max_steps is not None and max_steps != entry.game_length:
                raise ConfigError(f"task.max_steps: {name} ends by its rules (at most {entry.game_length} moves), "
                                  f"got {max_steps!r}; allowed: null or {entry.game_length}")
            self._max_steps = entry.game_length
        else:
            self._max_steps = entry.defaults["max_cycles"] if max_steps is None else positive_int("task.max_steps",
                                                                                                   max_steps)
        if entry.actions == "both":
            self._continuous_actions = True if continuous_actions is None else bool(continuous_actions)
        else:
            self._continuous_actions = entry.actions == "continuous"
            if continuous_actions is not None and bool(continuous_actions) != self._continuous_actions:
                raise ConfigError(
                    f"task.continuous_actions: {name} has only {entry.actions} actions, got {continuous_actions}; "
                    f"allowed: null or {str(self._continuous_actions).lower()}")
        self.agent_groups = check_grouping(agent_groups)
        self.return_state = return_state
        self.num_workers = check_workers(num_workers, self.turn_based)

    @property
    @override
    def name(self) -> str:
        return f"pettingzoo/{self.task}"

    @property
    def turn_based(self) -> bool:
        """Agents act one at a time (PettingZoo's AEC API)."""
        return self._turn_based

    def env_kwargs(self) -> dict[str, Any]:
        """The arguments the PettingZoo env is built with."""
        kwargs = {**self._entry.defaults, **self.task_kwargs}
        if "max_cycles" in self._entry.defaults:
            kwargs["max_cycles"] = self.max_steps
        if self._entry.actions == "both":
            kwargs["continuous_actions"] = self.continuous_actions
        kwargs.setdefault("render_mode", "rgb_array")
        return kwargs

    @property
    @override
    def state_key(self) -> str | None:  # type: ignore[override]
        use = self._entry.has_state if self.return_state is None else bool(self.return_state)
        if use and not self._entry.has_state:
            raise ConfigError(f"task.return_state: {self.task} has no global state; allowed: null or false")
        return "state" if use else None

    def _one_episode(self, return_state: bool, device: torch.device | str) -> Callable[[], EnvBase]:
        """A picklable factory of one episode's torchrl env."""
        return functools.partial(_make_pettingzoo, self._entry.module, self.turn_based, self.env_kwargs(),
                                 self.agent_groups, return_state, str(device))

    @override
    def _make_env(self, num_envs: int, seed: int | None, device: torch.device | str) -> EnvBase:
        env = batched_env(self._one_episode(self.state_key is not None, device), num_envs, device,
                          num_workers=self.num_workers, seed=seed)
        return TransformedEnv(env, AgentView(env.full_observation_spec, list(self._single_group_map), self.turn_based,
                                             flatten=not self._entry.images))

    @override
    def _group_map(self, env: EnvBase) -> dict[str, list[str]]:
        return self._single_group_map

    @cached_property
    def _single_group_map(self) -> dict[str, list[str]]:
        # a batch of envs does not report its envs' groups: ask one episode
        env = self._one_episode(False, "cpu")()
        try:
            return {g: list(a) for g, a in env.group_map.items()}
        finally:
            env.close()

    @override
    def render(self, env: EnvBase, env_index: int = 0):
        episode = episode_in_process(env, env_index)
        if episode is None:  # episodes in worker processes
            return super().render(env, env_index)
        return episode._env.render()


class AgentView(Transform):
    """What every group's networks read: a float ``(group, "observation")`` ``[*B, n_agents, D]``.

    Observations that arrive as integers or nested entries (classic games: ``("observation", "observation")``)
    are flattened to float features. Image observations of image tasks (MAgent2, ``flatten=False``) keep their
    ``[H, W, C]`` shape as floats: a Cnn reads them as images and an Mlp flattens them itself. In turn-based
    games each agent's observation gets a last feature (1 on its turn) and the agent whose turn it is not may
    take only action 0, which the game ignores.
    """

    def __init__(self, observation_spec: Composite, groups: list[str], turn_based: bool, flatten: bool = True) -> None:
        super().__init__(in_keys=[], out_keys=[])
        self.turn_based = turn_based
        self.flatten = flatten or turn_based
        #: each group's per-agent observation shape as the env reports it (e.g. an image's [H, W, C])
        self.agent_obs_shape: dict[str, torch.Size] = {}
        for group in groups:
            group_spec = observation_spec[group]
            obs = group_spec["observation"]
            if isinstance(obs, Composite):  # {"observation": board} once the action mask is taken out
                obs = obs["observation"]
            self.agent_obs_shape[group] = obs.shape[len(group_spec.shape):]

    def _view(self, tensordict):
        for group, shape in self.agent_obs_shape.items():
            group_td = tensordict.get(group)
            obs = group_td.get("observation")
            if not isinstance(obs, torch.Tensor):
                obs = obs.get("observation")
                group_td.del_("observation")
            flat = (obs.reshape(*obs.shape[: obs.dim() - len(shape)], -1) if self.flatten else obs).to(torch.float32)
            if self.turn_based:
                acting = group_td.get("mask")
                flat = torch.cat([flat, acting.unsqueeze(-1).to(flat.dtype)], dim=-1)
                action_mask = group_td.get("action_mask")
                only_first = torch.zeros_like(action_mask)
                only_first[..., 0] = True
                group_td.set("action_mask", torch.where(acting.unsqueeze(-1), action_mask, only_first))
            group_td.set("observation", flat)
        return tensordict

    @override
    def _call(self, tensordict):
        return self._view(tensordict)

    @override
    def _reset(self, tensordict, tensordict_reset):
        return self._view(tensordict_reset)

    @override
    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        for group, shape in self.agent_obs_shape.items():
            group_spec = observation_spec[group]
            features = (shape.numel() + (1 if self.turn_based else 0),) if self.flatten else tuple(shape)
            del group_spec["observation"]
            group_spec["observation"] = Unbounded(shape=(*group_spec.shape, *features), dtype=torch.float32,
                                                  device=observation_spec.device)
        return observation_spec
