"""Frames per second of MAPPO on vmas/balance with 1 and 2 DDP processes (CPU, gloo), through `lit-marl fit`.

    python benchmarks/ddp.py [--iterations 3] [--processes 1 2]

`configs/mappo_vmas_balance.yaml` (BenchMARL's defaults: 6000 frames and 10 envs per iteration, 45 epochs of
400-frame minibatches), no evaluation, one torch thread per process. frames_per_batch, num_envs and minibatch_size
are global, so both runs do the same work per iteration: 2 processes each collect 3000 frames on 5 envs and train
on 200-frame minibatches whose gradients DDP averages. Wall time includes process start-up; "steady" uses the median
collection + training time per iteration after the first (from metrics.csv). Writes benchmarks/out/ddp.json.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FRAMES = 6000


def run(processes: int, iterations: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as workdir:
        args = [shutil.which("lit-marl") or "lit-marl", "fit", "--config", str(ROOT / "configs/mappo_vmas_balance.yaml"),
                "--model.init_args.max_frames", str(FRAMES * iterations),
                "--trainer.check_val_every_n_epoch", "100000", "--trainer.enable_progress_bar", "false",
                "--trainer.logger.init_args.save_dir", workdir, "--trainer.devices", str(processes),
                "--trainer.accelerator", "cpu"]
        if processes > 1:
            args += ["--trainer.strategy", "ddp"]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        start = time.perf_counter()
        subprocess.run(args, env=env, check=True, capture_output=True, cwd=workdir)
        wall = time.perf_counter() - start
        (metrics,) = Path(workdir).glob("*/version_*/metrics.csv")
        rows = [r for r in csv.DictReader(open(metrics)) if r.get("timers/iteration_time")]
    steady = [float(r["timers/iteration_time"]) for r in rows[1:]] or [float(rows[0]["timers/iteration_time"])]
    return {"processes": processes, "frames": FRAMES * iterations, "seconds": wall, "fps": FRAMES * iterations / wall,
            "steady_s_per_iter": statistics.median(steady), "steady_fps": FRAMES / statistics.median(steady)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    results = [run(p, args.iterations) for p in args.processes]
    base = results[0]
    for result in results:
        result["speedup_whole"] = result["fps"] / base["fps"]
        result["speedup_steady"] = result["steady_fps"] / base["steady_fps"]
    out = Path(__file__).parent / "out"
    out.mkdir(exist_ok=True)
    (out / "ddp.json").write_text(json.dumps({"cpu_count": os.cpu_count(), "runs": results}, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
