"""Collection speed of tasks stepped in this process (1 worker) or in worker processes (torchrl ParallelEnv), with
MAPPO's policy as lit-marl collects for training.

    OMP_NUM_THREADS=1 python benchmarks/parallel_envs.py --tasks multiwalker simple_spread --workers 1 2
    python benchmarks/parallel_envs.py --configs configs/mappo_lbf.yaml configs/qmix_rware.yaml --workers 1 2

``--configs``: each config's own algorithm, networks, task, ``num_envs`` and ``frames_per_batch`` (one iteration's
collection), with ``task.num_workers`` set to each worker count; results go to benchmarks/out/parallel_envs_configs.json.

For each task and worker count: build MAPPO (BenchMARL-sized MLPs) and its Sampler, collect one warm-up batch,
(``--policy random``: the envs alone), then time ``--iterations`` batches of ``--frames`` frames over ``--num_envs`` envs. Both worker counts alternate
over ``--rounds`` rounds; the median frames/s is reported. Results go to benchmarks/out/parallel_envs.json.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import time
from pathlib import Path

import torch

import yaml

from lit_marl.algorithms import MAPPO
from lit_marl.algorithms.collection import Sampler
from lit_marl.envs import PettingZooTask
from lit_marl.models import Mlp

TASKS = {  # task -> PettingZooTask arguments
    "multiwalker": {"task": "multiwalker", "max_steps": 100},
    "simple_spread": {"task": "simple_spread", "max_steps": 100, "continuous_actions": True},
    "pursuit": {"task": "pursuit", "max_steps": 100},
    "battle": {"task": "battle", "max_steps": 100, "task_kwargs": {"map_size": 30}},  # ~70 agents, slow steps
}


def frames_per_second(task_name: str, workers: int, num_envs: int, frames: int, iterations: int,
                      policy: str) -> float:
    task = PettingZooTask(**TASKS[task_name], num_workers=workers)
    if policy == "random":  # the envs alone: random actions from the specs, no networks
        env = task.make_env(num_envs=num_envs, seed=0)
        try:
            env.rollout(frames // num_envs, break_when_any_done=False)  # warm-up
            start = time.perf_counter()
            for _ in range(iterations):
                env.rollout(frames // num_envs, break_when_any_done=False)
            return frames * iterations / (time.perf_counter() - start)
        finally:
            env.close()
    model = MAPPO(task, actor_model=Mlp([256, 256]), critic_model=Mlp([256, 256]), frames_per_batch=frames,
                  num_envs=num_envs, minibatch_size=min(400, frames))
    return timed_collection(Sampler(task, model.policy, num_envs=num_envs, frames_per_batch=frames, seed=0), frames,
                            iterations)


def timed_collection(sampler: Sampler, frames: int, iterations: int) -> float:
    """Frames/s of ``iterations`` collections of ``frames`` after a warm-up one; closes the sampler."""
    try:
        with torch.no_grad():
            sampler.collect(0)  # warm-up: worker start, first resets
            start = time.perf_counter()
            for i in range(iterations):
                sampler.collect(i + 1)
            return frames * iterations / (time.perf_counter() - start)
    finally:
        sampler.close()


def config_frames_per_second(config: Path, workers: int, iterations: int) -> float:
    """Frames/s of one iteration's collection of ``config``'s run (its policy, envs and batch) with ``workers``."""
    model_config = yaml.safe_load(config.read_text())["model"]
    init_args = dict(model_config["init_args"])
    task = dict(init_args["task"])
    task["init_args"] = {**task.get("init_args", {}), "num_workers": workers}
    init_args["task"] = task
    module, _, name = model_config["class_path"].rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    model = cls(**init_args)
    return timed_collection(model.collection.get_sampler(), model.frames_per_batch, iterations)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["multiwalker", "simple_spread"], choices=sorted(TASKS))
    parser.add_argument("--configs", nargs="+", type=Path, default=None,
                        help="time these configs' own collection instead of --tasks (--num_envs/--frames/--policy unused)")
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--num_envs", type=int, default=10)
    parser.add_argument("--frames", type=int, default=1000)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--policy", choices=["mappo", "random"], default="mappo",
                        help="mappo: collect with MAPPO's policy through lit-marl's Sampler; random: the envs alone")
    parser.add_argument("--out", type=Path, default=None, help="default: benchmarks/out/parallel_envs_<policy>.json")
    args = parser.parse_args()
    kind = "configs" if args.configs else args.policy
    args.out = args.out or Path(__file__).parent / "out" / f"parallel_envs_{kind}.json"
    results = {}
    for task_name in args.configs or args.tasks:
        runs: dict[int, list[float]] = {w: [] for w in args.workers}
        for _ in range(args.rounds):
            for workers in args.workers:
                runs[workers].append(
                    config_frames_per_second(task_name, workers, args.iterations) if args.configs else
                    frames_per_second(task_name, workers, args.num_envs, args.frames, args.iterations, args.policy))
        task_name = str(task_name)
        medians = {w: statistics.median(v) for w, v in runs.items()}
        base = medians[args.workers[0]]
        results[task_name] = {"fps": {str(w): v for w, v in runs.items()},
                              "median_fps": {str(w): m for w, m in medians.items()},
                              "speedup": {str(w): m / base for w, m in medians.items()}}
        print(task_name, " ".join(f"{w} worker(s): {m:.0f} fps (x{m / base:.2f})" for w, m in medians.items()),
              flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results}, indent=1))


if __name__ == "__main__":
    main()
