"""A new task: agents on a ring of cells that must meet in one cell, written as a batched torchrl env and a Task.

The env steps ``num_envs`` episodes at once as tensors (no Python loop over environments) and speaks torchrl's
multi-agent API: a ``group_map``, and per group the nested keys ``(group, "observation")``, ``(group, "action")`` and
``(group, "reward")`` with the agent dimension after the batch dimension. The Task says how to build it; lit-marl reads
the specs from a one-env probe and sizes every algorithm's networks from them.

Run it: ``python docs/examples/rendezvous_task.py`` (MAPPO on it for a few seconds, on a CPU).
"""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

from lit_marl.envs import Task
from lit_marl.errors import ConfigError, positive_int

GROUP = "agents"


class RendezvousEnv(EnvBase):
    """``n_agents`` agents on a ring of ``n_cells`` cells, ``num_envs`` episodes at once.

    Each step every agent moves one cell left, stays or moves one cell right (actions 0, 1, 2). Each agent sees how
    many agents stand on each cell, counted from its own cell clockwise (so the observation is the same for every
    agent's point of view). Every agent gets the same reward, ``-(occupied cells - 1) / (n_agents - 1)``: 0 once
    they all stand on one cell, which ends the episode (terminated); an episode that reaches ``max_steps`` is
    truncated.
    """

    def __init__(self, num_envs: int, n_agents: int, n_cells: int, max_steps: int, device="cpu") -> None:
        super().__init__(device=device, batch_size=torch.Size([num_envs]))
        self.n_agents, self.n_cells, self.max_steps = n_agents, n_cells, max_steps
        self.group_map = {GROUP: [f"agent_{i}" for i in range(n_agents)]}
        agents = (num_envs, n_agents)

        def group(**specs) -> Composite:
            return Composite({GROUP: Composite(specs, shape=agents, device=device)}, shape=(num_envs,), device=device)

        self.observation_spec = group(observation=Unbounded((*agents, n_cells), device=device))
        self.action_spec = group(action=Categorical(3, shape=agents, device=device))
        self.reward_spec = group(reward=Unbounded((*agents, 1), device=device))
        flag = Categorical(2, (num_envs, 1), dtype=torch.bool, device=device)
        self.done_spec = Composite(done=flag, terminated=flag.clone(), truncated=flag.clone(), shape=(num_envs,),
                                   device=device)
        self.generator = torch.Generator(device=device)
        self.position = torch.zeros(agents, dtype=torch.long, device=device)
        self.t = torch.zeros(num_envs, dtype=torch.long, device=device)
        #: cell offsets 0..n_cells-1, for the egocentric observation
        self.offsets = torch.arange(n_cells, device=device)

    def _group(self, **entries: torch.Tensor) -> TensorDict:
        """A group's entries, with the agent dimension in its batch size (``[num_envs, n_agents]``)."""
        return TensorDict(entries, batch_size=(*self.batch_size, self.n_agents), device=self.device)

    def _set_seed(self, seed: int | None) -> None:
        self.generator.manual_seed(0 if seed is None else int(seed))

    def _occupancy(self) -> torch.Tensor:
        """``[num_envs, n_cells]``: how many agents stand on each cell."""
        counts = torch.zeros(*self.batch_size, self.n_cells, device=self.device)
        return counts.scatter_add_(-1, self.position, torch.ones_like(self.position, dtype=counts.dtype))

    def _observation(self, occupancy: torch.Tensor) -> torch.Tensor:
        # agent i's view: cell (position_i + k) % n_cells at index k, as a share of the agents
        cells = (self.position.unsqueeze(-1) + self.offsets) % self.n_cells  # [E, A, C]
        return occupancy.unsqueeze(1).expand(-1, self.n_agents, -1).gather(-1, cells) / self.n_agents

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs) -> TensorDictBase:
        # torchrl passes "_reset" to reset only the episodes that ended (the others keep their state)
        reset = tensordict.get("_reset", None) if tensordict is not None else None
        which = torch.ones(self.batch_size, dtype=torch.bool, device=self.device) if reset is None else reset.view(-1)
        starts = torch.randint(self.n_cells, (int(which.sum()), self.n_agents), generator=self.generator,
                               device=self.device)
        self.position[which] = starts
        self.t[which] = 0
        flag = torch.zeros(*self.batch_size, 1, dtype=torch.bool, device=self.device)
        return TensorDict({GROUP: self._group(observation=self._observation(self._occupancy())), "done": flag,
                           "terminated": flag.clone(), "truncated": flag.clone()}, batch_size=self.batch_size,
                          device=self.device)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        move = tensordict.get((GROUP, "action")) - 1  # -1, 0, +1
        self.position = (self.position + move) % self.n_cells
        self.t = self.t + 1
        occupancy = self._occupancy()
        occupied = (occupancy > 0).sum(-1, keepdim=True)  # [E, 1]
        reward = -(occupied - 1).float() / (self.n_agents - 1)
        terminated = occupied == 1
        truncated = (self.t >= self.max_steps).unsqueeze(-1) & ~terminated
        return TensorDict({
            GROUP: self._group(observation=self._observation(occupancy),
                               reward=reward.unsqueeze(1).expand(-1, self.n_agents, 1).clone()),
            "done": terminated | truncated, "terminated": terminated, "truncated": truncated,
        }, batch_size=self.batch_size, device=self.device)


class RendezvousTask(Task):
    """Agents on a ring that must meet in one cell (:class:`RendezvousEnv`).

    Args:
        n_agents: agents on the ring (at least 2), all in group ``agents``.
        n_cells: cells of the ring.
        max_steps: episode length limit (steps); an episode that has not ended by then is truncated.
    """

    def __init__(self, n_agents: int = 3, n_cells: int = 8, max_steps: int = 25) -> None:
        # a Task stores every __init__ argument under its own name (Configurable: checkpoints and config.yaml
        # write the task back from them); max_steps and continuous_actions are read through _max_steps and
        # _continuous_actions
        self.n_agents = positive_int("n_agents", n_agents)
        if self.n_agents < 2:
            raise ConfigError(f"n_agents: {n_agents} agent(s) have nobody to meet; allowed: 2 or more")
        self.n_cells = positive_int("n_cells", n_cells)
        self._max_steps = positive_int("max_steps", max_steps)
        self._continuous_actions = False

    @property
    def name(self) -> str:
        return "rendezvous/ring"

    def _make_env(self, num_envs: int, seed: int | None, device: torch.device | str) -> EnvBase:
        env = RendezvousEnv(num_envs, self.n_agents, self.n_cells, self.max_steps, device=device)
        if seed is not None:
            env.set_seed(seed)
        return env


if __name__ == "__main__":
    import lightning.pytorch as pl

    from lit_marl.algorithms import MAPPO
    from lit_marl.models import Mlp

    task = RendezvousTask(n_agents=3, n_cells=6, max_steps=15)
    print(task.specs.group_map, task.specs.observation_spec[GROUP, "observation"].shape,
          task.specs.group_action_spec(GROUP))
    model = MAPPO(task=task, actor_model=Mlp(num_cells=[32, 32]), critic_model=Mlp(num_cells=[32, 32]),
                  frames_per_batch=300, num_envs=20, minibatch_size=100, n_minibatch_iters=4, max_frames=1500,
                  evaluation_episodes=20, lr=3e-3, entropy_coef=0.01)
    trainer = pl.Trainer(max_epochs=-1, check_val_every_n_epoch=5, num_sanity_val_steps=0, enable_progress_bar=False,
                         logger=pl.loggers.CSVLogger("runs", name="rendezvous"))
    trainer.fit(model)
    print("evaluation return:", float(trainer.callback_metrics["val/return"]))
