"""Melting Pot substrates (DeepMind's social-dilemma gridworlds) on torchrl's Melting Pot wrapper.

Each episode is one substrate wrapped by torchrl's :class:`~torchrl.envs.libs.meltingpot.MeltingpotEnv`, batched into
``num_envs`` episodes by :func:`lit_marl.envs.batching.batched_env`. As in BenchMARL, every player is in one group
``agents`` by default (``agent_groups`` regroups them) and actions are discrete.

What the networks read, per agent: ``(group, "observation")``, the player's own view ``[H, W, 3]`` as ``uint8``
pixels (a :class:`~lit_marl.models.Cnn` reads it as an image; uint8 entries are scaled to ``[0, 1]`` by the models).
The substrate's other per-player entries (``COLLECTIVE_REWARD``, ``READY_TO_SHOOT``, ``INVENTORY``…) move to
``(group, "info", <name>)`` as float32, where callbacks read them (:class:`lit_marl.callbacks.CollectiveReward`
logs ``COLLECTIVE_REWARD``); no network reads them. With ``return_state`` the whole map (``WORLD.RGB``) is the
global state ``"state"`` ``[H, W, 3]`` in ``[0, 1]`` for centralised critics and mixers.

Install (no TensorFlow; dm-meltingpot's build does not reach its asset server)::

    pip install -e ".[meltingpot]" && python scripts/install_meltingpot.py --offline

Substrates need neither TensorFlow nor the bots' assets; Melting Pot's *scenarios* (substrates with pre-trained
bots) need both and are not offered here.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import random
import sys
import types
from collections.abc import Iterator
from typing import Any

import torch
from tensordict import TensorDictBase
from torchrl.data import Bounded, Composite, Unbounded
from torchrl.envs import EnvBase, SerialEnv, Transform, TransformedEnv
from torchrl._utils import seed_generator
from torchrl.envs.libs.meltingpot import MeltingpotEnv
from typing_extensions import override

from lit_marl.envs.base import Task
from lit_marl.envs.batching import batched_env, episode_in_process
from lit_marl.envs.grouping import check_grouping, group_agents
from lit_marl.envs.pettingzoo import check_workers
from lit_marl.errors import ConfigError, check_types, positive_int, did_you_mean

INSTALL = 'pip install -e ".[meltingpot]" && python scripts/install_meltingpot.py --offline'
#: what substrates import (lit-marl's ``meltingpot`` extra)
SUBSTRATE_REQUIREMENTS = ("dmlab2d", "dm_env", "tree", "chex", "immutabledict", "ml_collections", "reactivex")
#: the per-player image and the map's image in Melting Pot's observations
RGB, WORLD_RGB = "RGB", "RGB"


def import_meltingpot(field: str = "task.substrate") -> types.ModuleType:
    """``meltingpot.substrate``, imported without ``meltingpot/__init__.py``.

    That file imports Melting Pot's bots and scenarios, and with them TensorFlow, which substrates never use: the
    package is registered as a bare namespace (its submodules import as usual, ``meltingpot.scenario`` included,
    which then needs TensorFlow) unless ``meltingpot`` was imported in full already.
    """
    spec = importlib.util.find_spec("meltingpot")
    if spec is None or spec.submodule_search_locations is None:
        raise ConfigError(f"{field}: Melting Pot is not installed; install it with {INSTALL}")
    if "meltingpot" not in sys.modules:
        package = types.ModuleType("meltingpot", "Melting Pot (substrates only: bots and scenarios not imported)")
        package.__path__ = list(spec.submodule_search_locations)
        package.__spec__, package.__file__, package.__package__ = spec, spec.origin, "meltingpot"
        sys.modules["meltingpot"] = package
    try:
        return importlib.import_module("meltingpot.substrate")
    except ImportError as err:
        missing = err.name or str(err)
        raise ConfigError(f"{field}: Melting Pot substrates need {missing!r}, which is not installed ({err}); "
                          f"install it with {INSTALL}") from None


@contextlib.contextmanager
def _seeded_python_random(seed: int | None) -> Iterator[None]:
    """Melting Pot draws an episode-seed sequence from Python's global ``random`` when a substrate is built: seed
    it for that moment only."""
    if seed is None:
        yield
        return
    state = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(state)


class SeededMeltingpotEnv(MeltingpotEnv):
    """torchrl's Melting Pot env with seeds: a substrate draws the seeds of all its episodes when it is built (from
    Python's ``random``), so it is built with ``seed``, and ``set_seed`` rebuilds it (torchrl's raises).

    The seed fixes the Lua seed of every episode, yet episodes are not reproducible bit for bit: Melting Pot's Lua
    code visits some tables in memory-address order, so two builds with the same seed and the same actions can
    drift apart (measured on dm-meltingpot 2.4.1: two of three rebuilds of collaborative_cooking__asymmetric
    differed within 30 steps). Evaluations on fixed seeds are therefore paired only approximately, and a resumed
    run is not bitwise identical to an uninterrupted one on this task.

    Args:
        substrate: the substrate's name.
        roles: one role per player (default the substrate's ``default_player_roles``).
        seed: seeds the episode-seed sequence of the substrate (None: Python's ``random`` as it is).
        **kwargs: :class:`~torchrl.envs.libs.meltingpot.MeltingpotEnv`'s arguments (``max_steps``, ``group_map``…).
    """

    def __init__(self, substrate: str, roles: tuple[str, ...] | None = None, seed: int | None = None,
                 **kwargs: Any) -> None:
        self._substrate_name, self._roles, self._build_seed = substrate, roles, seed
        #: the seed of a substrate built and never reset yet: set_seed with it has nothing to rebuild
        self._unused_seed = seed
        super().__init__(substrate, **kwargs)

    @override
    def _build_env(self, substrate):
        return self._substrate(self._build_seed)

    @override
    def _reset(self, tensordict=None, **kwargs):
        self._unused_seed = None
        return super()._reset(tensordict, **kwargs)

    def _substrate(self, seed: int | None):
        mp_substrate = import_meltingpot()
        config = mp_substrate.get_config(self._substrate_name)
        with _seeded_python_random(seed):
            return mp_substrate.build_from_config(config, roles=self._roles or config.default_player_roles)

    @override
    def _set_seed(self, seed: int | None) -> None:
        if seed is not None and seed == self._unused_seed:  # a build costs as much as a reset: skip a second one
            return
        self._env.close()
        self._env = self._substrate(seed)
        self._unused_seed = seed
        self.num_cycles = 0


def _substrate_env(substrate: str, roles: tuple[str, ...] | None, max_steps: int, group_map: Any, device: str,
                   seed: int | None = None) -> EnvBase:
    """One episode (module level, so worker processes can unpickle it through functools.partial)."""
    return SeededMeltingpotEnv(substrate, roles, seed, max_steps=max_steps, categorical_actions=True,
                               group_map=group_map, device=device)


class MeltingPotTask(Task):
    """A Melting Pot substrate.

    Args:
        substrate: a substrate name, e.g. ``commons_harvest__open``, ``collaborative_cooking__asymmetric``,
            ``prisoners_dilemma_in_the_matrix__repeated`` (``meltingpot.substrate.SUBSTRATES`` lists all 49).
        max_steps: episode length (torchrl's wrapper ends the episode there); BenchMARL's default 100.
        roles: one role per player (``get_config(substrate).valid_roles``); default the substrate's
            ``default_player_roles`` (which also fixes the number of players).
        agent_groups: ``None`` or ``"all_in_one_group"``: every player in group ``agents`` (BenchMARL);
            ``"one_group_per_agent"``; or ``{group: [player names]}`` over ``player_0`` … ``player_<n-1>``.
        return_state: put the map's image (``WORLD.RGB``) at the root key ``"state"`` (float32 in ``[0, 1]``) for
            centralised critics and mixers (MAPPO, QMIX, MASAC). Off by default: the map is tens of thousands of
            values per frame and every collected frame would carry it twice; critics then centralise over the
            players' views.
        num_workers: worker processes stepping the episodes (as :class:`~lit_marl.envs.PettingZooTask`).

    Examples:
        >>> task = MeltingPotTask("collaborative_cooking__asymmetric", max_steps=100)
        >>> task.group_map
        {'agents': ['player_0', 'player_1']}
        >>> task.specs.observation_spec["agents", "observation"].shape   # [agents, H, W, C] uint8
        torch.Size([2, 40, 40, 3])
    """

    #: the players' roles are what the substrate builder receives from the user (a failure there is named by it)
    simulator_arguments = "roles"

    def __init__(
        self,
        substrate: str = "collaborative_cooking__asymmetric",
        max_steps: int = 100,
        roles: list[str] | None = None,
        agent_groups: str | dict[str, list[str]] | None = None,
        return_state: bool = False,
        num_workers: int = 1,
    ) -> None:
        check_types(MeltingPotTask.__init__, dict(substrate=substrate, max_steps=max_steps, roles=roles,
                                                  agent_groups=agent_groups, return_state=return_state,
                                                  num_workers=num_workers), prefix="task.")
        if not isinstance(substrate, str):
            raise ConfigError(f"task.substrate: must be a substrate name, got {substrate!r}")
        self._max_steps = positive_int("task.max_steps", max_steps)
        self._continuous_actions = False
        self.num_workers = check_workers(num_workers, turn_based=False)
        self.return_state = bool(return_state)
        check_grouping(agent_groups, "player")
        mp_substrate = import_meltingpot()  # a missing install is named before anything is built
        if substrate not in mp_substrate.SUBSTRATES:
            hint = did_you_mean(substrate, sorted(mp_substrate.SUBSTRATES))
            raise ConfigError(f"task.substrate: unknown Melting Pot substrate {substrate!r}; {hint}allowed: "
                              f"{', '.join(sorted(mp_substrate.SUBSTRATES))}")
        self.substrate = substrate
        config = mp_substrate.get_config(substrate)
        if roles is not None:
            invalid = [r for r in roles if r not in config.valid_roles] if isinstance(roles, (list, tuple)) else roles
            if invalid or not roles:
                raise ConfigError(f"task.roles: {invalid or roles!r} are not roles of {substrate}; allowed: a list "
                                  f"of {', '.join(map(repr, sorted(config.valid_roles)))}")
        self.roles = None if roles is None else [str(r) for r in roles]
        players = [f"player_{i}" for i in range(len(self.roles or config.default_player_roles))]
        group_agents(agent_groups, players, "player")  # a mapping names every player once
        self.agent_groups = agent_groups
        self._players = players

    @property
    @override
    def name(self) -> str:
        return f"meltingpot/{self.substrate}"

    @property
    @override
    def state_key(self) -> str | None:  # type: ignore[override]
        return "state" if self.return_state else None

    def _one_episode(self, device: torch.device | str):
        """A picklable factory of one episode's env (``seed=`` selects its substrate's seed)."""
        return functools.partial(_substrate_env, self.substrate, None if self.roles is None else tuple(self.roles),
                                 self.max_steps, self._single_group_map, str(device))

    @override
    def _make_env(self, num_envs: int, seed: int | None, device: torch.device | str) -> EnvBase:
        # each episode's substrate is built once with its seed, not built unseeded and rebuilt by set_seed: a build
        # costs as much as a reset
        env = batched_env(self._one_episode(device), num_envs, device, num_workers=self.num_workers) if seed is None \
            else _seeded_batch(self, num_envs, seed, device)
        return TransformedEnv(env, PlayerView(env.full_observation_spec, list(self._single_group_map),
                                              self.return_state))

    @override
    def _group_map(self, env: EnvBase) -> dict[str, list[str]]:
        return self._single_group_map

    @functools.cached_property
    def _single_group_map(self) -> dict[str, list[str]]:
        return group_agents(self.agent_groups, self._players, "player")

    @override
    def render(self, env: EnvBase, env_index: int = 0):
        episode = episode_in_process(env, env_index)
        if episode is None:  # episodes in worker processes
            return super().render(env, env_index)
        return episode.get_rgb_image().numpy()


def _seeded_batch(task: MeltingPotTask, num_envs: int, seed: int, device) -> EnvBase:
    """``num_envs`` episodes, each substrate built with the seed torchrl's ``set_seed(seed)`` would give it (so a
    later ``set_seed(seed)``, as every evaluation does, finds them built already); with workers, seeded through
    ``set_seed`` (each worker rebuilds its substrates once)."""
    if task.num_workers > 1:
        return batched_env(task._one_episode(device), num_envs, device, num_workers=task.num_workers, seed=seed)
    seeds = [seed]
    for _ in range(num_envs - 1):
        seeds.append(seed_generator(seeds[-1]))
    # one factory with per-episode seeds: torchrl then builds a single episode for the specs (a list of factories
    # would be built twice, once for their specs and once to run)
    env = SerialEnv(num_envs, task._one_episode(device), create_env_kwargs=[{"seed": s} for s in seeds],
                    device=device)
    env.start()  # built now, as set_seed would have (and close() refuses an env that never started)
    return env


class PlayerView(Transform):
    """What the networks read from a Melting Pot step (see the module docstring): each player's image as
    ``(group, "observation")``, the other per-player entries as float32 ``(group, "info", <name>)``, float32
    rewards, and the map as ``"state"`` in ``[0, 1]`` (``return_state``) or dropped."""

    def __init__(self, observation_spec: Composite, groups: list[str], return_state: bool) -> None:
        super().__init__(in_keys=[], out_keys=[])
        self.groups = groups
        self.return_state = return_state
        self.info_names = {g: [k for k in observation_spec[g, "observation"].keys() if k != RGB] for g in groups}

    def _view(self, tensordict: TensorDictBase) -> TensorDictBase:
        for group in self.groups:
            group_td = tensordict.get(group)
            observation = group_td.get("observation")
            for name in self.info_names[group]:
                group_td.set(("info", name), observation.get(name).to(torch.float32))
            group_td.set("observation", observation.get(RGB))
            if "reward" in group_td.keys():
                group_td.set("reward", group_td.get("reward").to(torch.float32))
        world = tensordict.pop(WORLD_RGB)
        if self.return_state:
            tensordict.set("state", world.to(torch.float32) / 255)
        return tensordict

    @override
    def _call(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self._view(tensordict)

    @override
    def _reset(self, tensordict: TensorDictBase, tensordict_reset: TensorDictBase) -> TensorDictBase:
        return self._view(tensordict_reset)

    @override
    def transform_observation_spec(self, observation_spec: Composite) -> Composite:
        for group in self.groups:
            group_spec = observation_spec[group]
            observation = group_spec["observation"]
            info = Composite(shape=group_spec.shape, device=observation_spec.device)
            for name in self.info_names[group]:
                spec = observation[name]
                info[name] = Unbounded(shape=spec.shape, dtype=torch.float32, device=observation_spec.device)
            image = observation[RGB]
            del group_spec["observation"]
            group_spec["observation"] = image
            group_spec["info"] = info
        world = observation_spec[WORLD_RGB]
        del observation_spec[WORLD_RGB]
        if self.return_state:
            observation_spec["state"] = Bounded(0.0, 1.0, shape=world.shape, dtype=torch.float32,
                                                device=observation_spec.device)
        return observation_spec

    @override
    def transform_reward_spec(self, reward_spec: Composite) -> Composite:
        for group in self.groups:
            spec = reward_spec[group, "reward"]
            reward_spec[group, "reward"] = Unbounded(shape=spec.shape, dtype=torch.float32, device=spec.device)
        return reward_spec
