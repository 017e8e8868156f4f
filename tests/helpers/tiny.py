"""Tiny tasks, algorithm arguments and trainers that keep every test to seconds on two CPU cores."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import torch
from tensordict import TensorDict

from lit_marl.envs import VmasTask
from lit_marl.models import Mlp

#: the repository's root and its configs
ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"


def tiny_task(scenario: str = "simple_spread", max_steps: int = 10, **kwargs) -> VmasTask:
    """A VMAS task whose episodes end only at ``max_steps`` (no episode in flight at batch ends)."""
    return VmasTask(scenario, max_steps=max_steps, **kwargs)


def tiny_kwargs(**overrides) -> dict:
    """Algorithm arguments for a run of a few seconds: 4 envs × 10 steps per iteration."""
    kwargs = dict(
        actor_model=Mlp(num_cells=[32, 32]),
        critic_model=Mlp(num_cells=[32, 32]),
        frames_per_batch=40,
        num_envs=4,
        n_minibatch_iters=2,
        minibatch_size=20,
        max_frames=10_000,
        evaluation_episodes=4,
        lr=1e-3,
    )
    kwargs.update(overrides)
    return kwargs


def tiny_trainer(tmp_path: Path, **overrides) -> pl.Trainer:
    kwargs = dict(
        default_root_dir=tmp_path,
        max_epochs=2,
        gradient_clip_val=5.0,
        logger=pl.loggers.CSVLogger(tmp_path, name="run"),
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        check_val_every_n_epoch=1,
        log_every_n_steps=1,
    )
    kwargs.update(overrides)
    return pl.Trainer(**kwargs)


def ddpg_kwargs(**overrides) -> dict:
    """Off-policy (DDPG-family) arguments for a run of a few seconds: 4 envs × 10 steps, 4 optimizer steps."""
    kwargs = dict(actor_model=Mlp([32, 32]), critic_model=Mlp([32, 32]), frames_per_batch=40, num_envs=4,
                  n_optimizer_steps=4, train_batch_size=16, memory_size=1000, max_frames=400, evaluation_episodes=4,
                  lr=1e-3)
    kwargs.update(overrides)
    return kwargs


def done_rollout(done: list[list[bool]], reward: float = 1.0) -> TensorDict:
    """A rollout ``[envs, steps]`` of one group ``g`` of 3 agents with these root ``done`` flags and a constant
    reward: what the collection metrics and the first-episode mask read."""
    e, t = len(done), len(done[0])
    nxt = TensorDict({"done": torch.tensor(done).unsqueeze(-1),
                      ("g", "reward"): torch.full((e, t, 3, 1), reward)}, batch_size=[e, t])
    return TensorDict({"next": nxt}, batch_size=[e, t])
