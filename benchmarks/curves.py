"""The learning curve of one ``lit-marl fit`` run, read from its metrics.csv, as a Markdown table: at each evaluation,
the frames, the evaluation return (``val/return``), the mean return of the episodes collected since the previous
evaluation (training episodes, sampled actions) and the wall-clock minutes of the training iterations so far
(collection and update; evaluations not counted).

Both returns are lit-marl's: each group's mean over its agents, averaged over groups. Where a paper reports the team's
return summed over agents (EPyMARL on LBF and RWARE), ``--scale`` multiplies both by the number of agents; where every
agent gets the team's reward (MaMuJoCo), the mean over agents already is the team's return.

    python benchmarks/curves.py RUN_FOLDER [--scale 2] [--every 4] [--out curve.json]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path


def metrics_file(run: Path) -> Path:
    """``run`` may be a metrics.csv, a ``version_<n>`` folder or a logger folder holding one version."""
    if run.is_file():
        return run
    if (run / "metrics.csv").is_file():
        return run / "metrics.csv"
    found = sorted(run.glob("*/metrics.csv")) or sorted(run.glob("*/*/metrics.csv"))
    if len(found) != 1:
        raise SystemExit(f"run: {run} holds {len(found)} metrics.csv files below it; allowed: exactly one "
                         "(name the version_<n> folder)")
    return found[0]


def curve(metrics: Path, scale: float = 1.0) -> list[dict]:
    """One row per evaluation: frames, evaluation return, mean collected return since the last one, minutes."""
    with open(metrics, newline="") as f:
        logged = list(csv.DictReader(f))
    rows, seconds, frames, collected = [], 0.0, 0, []
    for row in logged:
        if row.get("counters/frames"):
            frames = int(float(row["counters/frames"]))
        if row.get("timers/iteration_time"):
            seconds += float(row["timers/iteration_time"])
        if row.get("collection/reward/episode_reward_mean"):
            collected.append(float(row["collection/reward/episode_reward_mean"]))
        if row.get("val/return"):
            rows.append({"frames": frames, "val_return": scale * float(row["val/return"]),
                         "collected_return": scale * sum(collected) / len(collected) if collected else math.nan,
                         "minutes": seconds / 60})
            collected = []
    return rows


def table(rows: list[dict], every: int = 1) -> str:
    shown = rows[every - 1::every]
    if rows and (not shown or shown[-1] is not rows[-1]):
        shown.append(rows[-1])  # always the last evaluation
    lines = ["| frames | evaluation return | collected return (since the last evaluation) | training minutes |",
             "|---|---|---|---|"]
    lines += [f"| {r['frames']:,} | {r['val_return']:.3f} | {r['collected_return']:.3f} | {r['minutes']:.1f} |"
              for r in shown]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a run's metrics.csv, version_<n> folder or logger folder")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply returns by this (e.g. the agent count)")
    parser.add_argument("--every", type=int, default=1, help="print every n-th evaluation (and the last)")
    parser.add_argument("--out", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    if not math.isfinite(args.scale) or args.scale <= 0:
        parser.error(f"--scale: {args.scale} is not a positive number")
    if args.every < 1:
        parser.error(f"--every: {args.every} is not a positive integer")
    rows = curve(metrics_file(args.run), args.scale)
    if not rows:
        raise SystemExit(f"run: {args.run} logged no evaluation (no val/return in its metrics.csv)")
    print(table(rows, args.every))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    main()
