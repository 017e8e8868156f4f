"""Frames per second of lit-marl MAPPO against a bare, hand-written torchrl loop, in one run.

Both sides use BenchMARL's default MAPPO settings on vmas/balance (4 agents): 10 envs, 6000 frames per
iteration, 45 epochs of 400-frame minibatches, MLPs 256-256 Tanh, Adam 5e-5, per-loss gradient clipping
at 5. The bare loop is torchrl only (Collector, ClipPPOLoss, GAE, Adam): no Lightning, no lit-marl.
The two alternate (bare, lit, bare, lit, …) so drift of the machine hits both alike.

    python benchmarks/throughput.py --iterations 3 --rounds 2 [--profile]

Prints a JSON summary (also written to benchmarks/out/throughput.json): whole-run frames/s (the clock
starts before the envs are built on both sides) and steady-state collection/training seconds per
iteration (median, first iteration excluded). lit-marl runs as `lit-marl fit` would: CSV logger, progress
bar, last.ckpt checkpoint.
"""

from __future__ import annotations

import argparse
import cProfile
import csv
import io
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

import lightning.pytorch as pl
import torch
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn
from torchrl.collectors import Collector
from torchrl.envs import RewardSum, TransformedEnv, VmasEnv
from torchrl.modules import MultiAgentMLP, ProbabilisticActor, TanhNormal
from torchrl.objectives import ClipPPOLoss, ValueEstimators

from lit_marl.algorithms import MAPPO
from lit_marl.envs import VmasTask

SCENARIO_KWARGS = {"n_agents": 4, "package_mass": 5, "random_package_pos_on_line": True}
FRAMES, ENVS, EPOCHS, MINIBATCH, LR, EPS, CLIP = 6000, 10, 45, 400, 5e-5, 1e-6, 5.0


def bare_loop(iterations: int, seed: int) -> dict[str, float]:
    """BenchMARL-style MAPPO written directly against torchrl."""
    torch.manual_seed(seed)
    start = time.perf_counter()  # like lit-marl's fit, the clock includes building envs and collector
    env = VmasEnv("balance", num_envs=ENVS, continuous_actions=True, max_steps=100, seed=seed,
                  scenario_kwargs=SCENARIO_KWARGS)
    env = TransformedEnv(env, RewardSum(in_keys=list(env.reward_keys), reset_keys=list(env.reset_keys)))
    g = "agents"
    n_agents = env.observation_spec[g, "observation"].shape[-2]
    obs_dim = env.observation_spec[g, "observation"].shape[-1]
    action_spec = env.full_action_spec[g, "action"]
    mlp = {"num_cells": [256, 256], "activation_class": nn.Tanh}
    actor_net = nn.Sequential(
        MultiAgentMLP(obs_dim, 2 * action_spec.shape[-1], n_agents, centralized=False, share_params=True, **mlp),
        NormalParamExtractor(scale_mapping="biased_softplus_1.0"),
    )
    policy = ProbabilisticActor(
        TensorDictModule(actor_net, in_keys=[(g, "observation")], out_keys=[(g, "loc"), (g, "scale")]),
        spec=action_spec, in_keys=[(g, "loc"), (g, "scale")], out_keys=[(g, "action")],
        distribution_class=TanhNormal,
        distribution_kwargs={"low": action_spec.space.low[0], "high": action_spec.space.high[0]},
        return_log_prob=True,
    )
    critic = TensorDictModule(MultiAgentMLP(obs_dim, 1, n_agents, centralized=True, share_params=True, **mlp),
                              in_keys=[(g, "observation")], out_keys=[(g, "state_value")])
    loss = ClipPPOLoss(policy, critic, clip_epsilon=0.2, entropy_bonus=False, critic_coeff=1.0,
                       loss_critic_type="l2", normalize_advantage=False)
    loss.set_keys(reward=(g, "reward"), action=(g, "action"), done=(g, "done"), terminated=(g, "terminated"),
                  advantage=(g, "advantage"), value_target=(g, "value_target"), value=(g, "state_value"),
                  sample_log_prob=(g, "action_log_prob"))
    loss.make_value_estimator(ValueEstimators.GAE, gamma=0.99, lmbda=0.9)
    actor_params, critic_params = list(policy.parameters()), list(critic.parameters())
    optimizer = torch.optim.Adam([{"params": actor_params}, {"params": critic_params}], lr=LR, eps=EPS)
    collector = Collector(env, policy, frames_per_batch=FRAMES, total_frames=-1, auto_register_policy_transforms=False)

    collect, train = [], []
    frames = 0
    iterator = iter(collector)
    for _ in range(iterations):
        t0 = time.perf_counter()
        batch = next(iterator)
        t1 = time.perf_counter()
        with torch.no_grad():
            nxt = batch.get("next")
            for key in ("done", "terminated"):
                nxt.set((g, key), nxt.get(key).unsqueeze(-2).expand(nxt.get((g, "reward")).shape))
            loss.value_estimator(batch, params=loss.critic_network_params,
                                 target_params=loss.target_critic_network_params)
        flat = batch.reshape(-1)
        for _ in range(EPOCHS):
            order = torch.randperm(flat.numel())
            for i in range(FRAMES // MINIBATCH):
                terms = loss(flat[order[i * MINIBATCH:(i + 1) * MINIBATCH]])
                total = terms["loss_objective"] + terms["loss_critic"]
                optimizer.zero_grad()
                total.backward()
                torch.nn.utils.clip_grad_norm_(actor_params, CLIP)
                torch.nn.utils.clip_grad_norm_(critic_params, CLIP)
                optimizer.step()
        t2 = time.perf_counter()
        frames += batch.numel()
        collect.append(t1 - t0)
        train.append(t2 - t1)
    wall = time.perf_counter() - start
    collector.shutdown()
    return _summary(frames, wall, collect, train)


def _summary(frames: int, wall: float, collect: list[float], train: list[float]) -> dict[str, float]:
    """Whole-run frames/s (setup included) and steady-state seconds per iteration (first one excluded)."""
    steady = slice(1, None) if len(collect) > 1 else slice(None)
    return {"frames": frames, "seconds": wall, "fps": frames / wall,
            "collection_s_per_iter": statistics.median(collect[steady]),
            "training_s_per_iter": statistics.median(train[steady]),
            "steady_fps": FRAMES / (statistics.median(collect[steady]) + statistics.median(train[steady]))}


def lit_marl(iterations: int, seed: int, workdir: Path) -> dict[str, float]:
    """lit-marl MAPPO as `lit-marl fit` runs it: CSV logger, checkpoints, progress bar, clipping."""
    pl.seed_everything(seed, verbose=False)
    task = VmasTask("balance", max_steps=100, scenario_kwargs=SCENARIO_KWARGS)
    model = MAPPO(task, frames_per_batch=FRAMES, num_envs=ENVS, n_minibatch_iters=EPOCHS, minibatch_size=MINIBATCH,
                  lr=LR, adam_eps=EPS, seed=seed, max_frames=FRAMES * iterations)
    trainer = pl.Trainer(max_epochs=-1, gradient_clip_val=CLIP, check_val_every_n_epoch=10_000, num_sanity_val_steps=0,
                         logger=pl.loggers.CSVLogger(workdir, name="throughput"), default_root_dir=workdir,
                         callbacks=[pl.callbacks.ModelCheckpoint(save_last=True)], enable_model_summary=False,
                         log_every_n_steps=1)
    start = time.perf_counter()
    trainer.fit(model)
    wall = time.perf_counter() - start
    with open(Path(trainer.logger.log_dir) / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("timers/collection_time")]
    return _summary(model.frames, wall, [float(r["timers/collection_time"]) for r in rows],
                    [float(r["timers/training_time"]) for r in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--profile", action="store_true", help="also profile one lit-marl run (cProfile)")
    args = parser.parse_args()
    out = Path(__file__).parent / "out"
    out.mkdir(exist_ok=True)
    results: dict[str, list[dict[str, float]]] = {"bare": [], "lit_marl": []}
    for r in range(args.rounds):
        results["bare"].append(bare_loop(args.iterations, seed=r))
        results["lit_marl"].append(lit_marl(args.iterations, seed=r, workdir=out))
        print(f"round {r}: bare {results['bare'][-1]['fps']:.0f} fps, lit-marl {results['lit_marl'][-1]['fps']:.0f} fps",
              file=sys.stderr)
    summary = {
        "config": {"frames_per_batch": FRAMES, "num_envs": ENVS, "epochs": EPOCHS, "minibatch": MINIBATCH,
                   "iterations_per_run": args.iterations, "rounds": args.rounds,
                   "torch_threads": torch.get_num_threads()},
        **{name: {key: statistics.median(run[key] for run in runs) for key in runs[0]} for name, runs in results.items()},
    }
    summary["ratio_fps_lit_over_bare"] = summary["lit_marl"]["fps"] / summary["bare"]["fps"]
    summary["ratio_steady_fps_lit_over_bare"] = summary["lit_marl"]["steady_fps"] / summary["bare"]["steady_fps"]
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        lit_marl(2, seed=0, workdir=out)
        profiler.disable()
        stream = io.StringIO()
        pstats.Stats(profiler, stream=stream).sort_stats("tottime").print_stats(25)
        (out / "profile.txt").write_text(stream.getvalue())
    (out / "throughput.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
