"""Each speed lever of issue 13 on its own, A/B in one process: milliseconds per optimizer step (and per collection
step) of lit-marl's own training step with the lever on and off, everything else equal.

    OMP_NUM_THREADS=1 taskset -c 0 python benchmarks/levers.py --algorithm mappo --steps 100 --rounds 5

vmas/balance with BenchMARL's defaults (MLPs 256-256 Tanh; MAPPO minibatches of 400 frames, MADDPG batches of 128).
One batch is collected, then each variant runs ``--steps`` optimizer steps (``training_step``, backward, per-group
clipping at 5, Adam) per round; variants alternate within each round; the median over rounds is reported.

Levers: ``lean`` (lit-marl's shared-parameter multi-agent MLP forward vs torchrl's), ``fused_adam`` (fused vs the
per-tensor loop), ``gather`` (on-policy: slicing one shuffled copy per epoch vs a gather per minibatch), ``compile``
(each group's loss through torch.compile; its compilation time is reported apart), and collection's policy forward
with either MLP; for MAPPO also PPO's GAE on a 600-env batch with one critic call or torchrl's two (issue 33).
(Tanh through sigmoid, measured here on 2026-12-03, was withdrawn: it changed MADDPG's learning.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import lightning.pytorch as pl
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lit_marl.algorithms import MADDPG, MAPPO, ppo  # noqa: E402
from lit_marl.envs import VmasTask  # noqa: E402
from lit_marl.models.mlp import LeanMultiAgentMLP  # noqa: E402
from torchrl.modules import MultiAgentMLP  # noqa: E402

SCENARIO_KWARGS = {"n_agents": 4, "package_mass": 5, "random_package_pos_on_line": True}


def _model(algorithm: str):
    task = VmasTask("balance", max_steps=100, scenario_kwargs=SCENARIO_KWARGS)
    if algorithm == "mappo":
        model = MAPPO(task, n_minibatch_iters=45, minibatch_size=400, frames_per_batch=6000, num_envs=10)
    else:
        model = MADDPG(task, n_optimizer_steps=1000, train_batch_size=128, frames_per_batch=6000, num_envs=10)
    # training_step asks the Trainer how many processes run (its NaN check): one, with no fit
    model.trainer = pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                               enable_progress_bar=False, enable_model_summary=False)
    return model


def _set_lean(model: nn.Module, lean: bool) -> None:
    for module in model.modules():
        if isinstance(module, MultiAgentMLP):
            module.__class__ = LeanMultiAgentMLP if lean else MultiAgentMLP


def _minibatches(model, algorithm: str, gather: bool, count: int):
    batch = model.collection.collect()
    if algorithm == "mappo":
        with torch.no_grad():
            flat = model.process_batch(batch).select(*model.training_keys(), strict=False).reshape(-1)
        order = torch.randperm(flat.shape[0])
        if gather:
            return lambda i: flat[order[(i % 15) * 400:(i % 15 + 1) * 400]]
        shuffled = flat[order]
        return lambda i: shuffled[(i % 15) * 400:(i % 15 + 1) * 400]
    with torch.no_grad():
        batch = model.process_batch(batch)
    for group, buffer in model.replay_buffers().items():
        buffer.extend(batch.select(*model.learners[group].training_keys(), strict=False).reshape(-1))
    return lambda i: __import__("tensordict").TensorDict(
        {g: b.sample(128) for g, b in model.replay_buffers().items()}, batch_size=[128])


def _time_steps(model, optimizer, next_batch, steps: int) -> float:
    start = time.perf_counter()
    for i in range(steps):
        loss = model.training_step(next_batch(i), i)
        optimizer.zero_grad()
        loss.backward()
        model.configure_gradient_clipping(optimizer, 5.0, "norm")
        optimizer.step()
    model._epoch_metrics.clear()
    return (time.perf_counter() - start) / steps * 1e3


def _gae_one_call_or_two(rounds: int, num_envs: int = 600) -> dict[str, float]:
    """PPO's GAE on one collected batch of ``num_envs`` envs x 100 steps (``process_batch``, ms): the critic called once
    over the steps and the next steps that differ (lit-marl) against torchrl's two calls (every step, then every next
    step)."""
    model = MAPPO(VmasTask("balance", max_steps=100, scenario_kwargs=SCENARIO_KWARGS), frames_per_batch=num_envs * 100,
                  num_envs=num_envs, minibatch_size=min(4096, num_envs * 100), n_minibatch_iters=2)
    batch = model.collection.collect()
    one_call = ppo.state_values_in_one_call
    times: dict[str, list[float]] = {"one": [], "two": []}
    for _ in range(rounds):
        for way in times:
            ppo.state_values_in_one_call = one_call if way == "one" else (lambda *args: False)
            data = batch.clone()
            start = time.perf_counter()
            with torch.no_grad():
                model.process_batch(data)
            times[way].append((time.perf_counter() - start) * 1e3)
    ppo.state_values_in_one_call = one_call
    return {f"GAE on {num_envs} envs x 100 steps, one critic call": statistics.median(times["one"]),
            f"GAE on {num_envs} envs x 100 steps, torchrl's two calls": statistics.median(times["two"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algorithm", default="mappo", choices=["mappo", "maddpg"])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--compile", action="store_true", help="also A/B compile (slow to warm up on CPU)")
    parser.add_argument("--gae-envs", type=int, default=600, help="MAPPO: envs of the batch GAE is timed on")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = _model(args.algorithm)
    params = [g for g in model.configure_optimizers().param_groups]
    adam = {fused: torch.optim.Adam([{"params": g["params"], "name": g["name"]} for g in params], lr=5e-5, eps=1e-6,
                                    fused=fused or None, foreach=False if not fused else None) for fused in (True, False)}
    batches = {gather: _minibatches(model, args.algorithm, gather, args.steps) for gather in (True, False)}
    variants = {
        "all levers": dict(fused=True, gather=False, lean=True),
        "torchrl's MultiAgentMLP forward": dict(fused=True, gather=False, lean=False),
        "per-tensor Adam": dict(fused=False, gather=False, lean=True),
        "none (as before)": dict(fused=False, gather=True, lean=False),
    }
    if args.algorithm == "mappo":
        variants["gather per minibatch"] = dict(fused=True, gather=True, lean=True)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, v in variants.items():
            _set_lean(model, v["lean"])
            times[name].append(_time_steps(model, adam[v["fused"]], batches[v["gather"]], args.steps))
    result = {name: statistics.median(t) for name, t in times.items()}
    if args.compile:
        _set_lean(model, True)
        for learner in model.learners.values():
            learner.compile_objective = True
        start = time.perf_counter()
        _time_steps(model, adam[True], batches[False], 3)
        result["compile: first 3 steps (s)"] = time.perf_counter() - start
        result["compile"] = statistics.median(
            _time_steps(model, adam[True], batches[False], args.steps) for _ in range(args.rounds))
    # collection's policy forward, [10 envs, 4 agents]
    policy, data = model.collection.policy(), model.collection.collect()[:, 0].clone()
    for lean in (True, False):
        _set_lean(model, lean)
        with torch.no_grad():
            start = time.perf_counter()
            for _ in range(20 * args.steps):
                policy(data.clone())
        result[f"collection policy step, {'lit-marl' if lean else 'torchrl'} MLP"] = \
            (time.perf_counter() - start) / (20 * args.steps) * 1e3
    if args.algorithm == "mappo":
        result.update(_gae_one_call_or_two(args.rounds, args.gae_envs))
    result = {"algorithm": args.algorithm, "threads": torch.get_num_threads(),
              "ms_per_step": {k: round(v, 3) for k, v in result.items()}}
    print(json.dumps(result, indent=2))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"levers_{args.algorithm}.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
