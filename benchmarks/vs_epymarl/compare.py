"""The EPyMARL reference's runs (``run.py``) beside lit-marl's, every 50,000 frames or the nearest logged step:
greedy evaluation return (the team's, summed over agents as EPyMARL reports it), the collected return, and the
mixer's team value of the sampled actions with its TD target.

EPyMARL's learner logs ``q_taken_mean`` and ``target_mean`` divided by the number of agents (its sums run over the
agents' copies of the team value); this prints them times ``--agents``, the team value itself, as lit-marl logs it.
lit-marl's returns are means over agents and are printed times ``--agents`` too. Both are in the loss's reward
units (standardised ones where the config standardises rewards)::

    python benchmarks/vs_epymarl/compare.py benchmarks/out/epymarl_qmix_lbf runs/benchmarks/<grid>/<task>/qmix
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import time
from pathlib import Path


def reference_curves(folder: Path) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """Each seed's statistics from ``seed_<n>/results/sacred/*/*/*/info.json``: name -> [(step, value)]."""
    curves = {}
    for info in sorted(folder.glob("seed_*/results/sacred/*/*/*/info.json")):
        seed = info.relative_to(folder).parts[0]
        data = _read_json(info)
        curves[seed] = {name: [(int(t), float(v["value"] if isinstance(v, dict) else v))
                               for t, v in zip(data[name + "_T"], data[name])]
                        for name in data if not name.endswith("_T") and name + "_T" in data}
    return curves


def _read_json(path: Path, tries: int = 5) -> dict:
    """sacred rewrites info.json in place while its run goes on: a read that meets the file half-written waits and
    reads again."""
    for _ in range(tries - 1):
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError:
            time.sleep(0.5)
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        raise SystemExit(f"{path}: not valid JSON after {tries} reads (a run still writing it, or a broken "
                         f"file)") from None


def lit_marl_curves(folder: Path) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """Each seed's iteration rows from ``seed_<n>/train/version_*/metrics.csv`` (or a run folder's own)."""
    curves = {}
    for metrics in sorted(folder.glob("**/metrics.csv")):
        seed = next((p for p in metrics.relative_to(folder).parts if p.startswith("seed_")), metrics.parent.name)
        rows = {}
        with open(metrics) as f:
            for row in csv.DictReader(f):
                if not row.get("counters/frames"):
                    continue
                frames = int(float(row["counters/frames"]))
                for name, value in row.items():
                    if value not in ("", None) and name not in ("counters/frames", "epoch", "step"):
                        rows.setdefault(name, []).append((frames, float(value)))
        curves[seed] = rows
    return curves


def at(points: list[tuple[int, float]], frames: int, window: int, after: int = 50) -> float:
    """The mean of the points logged from ``window`` steps before ``frames`` to ``after`` steps past it (nan if
    none)."""
    near = [v for t, v in points if frames - window < t <= frames + after]
    return sum(near) / len(near) if near else math.nan


def positive_int(text: str) -> int:
    """An argparse type: a whole number above 0 (argparse names the option and the value when it raises)."""
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


positive_int.__name__ = "positive integer"  # what argparse's message calls the type


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reference", type=Path, help="run.py's --out folder")
    parser.add_argument("lit_marl", type=Path, nargs="?", help="a lit-marl run or a grid's algorithm folder")
    parser.add_argument("--agents", type=positive_int, default=2)
    parser.add_argument("--every", type=positive_int, default=250_000, help="frames between printed rows")
    parser.add_argument("--until", type=positive_int, default=2_000_000)
    args = parser.parse_args(argv)
    n = args.agents
    sides = [("EPyMARL ref", reference_curves(args.reference),
              {"eval": ("test_return_mean", 1), "collected": ("return_mean", 1),
               "team value": ("q_taken_mean", n), "target": ("target_mean", n)})]
    if args.lit_marl is not None:
        sides.append(("lit-marl", lit_marl_curves(args.lit_marl),
                      {"eval": ("val/return", n), "collected": ("collection/reward/episode_reward_mean", n),
                       "team value": ("train/agents/q_taken_mean", 1), "target": ("train/agents/target_mean", 1)}))
    print("| side | seed | frames | evaluation return | collected return | team value | its target |")
    print("|---|---|---|---|---|---|---|")
    for frames in range(args.every, args.until + 1, args.every):
        for side, curves, names in sides:
            for seed, curve in curves.items():
                cells = []
                for column in ("eval", "collected", "team value", "target"):
                    name, scale = names[column]
                    # EPyMARL tests at the first episode end past each 50,000 steps (drifting by up to a few
                    # hundred), lit-marl at the iteration that reaches them
                    window, after = (1_000, 1_000) if column == "eval" else (25_000, 50)
                    value = at(curve.get(name, []), frames, window, after) * scale
                    cells.append("—" if math.isnan(value) else f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}")
                print(f"| {side} | {seed} | {frames / 1e6:g}M | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
