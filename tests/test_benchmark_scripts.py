"""The benchmark scripts run end to end on CPU with tiny sizes: the prepared device check (benchmarks/gpu.sh) and
the collection breakdown (benchmarks/collection.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_gpu_script_runs_on_cpu_with_tiny_sizes_and_writes_its_numbers(tmp_path):
    out = tmp_path / "gpu.json"
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu.sh"), "--tiny", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    assert [(r["envs"], r["frames_per_iteration"], r["compile"]) for r in results] == [(4, 20, False), (8, 40, False)]
    for r in results:
        assert r["iterations"] == 2 and r["device"] == "cpu"
        assert r["whole_run_fps"] > 0 and r["steady_fps"] >= r["whole_run_fps"]
        assert 0 < r["update_share"] < 1
    assert "compile=off" in done.stdout


def test_the_collection_benchmark_times_every_way_of_stepping_vmas(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("collection_benchmark", ROOT / "benchmarks" / "collection.py")
    collection = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(collection)
    out = tmp_path / "collection.json"
    result = collection.main(["--algorithm", "maddpg", "--num-envs", "2", "--steps", "3", "--rounds", "2",
                              "--out", str(out)])
    assert json.loads(out.read_text()) == result
    assert set(result["seconds"]) == {"collector", "hand_loop", "rollout", "policy", "torchrl_env", "raw_vmas"}
    assert all(len(times) == 2 and min(times) > 0 for times in result["per_round"].values())
