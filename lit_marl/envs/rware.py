"""Multi-Robot Warehouse (``rware``; Christianos et al. 2020, in Papoudakis et al. 2021's benchmark).

Robots in a warehouse of shelves must carry the requested shelves to the goal cells and back. Five discrete actions
(no-op, forward, turn left, turn right, load/unload), a vector observation per robot (its position, direction and
load, and the cells within its sensor range), and a sparse reward: 1 to the robot that delivers a requested shelf
(``reward_type: individual``, as every registered id), nothing otherwise. The episode has no end state: it is cut at
``max_steps`` (500 for every id), a truncation.

Install: ``pip install 'lit-marl[rware]'``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from typing_extensions import override

from lit_marl.envs.agent_tuple import AgentTupleEnv, AgentTupleTask, import_simulator
from lit_marl.errors import ConfigError, check_types, positive_int, did_you_mean

#: warehouse sizes as rware registers them: (shelf_rows, shelf_columns) (``rware/__init__.py``, version 2.0.0)
SIZES = {"tiny": (1, 3), "small": (2, 3), "medium": (2, 5), "large": (3, 5)}
#: requested shelves per robot of each difficulty (the ids' ``-easy``, nothing, ``-hard``)
DIFFICULTIES = {"easy": 2.0, "normal": 1.0, "hard": 0.5}
#: what rware's registered ids set besides size, robots and difficulty
REGISTERED = {"column_height": 8, "msg_bits": 0, "sensor_range": 1, "max_inactivity_steps": None}
REWARD_TYPES = ("individual", "global", "two_stage")
#: Warehouse arguments that have a task argument of their own
_OWN = {"shelf_rows": "size", "shelf_columns": "size", "n_agents": "n_agents", "max_steps": "max_steps"}
#: Warehouse arguments lit-marl does not offer (message bits make actions MultiDiscrete; image observations)
_UNSUPPORTED = ("msg_bits", "observation_type", "image_observation_layers", "image_observation_directional",
                "render_mode")
_ID_PATTERN = "rware-<tiny|small|medium|large>-<robots>ag[-easy|-hard]-v2"


def rware_ids() -> list[str]:
    """Every env id rware registers on import."""
    import_simulator("rware", "rware", "rware")
    return [name for name in gym.registry if name.startswith("rware-")]


class RwareEnv(AgentTupleEnv):
    """One warehouse episode: every ``done`` is the step limit (or ``max_inactivity_steps``), a truncation."""

    @override
    def _ends_task(self) -> bool:
        return False


class RwareTask(AgentTupleTask):
    """A Multi-Robot Warehouse task: one of rware's registered ids, or its size, robots and difficulty.

    Args:
        env_id: a registered id such as ``"rware-tiny-2ag-v2"`` or ``"rware-small-4ag-hard-v2"``. Leave it ``null``
            to give the settings below instead.
        size: ``tiny`` (10x11 cells), ``small`` (10x20), ``medium`` (16x20), ``large`` (16x29) (default tiny).
        n_agents: the number of robots (default 2).
        difficulty: how many shelves are requested at a time: ``easy`` (2 per robot), ``normal`` (1 per robot,
            the default) or ``hard`` (1 per 2 robots): fewer requests, sparser rewards.
        max_steps: episode length (the Warehouse's ``max_steps``; default 500, as every id).
        env_kwargs: the Warehouse's other arguments (``sensor_range``, ``column_height``, ``request_queue_size``,
            ``max_inactivity_steps``, ``layout``, ``normalised_coordinates``, ``reward_type``: ``individual``,
            ``global`` or ``two_stage``).
        agent_groups: ``null`` or ``"all_in_one_group"`` (every robot in group ``agents``),
            ``"one_group_per_agent"``, or ``{group: [agent names]}`` over ``agent_0`` … ``agent_<n_agents-1>``.
        num_workers: worker processes stepping the episodes (torchrl ``ParallelEnv``, each an equal share of
            ``num_envs``); 1 steps them one after the other in this process. RWARE simulates one episode per object.
        time_limit_terminal: store the cut at ``max_steps`` (every episode's end) as terminated, not truncated:
            EPyMARL's 2021 convention, biased (:class:`~lit_marl.envs.agent_tuple.AgentTupleTask`); default false.

    Examples:
        >>> task = RwareTask("rware-tiny-2ag-v2")
        >>> task.group_map, task.specs.observation_spec["agents", "observation"].shape
        ({'agents': ['agent_0', 'agent_1']}, torch.Size([2, 71]))
        >>> RwareTask(size="small", n_agents=4, difficulty="hard").name
        'rware/rware-small-4ag-hard-v2'
    """

    env_type = RwareEnv
    simulator_class = "rware.warehouse.Warehouse"

    def __init__(
        self,
        env_id: str | None = None,
        size: str | None = None,
        n_agents: int | None = None,
        difficulty: str | None = None,
        max_steps: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
        agent_groups: str | dict[str, list[str]] | None = None,
        num_workers: int = 1,
        time_limit_terminal: bool = False,
    ) -> None:
        check_types(RwareTask.__init__, dict(env_id=env_id, size=size, n_agents=n_agents, difficulty=difficulty,
                                             max_steps=max_steps, env_kwargs=env_kwargs, num_workers=num_workers,
                                             time_limit_terminal=time_limit_terminal), prefix="task.")
        ids = rware_ids()  # a missing package is named before anything else
        settings = dict(size=size, n_agents=n_agents, difficulty=difficulty)
        if env_id is not None:
            if env_id not in ids:
                hint = did_you_mean(env_id, ids, cutoff=0.8)
                raise ConfigError(f"task.env_id: {env_id!r} is not an id rware registers; {hint}allowed: "
                                  f"{_ID_PATTERN} with 1-19 robots, or null and task.size, task.n_agents, "
                                  f"task.difficulty")
            given = [name for name, value in settings.items() if value is not None]
            if given:
                raise ConfigError(f"task.{given[0]}: set by task.env_id {env_id!r}; allowed: null (or env_id: null "
                                  f"to give size, n_agents and difficulty instead)")
        self.env_id = env_id
        if size is not None and size not in SIZES:
            raise ConfigError(f"task.size: {size!r} is not a warehouse size; {did_you_mean(size, SIZES)}allowed: "
                              f"{', '.join(map(repr, SIZES))}")
        if difficulty is not None and difficulty not in DIFFICULTIES:
            raise ConfigError(f"task.difficulty: {difficulty!r} is not a difficulty; "
                              f"{did_you_mean(difficulty, DIFFICULTIES)}allowed: {', '.join(map(repr, DIFFICULTIES))}")
        if n_agents is not None:
            positive_int("task.n_agents", n_agents)
        self.size, self.n_agents, self.difficulty = size, n_agents, difficulty
        self.env_kwargs = dict(env_kwargs or {})
        for key, value in self.env_kwargs.items():
            if key in _OWN:
                raise ConfigError(f"task.env_kwargs: {key!r} is set by task.{_OWN[key]}; allowed: the Warehouse's "
                                  f"other arguments")
            if key in _UNSUPPORTED:
                raise ConfigError(f"task.env_kwargs: {key!r} is not supported (vector observations and Discrete "
                                  f"actions only, no rendering); allowed: the Warehouse's other arguments")
            if key == "request_queue_size" and difficulty is not None:
                raise ConfigError("task.env_kwargs: 'request_queue_size' and task.difficulty both set the requested "
                                  "shelves; allowed: one of them")
            if key == "reward_type" and value not in REWARD_TYPES:
                raise ConfigError(f"task.env_kwargs: reward_type {value!r} is not one of "
                                  f"{', '.join(map(repr, REWARD_TYPES))}")
        self._max_steps = 500 if max_steps is None else positive_int("task.max_steps", max_steps)
        requests = self._settings()["request_queue_size"]
        if not isinstance(requests, int) or requests < 1:
            field = ("env_kwargs" if "request_queue_size" in self.env_kwargs else
                     "env_id" if env_id is not None else "difficulty")
            raise ConfigError(f"task.{field}: {self._label()} requests {requests!r} shelves at a time; allowed: at "
                              f"least 1 (an easier difficulty, more robots, or env_kwargs.request_queue_size >= 1)")
        self.time_limit_terminal = time_limit_terminal
        self.agent_groups = agent_groups
        self.groups  # noqa: B018 - checks agent_groups against the robots
        self._set_workers(num_workers)

    def _settings(self) -> dict[str, Any]:
        """The Warehouse's arguments as plain data (``reward_type`` as its name)."""
        if self.env_id is not None:
            kwargs = dict(gym.registry[self.env_id].kwargs)
            kwargs["reward_type"] = kwargs["reward_type"].name.lower()
        else:
            rows, columns = SIZES[self.size or "tiny"]
            robots = self.n_agents or 2
            kwargs = {"column_height": REGISTERED["column_height"], "shelf_rows": rows, "shelf_columns": columns,
                      "n_agents": robots, "msg_bits": REGISTERED["msg_bits"],
                      "sensor_range": REGISTERED["sensor_range"],
                      "request_queue_size": int(robots * DIFFICULTIES[self.difficulty or "normal"]),
                      "max_inactivity_steps": REGISTERED["max_inactivity_steps"], "reward_type": "individual"}
        kwargs.update(self.env_kwargs, max_steps=self.max_steps)
        return kwargs

    @override
    def simulator_kwargs(self) -> dict[str, Any]:
        from rware.warehouse import RewardType

        kwargs = self._settings()
        kwargs["reward_type"] = RewardType[kwargs["reward_type"].upper()]
        return kwargs

    @property
    @override
    def agents(self) -> list[str]:
        return [f"agent_{i}" for i in range(self._settings()["n_agents"])]

    def _label(self) -> str:
        if self.env_id is not None:
            return self.env_id
        hardness = "" if (self.difficulty or "normal") == "normal" else f"-{self.difficulty}"
        return f"rware-{self.size or 'tiny'}-{self.n_agents or 2}ag{hardness}-v2"

    @property
    @override
    def name(self) -> str:
        return f"rware/{self._label()}"
