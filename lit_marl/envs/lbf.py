"""Level-Based Foraging (``lbforaging``; Christianos et al. 2020, in Papoudakis et al. 2021's benchmark).

Players and food items on a grid each have a level; a group of adjacent players collects an item with ``LOAD`` when
the sum of their levels is at least the item's. Six discrete actions (none, north, south, west, east, load), a
vector observation per player (positions and levels of the food and players it sees) and a per-player reward for
collected food, normalised so that all food of an episode is worth 1 in total. ``-coop`` tasks (``force_coop``) give
every item the highest level, the sum of the three lowest players' levels (both players' in two-player tasks): it
takes players loading together.

Install: ``pip install 'lit-marl[lbf]'``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from typing_extensions import override

from lit_marl.envs.agent_tuple import AgentTupleEnv, AgentTupleTask, import_simulator
from lit_marl.errors import ConfigError, check_types, positive_int, did_you_mean

#: what lbforaging's registered ids set besides their sizes (``lbforaging/__init__.py``, version 2.0.0)
REGISTERED = {"min_player_level": 1, "max_player_level": 2, "min_food_level": 1, "max_food_level": None,
              "grid_observation": False, "penalty": 0.0}
#: ForagingEnv arguments that have a task argument of their own
_OWN = {"players": "players", "field_size": "field_size", "max_num_food": "max_num_food",
        "force_coop": "force_coop", "sight": "sight", "max_episode_steps": "max_steps"}
#: ForagingEnv arguments lit-marl does not offer (grid observations are [3, H, W] images; rendering needs a display)
_UNSUPPORTED = ("grid_observation", "render_mode")
_ID_PATTERN = "Foraging[-<sight>s]-<size>x<size>-<players>p-<food>f[-coop]-v3"


def lbf_ids() -> list[str]:
    """Every env id lbforaging registers (importing it registers them)."""
    import_simulator("lbforaging", "lbforaging", "lbf")
    return [name for name in gym.registry if name.startswith("Foraging")]


class LbfEnv(AgentTupleEnv):
    """One LBF episode: action masks from the game's legal moves; ``done`` with food left is the time limit."""

    has_action_mask = True

    @override
    def _action_mask(self) -> np.ndarray:
        game = self.simulator
        mask = np.zeros((len(game.players), self._n_actions), dtype=bool)
        # ForagingEnv keeps each player's legal actions (moves onto free cells, LOAD next to food) after every reset
        # and step; it has no public accessor for them other than the product over all players' actions
        for i, player in enumerate(game.players):
            mask[i, [action.value for action in game._valid_actions[player]]] = True
        return mask

    @override
    def _ends_task(self) -> bool:
        return int(self.simulator.field.sum()) == 0  # all food collected (else the step limit was reached)


class LbfTask(AgentTupleTask):
    """A Level-Based Foraging task: one of lbforaging's registered ids, or its sizes.

    Args:
        env_id: a registered id such as ``"Foraging-8x8-2p-2f-coop-v3"`` or ``"Foraging-2s-8x8-2p-2f-coop-v3"``
            (``-2s``: each player sees 2 cells around it). Leave it ``null`` to give the sizes below instead.
        field_size: the grid's side (default 8).
        players: the number of players (agents; default 2).
        max_num_food: the number of food items (default 2).
        force_coop: every item needs all players to collect it (the ids' ``-coop``; default false).
        sight: how many cells around itself a player sees (default: the whole field).
        max_steps: episode length limit (ForagingEnv's ``max_episode_steps``; default 50, as every id). Reaching it
            truncates the episode; collecting all food terminates it.
        env_kwargs: ForagingEnv's other arguments (``min_player_level``, ``max_player_level``, ``min_food_level``,
            ``max_food_level``, ``penalty``, ``normalize_reward``, ``observe_agent_levels``).
        action_mask: give each player's legal actions as ``(group, "action_mask")`` (moves onto free cells,
            ``LOAD`` next to food; LBF turns an illegal action into "none" either way). EPyMARL offers every action.
        agent_groups: ``null`` or ``"all_in_one_group"`` (every player in group ``agents``),
            ``"one_group_per_agent"``, or ``{group: [agent names]}`` over ``agent_0`` … ``agent_<players-1>``.
        num_workers: worker processes stepping the episodes (torchrl ``ParallelEnv``, each an equal share of
            ``num_envs``); 1 steps them one after the other in this process. LBF simulates one episode per object.
        time_limit_terminal: store an episode cut at ``max_steps`` as terminated, not truncated: EPyMARL's 2021
            convention, biased (:class:`~lit_marl.envs.agent_tuple.AgentTupleTask`); default false.

    Examples:
        >>> task = LbfTask("Foraging-8x8-2p-2f-coop-v3")
        >>> task.group_map, task.specs.observation_spec["agents", "observation"].shape
        ({'agents': ['agent_0', 'agent_1']}, torch.Size([2, 12]))
        >>> LbfTask(field_size=10, players=3, max_num_food=3).name
        'lbf/Foraging-10x10-3p-3f-v3'
    """

    env_type = LbfEnv
    simulator_class = "lbforaging.foraging.environment.ForagingEnv"

    def __init__(
        self,
        env_id: str | None = None,
        field_size: int | None = None,
        players: int | None = None,
        max_num_food: int | None = None,
        force_coop: bool | None = None,
        sight: int | None = None,
        max_steps: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
        action_mask: bool = True,
        agent_groups: str | dict[str, list[str]] | None = None,
        num_workers: int = 1,
        time_limit_terminal: bool = False,
    ) -> None:
        check_types(LbfTask.__init__, dict(env_id=env_id, field_size=field_size, players=players,
                                           max_num_food=max_num_food, force_coop=force_coop, sight=sight,
                                           max_steps=max_steps, env_kwargs=env_kwargs, action_mask=action_mask,
                                           num_workers=num_workers, time_limit_terminal=time_limit_terminal),
                    prefix="task.")
        ids = lbf_ids()  # a missing package is named before anything else
        sizes = dict(field_size=field_size, players=players, max_num_food=max_num_food, force_coop=force_coop,
                     sight=sight)
        if env_id is not None:
            if env_id not in ids:
                hint = did_you_mean(env_id, ids, cutoff=0.8)
                raise ConfigError(f"task.env_id: {env_id!r} is not an id lbforaging registers; {hint}allowed: "
                                  f"{_ID_PATTERN} with size 5-19, players 2-9, food 1-4, or null and the sizes "
                                  f"(task.field_size, task.players, …)")
            given = [name for name, value in sizes.items() if value is not None]
            if given:
                raise ConfigError(f"task.{given[0]}: set by task.env_id {env_id!r}; allowed: null (or env_id: null "
                                  f"to give the sizes instead)")
        self.env_id = env_id
        for name in ("field_size", "players", "max_num_food", "sight"):
            if sizes[name] is not None:
                positive_int(f"task.{name}", sizes[name])
        if field_size is not None and field_size < 3:
            raise ConfigError(f"task.field_size: {field_size} leaves no inner cell for food; allowed: an integer >= 3")
        self.field_size, self.players, self.max_num_food, self.sight = field_size, players, max_num_food, sight
        self.force_coop = force_coop
        self.env_kwargs = dict(env_kwargs or {})
        for key in self.env_kwargs:
            if key in _OWN:
                raise ConfigError(f"task.env_kwargs: {key!r} is set by task.{_OWN[key]}; allowed: ForagingEnv's other "
                                  f"arguments")
            if key in _UNSUPPORTED:
                raise ConfigError(f"task.env_kwargs: {key!r} is not supported (vector observations only, no "
                                  f"rendering); allowed: ForagingEnv's other arguments")
        registered = gym.registry[env_id].kwargs["max_episode_steps"] if env_id is not None else 50
        self._max_steps = registered if max_steps is None else positive_int("task.max_steps", max_steps)
        self.action_mask = bool(action_mask)
        self.time_limit_terminal = time_limit_terminal
        self.agent_groups = agent_groups
        self.groups  # noqa: B018 - checks agent_groups against the players
        self._set_workers(num_workers)

    @override
    def simulator_kwargs(self) -> dict[str, Any]:
        if self.env_id is not None:
            kwargs = dict(gym.registry[self.env_id].kwargs)
        else:
            side = self.field_size or 8
            kwargs = {"players": self.players or 2, **REGISTERED, "field_size": (side, side),
                      "max_num_food": self.max_num_food or 2, "sight": self.sight or side,
                      "force_coop": bool(self.force_coop)}
        kwargs.update(self.env_kwargs, max_episode_steps=self.max_steps)
        return kwargs

    @property
    @override
    def agents(self) -> list[str]:
        return [f"agent_{i}" for i in range(self.simulator_kwargs()["players"])]

    @property
    @override
    def name(self) -> str:
        if self.env_id is not None:
            return f"lbf/{self.env_id}"
        kwargs = self.simulator_kwargs()
        side = kwargs["field_size"][0]
        sight = "" if kwargs["sight"] == side else f"-{kwargs['sight']}s"
        coop = "-coop" if kwargs["force_coop"] else ""
        return f"lbf/Foraging{sight}-{side}x{side}-{kwargs['players']}p-{kwargs['max_num_food']}f{coop}-v3"
