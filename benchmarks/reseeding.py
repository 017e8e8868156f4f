"""Does lit-marl's per-iteration re-seeding change learning? (issue 32, item 3) On a task where it happens.

    OMP_NUM_THREADS=1 python benchmarks/reseeding.py run --algorithm qmix --seeds 0 1 2 3 --arm shipped
    OMP_NUM_THREADS=1 python benchmarks/reseeding.py run --algorithm qmix --seeds 0 1 2 3 --arm one_stream
    python benchmarks/reseeding.py table --algorithm qmix

lit-marl re-seeds the training environments from ``(seed, rank, iteration)`` whenever every episode ended on a batch's
last step (``Sampler``); the ``one_stream`` arm seeds them once and lets the simulator's generator run on, as BenchMARL
does (``vs_benchmarl/one_stream.py``). On vmas/balance at BenchMARL's defaults the two are the same run (episodes end
early there, so no batch after the first ends on a boundary); here they are compared on VMAS navigation at the
learning checks' settings (2 agents, episodes of 50 steps, 60 envs × 50 steps a batch, 54k frames), where episodes
run to their end until the agents learn to reach their goals. Per run: the mean evaluation return over 50 seeded
episodes before and after training, and how many iterations re-seeded. ``table``: each arm's mean final return and
the difference (one_stream − shipped) with a bootstrap 95 % CI over seeds (two samples, not pairs).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import lightning.pytorch as pl
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lit_marl.algorithms import IDDPG, MASAC, QMIX  # noqa: E402
from lit_marl.algorithms import collection  # noqa: E402
from lit_marl.algorithms.collection import Sampler  # noqa: E402
from lit_marl.data.evaluator import episode_returns  # noqa: E402
from lit_marl.envs import VmasTask  # noqa: E402
from lit_marl.evaluation.statistics import independent_difference  # noqa: E402
from lit_marl.models import Mlp  # noqa: E402

OUT = ROOT / "benchmarks" / "out" / "reseeding"
ARMS = ("shipped", "one_stream")
ALGORITHMS = ["qmix", "iddpg", "masac"]


def _one_stream():
    spec = importlib.util.spec_from_file_location("one_stream", ROOT / "benchmarks" / "vs_benchmarl" / "one_stream.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(algorithm: str, seed: int):
    """The learning checks' settings (tests/algorithms/test_q_learning.py, test_learning_off_policy.py; IDDPG with
    the SAC check's networks and QMIX's exploration anneal)."""
    common = dict(actor_model=Mlp([64, 64]), frames_per_batch=3000, num_envs=60, n_optimizer_steps=150,
                  train_batch_size=256, memory_size=100_000, lr=3e-4, max_frames=54_000, seed=seed)
    if algorithm == "qmix":
        return QMIX(VmasTask("navigation", max_steps=50, continuous_actions=False, n_agents=2),
                    exploration_anneal_frames=27_000, **common)
    if algorithm == "iddpg":
        return IDDPG(VmasTask("navigation", max_steps=50, n_agents=2), critic_model=Mlp([64, 64]),
                     exploration_anneal_frames=27_000, **common)
    return MASAC(VmasTask("navigation", max_steps=50, n_agents=2), critic_model=Mlp([64, 64]), alpha_init=0.05,
                 **common)


def mean_return(model) -> float:
    rollout = model.evaluate(seed=12345, num_envs=50)
    return torch.stack(list(episode_returns(model.groups, rollout).values())).mean().item()


def run(algorithm: str, seed: int, arm: str) -> dict:
    original, derived = Sampler.collect, collection.derived_seed
    reseeded: list[int] = []
    try:
        if arm == "one_stream":
            _one_stream().install()
        collection.derived_seed = lambda s, rank, iteration: reseeded.append(iteration) or derived(s, rank, iteration)
        pl.seed_everything(seed)
        model = build(algorithm, seed)
        before = mean_return(model)
        pl.Trainer(max_epochs=-1, gradient_clip_val=5.0, logger=False, enable_checkpointing=False,
                   enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0).fit(model)
        after = mean_return(model)
    finally:
        Sampler.collect, collection.derived_seed = original, derived
    return {"algorithm": algorithm, "seed": seed, "arm": arm, "before": before, "after": after,
            "iterations": model.iteration, "reseeded_iterations": reseeded}


def table(algorithm: str) -> dict:
    runs = {arm: {} for arm in ARMS}
    for path in sorted(OUT.glob(f"{algorithm}_*_seed*.json")):
        data = json.loads(path.read_text())
        runs[data["arm"]][data["seed"]] = data
    result = {"algorithm": algorithm}
    for arm in ARMS:
        seeds = sorted(runs[arm])
        result[arm] = {"seeds": seeds, "after": [runs[arm][s]["after"] for s in seeds],
                       "reseeds": [len(runs[arm][s]["reseeded_iterations"]) for s in seeds],
                       "iterations": [runs[arm][s]["iterations"] for s in seeds]}
    if all(len(result[arm]["after"]) > 1 for arm in ARMS):
        result["difference"] = independent_difference(result["one_stream"]["after"], result["shipped"]["after"])
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--algorithm", choices=ALGORITHMS, required=True)
    r.add_argument("--seeds", type=int, nargs="+", required=True)
    r.add_argument("--arm", choices=ARMS, required=True)
    t = sub.add_parser("table")
    t.add_argument("--algorithm", choices=ALGORITHMS, required=True)
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    if args.command == "table":
        result = table(args.algorithm)
        (OUT / f"{args.algorithm}_table.json").write_text(json.dumps(result, indent=1))
        for arm in ARMS:
            a = result[arm]
            mean = sum(a["after"]) / max(1, len(a["after"]))
            print(f"{arm}: seeds {a['seeds']} final {' / '.join(f'{v:.2f}' for v in a['after'])} mean {mean:.2f}; "
                  f"re-seeded iterations per run {a['reseeds']} of {a['iterations']}")
        if "difference" in result:
            d = result["difference"]["mean_difference"]
            print(f"one_stream - shipped: {d['value']:+.2f} [{d['ci_low']:+.2f}, {d['ci_high']:+.2f}], "
                  f"P(one_stream better) {result['difference']['probability_a_better']:.2f}")
        return result
    results = {}
    for seed in args.seeds:
        result = run(args.algorithm, seed, args.arm)
        (OUT / f"{args.algorithm}_{args.arm}_seed{seed}.json").write_text(json.dumps(result, indent=1))
        print(f"{args.algorithm} {args.arm} seed {seed}: {result['before']:.2f} -> {result['after']:.2f}, "
              f"re-seeded at iterations {result['reseeded_iterations']}")
        results[seed] = result
    return results


if __name__ == "__main__":
    main()
