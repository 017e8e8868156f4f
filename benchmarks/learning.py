"""Learning curve of lit-marl MAPPO on vmas/balance with BenchMARL's defaults (configs/mappo_vmas_balance.yaml).

Each seed is one `lit-marl fit` run (the real command-line path) to `--frames` frames, evaluating every
`--eval-every` iterations (10 deterministic episodes). Then `--summarize` turns the runs' metrics.csv into
a table of evaluation and collection return against frames (benchmarks/out/learning.json).

    OMP_NUM_THREADS=1 python benchmarks/learning.py --seed 0 &   # seeds may run side by side
    python benchmarks/learning.py --summarize
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out" / "learning"


def run(seed: int, frames: int, eval_every: int) -> None:
    from lit_marl.cli import main

    main([
        "fit", "--config", str(ROOT / "configs" / "mappo_vmas_balance.yaml"),
        "--seed_everything", str(seed),
        "--model.init_args.max_frames", str(frames),
        "--trainer.check_val_every_n_epoch", str(eval_every),
        "--checkpoint.every_n_epochs", "50",
        "--trainer.logger.init_args.save_dir", str(OUT),
        "--trainer.logger.init_args.name", f"seed{seed}",
        "--trainer.enable_progress_bar", "false",
    ])


def _curve(metrics: Path) -> dict[str, dict[int, float]]:
    curves: dict[str, dict[int, float]] = {"val/return": {}, "collection/reward/episode_reward_mean": {},
                                           "timers/iteration_time": {}}
    with open(metrics) as f:
        for row in csv.DictReader(f):
            if not row.get("counters/frames"):
                continue
            frames = int(float(row["counters/frames"]))
            for name, curve in curves.items():
                if row.get(name):
                    curve[frames] = float(row[name])
    return curves


def summarize() -> dict:
    runs = {}
    for seed_dir in sorted(OUT.glob("seed*")):
        versions = sorted(seed_dir.glob("version_*/metrics.csv"))
        if versions:
            runs[seed_dir.name] = _curve(versions[-1])
    checkpoints = [30_000 * k for k in range(1, 100)]
    table = []
    for frames in checkpoints:
        row = {"frames": frames}
        for name, key in (("val", "val/return"), ("collection", "collection/reward/episode_reward_mean")):
            values = [run[key][frames] for run in runs.values() if frames in run[key]]
            if values:
                row[f"{name}_mean"] = statistics.mean(values)
                row[f"{name}_per_seed"] = values
        if len(row) > 1:
            table.append(row)
    seconds = {seed: sum(run["timers/iteration_time"].values()) for seed, run in runs.items()}
    summary = {"seeds": sorted(runs), "training_seconds_per_seed": seconds, "curve": table}
    (OUT.parent / "learning.json").write_text(json.dumps(summary, indent=1))
    print("frames   val/return (mean; per seed)            collection episode_reward_mean (mean; per seed)")
    for row in table:
        if row["frames"] % 60_000 == 0:
            val = row.get("val_per_seed", [])
            col = row.get("collection_per_seed", [])
            print(f"{row['frames']:>8} {row.get('val_mean', float('nan')):7.2f} {[round(v, 1) for v in val]!s:<28} "
                  f"{row.get('collection_mean', float('nan')):7.2f} {[round(v, 1) for v in col]}")
    return summary


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--frames", type=int, default=1_020_000)
    parser.add_argument("--eval-every", type=int, default=5, help="iterations between evaluations")
    parser.add_argument("--summarize", action="store_true")
    args = parser.parse_args()
    if args.summarize:
        summarize()
    else:
        run(args.seed, args.frames, args.eval_every)
