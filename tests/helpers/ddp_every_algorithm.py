"""One process of a 2-process DDP run that fits every lit-marl algorithm in turn (tests/test_ddp.py starts two).

The test sets ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK`` and ``NODE_RANK``, so
Lightning sees processes created externally: it spawns none, initialises the process group in the first ``fit`` and
reuses it in every later one (one pair of processes pays the imports once for all the algorithms). For every
registered algorithm and every ``nan_policy``, each process writes to ``<folder>/rank<r>.json`` either the problems
:func:`~lit_marl.distributed.shares` refuses that run with across 2 processes, or what the test compares after one
iteration: a digest of every parameter and buffer (target networks, exploration scales…), of the optimizer's state
(step counts, moments), the learners' checkpoint state (target-update counters), and the counters that show this
process really trained (frames, its own collected frames, optimizer steps, weights moved from their start). Last,
MAPPO with a NaN loss on process 1 only: what each process raised.

Usage: ``python -m tests.helpers.ddp_every_algorithm <folder>``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import lightning.pytorch as pl
import torch
from torchrl.modules import EGreedyModule

from lit_marl.algorithms import Ensemble
from lit_marl.algorithms.off_policy import AnnealedExploration
from lit_marl.algorithms.registry import algorithms_by_name
from lit_marl.callbacks import MarlCallback
from lit_marl.callbacks.numerics import NAN_POLICIES
from lit_marl.distributed import shares
from lit_marl.envs import VmasTask
from lit_marl.models import Mlp
from tests.reliability.faulty import FaultyMAPPO

#: the run's global sizes: each process steps 2 envs for 10 steps (one iteration)
RUN = dict(frames_per_batch=40, num_envs=4, max_frames=10_000, evaluation_episodes=2)
#: 2 optimizer steps per iteration, on minibatches split over the processes
ON_POLICY = dict(n_minibatch_iters=1, minibatch_size=20)
OFF_POLICY = dict(n_optimizer_steps=2, train_batch_size=16)
MLP = {"class_path": "lit_marl.models.Mlp", "init_args": {"num_cells": [16]}}


def build(cls: type, nan_policy: str, **settings) -> pl.LightningModule:
    """``cls`` on VMAS balance with 2 agents (discrete actions where it needs them); the ensemble: MADDPG and MASAC,
    one group per agent."""
    if cls is Ensemble:
        algorithms = {group: {"class_path": f"lit_marl.algorithms.{name}",
                              "init_args": {"actor_model": MLP, "critic_model": MLP, "memory_size": 200}}
                      for group, name in (("agent_0", "MADDPG"), ("agent_1", "MASAC"))}
        task = VmasTask("balance", max_steps=10, n_agents=2, agent_groups="one_group_per_agent")
        return cls(task, algorithms, nan_policy=nan_policy, **RUN, **OFF_POLICY)
    task = VmasTask("balance", max_steps=10, n_agents=2, continuous_actions=cls.supports_continuous_actions)
    models = {"actor_model": Mlp(num_cells=[16])}
    if cls.learner_class.has_critic:
        models["critic_model"] = Mlp(num_cells=[16])
    loop = ON_POLICY if cls.on_policy else {**OFF_POLICY, "memory_size": 200}
    return cls(task, nan_policy=nan_policy, lr=1e-3, **models, **RUN, **loop, **settings)


def digest(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.detach().cpu().contiguous().numpy().tobytes()).hexdigest()[:16]


def tensors(module: pl.LightningModule) -> dict[str, str]:
    """A digest of every parameter and buffer, by name."""
    return {name: digest(t) for name, t in [*module.named_parameters(), *module.named_buffers()]}


def exploration(learner: AnnealedExploration) -> dict:
    """The exploration's scale (epsilon, or the noise's standard deviation) and the schedule it anneals by."""
    module = learner.exploration
    scale = module.eps if isinstance(module, EGreedyModule) else module.sigma
    return {"scale": scale.item(), "start": learner.exploration_eps_init, "end": learner.exploration_eps_end,
            "frames": learner.anneal_frames}


class Collected(MarlCallback):
    """Counts the frames this process collected."""

    def __init__(self) -> None:
        self.frames = 0

    def on_batch_collected(self, trainer, pl_module, batch) -> None:
        self.frames += batch.numel()


def fit(model: pl.LightningModule, root: Path) -> dict:
    """One iteration of ``model`` in this process of the pair, and what the test compares."""
    initialised = torch.distributed.is_initialized()
    start = tensors(model)
    collected = Collected()
    trainer = pl.Trainer(strategy="ddp", devices=2, accelerator="cpu", max_epochs=1, default_root_dir=root,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
                         gradient_clip_val=5.0, callbacks=[collected])
    trainer.fit(model)
    optimizer, end = trainer.optimizers[0], tensors(model)
    return {
        "group_initialised_before": initialised, "world_size": trainer.world_size, "rank": trainer.global_rank,
        "external_processes": trainer.strategy.cluster_environment.creates_processes_externally,
        "process_group": id(torch.distributed.group.WORLD),
        "frames": model.frames, "collected": collected.frames, "global_step": trainer.global_step,
        "parameters": [name for name, _ in model.named_parameters()],
        "moved": sorted(name for name, value in end.items() if start.get(name) != value), "tensors": end,
        "optimizer": {f"{i}/{key}": value.item() if value.numel() == 1 else digest(value)
                      for i, param in enumerate(p for g in optimizer.param_groups for p in g["params"])
                      for key, value in optimizer.state[param].items()},
        "learners": {group: learner.checkpoint_state() for group, learner in model.learners.items()},
        "exploration": {group: exploration(learner) for group, learner in model.learners.items()
                        if isinstance(learner, AnnealedExploration)},
    }


def nan_on_process_1(folder: Path) -> dict:
    """MAPPO whose loss is NaN on process 1 only (nan_policy stop): what each process raised, and whether its weights
    stayed as they were."""
    pl.seed_everything(0, verbose=False)
    model = FaultyMAPPO(VmasTask("balance", max_steps=10, n_agents=2), actor_model=Mlp(num_cells=[16]),
                        critic_model=Mlp(num_cells=[16]), lr=1e-3, fault_iterations=[1] if os.environ["RANK"] == "1"
                        else [], **RUN, **ON_POLICY)
    start = tensors(model)
    trainer = pl.Trainer(strategy="ddp", devices=2, accelerator="cpu", max_epochs=1, default_root_dir=folder,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0)
    try:
        trainer.fit(model)
    except Exception as err:  # noqa: BLE001 - what each process raised is what the test checks
        return {"raised": f"{type(err).__name__}: {err}", "unchanged": tensors(model) == start}
    return {"raised": None, "unchanged": tensors(model) == start}


def main(folder: Path) -> None:
    torch.set_num_threads(1)
    records = {}
    for name, cls in algorithms_by_name().items():
        for nan_policy in NAN_POLICIES:
            pl.seed_everything(0, verbose=False)  # both processes start from the same weights
            model = build(cls, nan_policy)
            problems = shares(model, 2)
            records[f"{name}/{nan_policy}"] = {"refused": problems} if problems else fit(model, folder / name)
    # QMIX with EPyMARL's options: the running reward moments are pooled over the processes, so they stay one set
    pl.seed_everything(0, verbose=False)
    records["qmix/standardise_rewards+hypernet_layers_2"] = fit(
        build(algorithms_by_name()["qmix"], NAN_POLICIES[0], standardise_rewards=True, hypernet_layers=2),
        folder / "qmix_standardised")
    records["nan_on_process_1"] = nan_on_process_1(folder / "nan")  # last: a failed fit may leave the group unusable
    (folder / f"rank{os.environ['RANK']}.json").write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
