"""The benchmark scripts run on CPU with tiny sizes: the prepared device check (benchmarks/gpu.sh), the collection
breakdowns (benchmarks/collection.py, benchmarks/collection_families.py), the files one iteration runs
(benchmarks/iteration_files.py), the weights comparison between versions (benchmarks/weights.py), the learning
curve of a run (benchmarks/curves.py) and the EPyMARL reference's runner and table (benchmarks/vs_epymarl/)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # every stage of benchmarks/gpu.py at tiny sizes: 15-30 s
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


def _script(name: str):
    import importlib.util

    module_name = f"{name.replace('/', '_')}_benchmark"  # name: a script under benchmarks/, e.g. vs_epymarl/run
    spec = importlib.util.spec_from_file_location(module_name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_collection_benchmark_times_every_way_of_stepping_vmas(tmp_path):
    collection = _script("collection")
    out = tmp_path / "collection.json"
    result = collection.main(["--algorithm", "maddpg", "--num-envs", "2", "--steps", "3", "--rounds", "2",
                              "--out", str(out)])
    assert json.loads(out.read_text()) == result
    assert set(result["seconds"]) == {"collector", "hand_loop", "rollout", "policy", "torchrl_env", "raw_vmas",
                                      "raw_batched"}
    assert all(len(times) == 2 and min(times) > 0 for times in result["per_round"].values())
    assert result["batched_resets"] is True
    per_env = collection.main(["--algorithm", "maddpg", "--num-envs", "2", "--steps", "3", "--rounds", "1", "--per-env-resets", "--ways",
                               "torchrl_env", "--out", str(out)])
    assert per_env["batched_resets"] is False and set(per_env["seconds"]) == {"torchrl_env"}


def test_the_family_breakdown_splits_a_collection_by_layer(tmp_path):
    """benchmarks/collection_families.py (issue 33, item 6): shares of the profiled time by layer sum to one, and the
    resets' share is a part of it."""
    families = _script("collection_families")
    out = tmp_path / "families.json"
    result = families.main(["--families", "gymnasium", "lbf", "--steps", "5", "--batches", "1", "--out", str(out)])
    assert json.loads(out.read_text()) == result
    for family in ("gymnasium", "lbf"):
        row = result[family]
        assert row["frames"] == row["num_envs"] * 5 and row["frames_per_s"] > 0
        assert sum(row["shares"].values()) == pytest.approx(1, abs=1e-3) and 0 <= row["resets"] <= 1
    assert result["lbf"]["shares"]["lit_marl"] > 0  # lit-marl's own agent-tuple wrapper is seen as such


def test_the_speed_comparison_times_lit_marls_side_with_either_reset(tmp_path):
    """benchmarks/vs_benchmarl/speed.py's lit-marl side (BenchMARL's needs its venv: run by hand)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("speed", ROOT / "benchmarks" / "vs_benchmarl" / "speed.py")
    speed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(speed)
    for batched in (True, False):
        result = speed.lit_marl_side(4, 5, 1, 10, 2, batched=batched)
        assert result["iterations"] == 2 and result["frames_per_iteration"] == 20
        assert result["collection_s"] > 0 and result["update_s"] > 0
        assert result["side"].endswith("(per-env resets)") != batched


def test_the_weights_comparison_finds_a_one_ulp_difference_and_a_missing_tensor(tmp_path, capsys):
    import torch

    weights = _script("weights")
    a = {"mappo": {"w": torch.ones(3), "b": torch.zeros(2)}}
    b = {"mappo": {"w": torch.ones(3), "b": torch.zeros(2)}}
    torch.save(a, tmp_path / "a.pt")
    torch.save(b, tmp_path / "b.pt")
    assert weights.main(["--compare", str(tmp_path / "a.pt"), str(tmp_path / "b.pt")]) == 0
    assert "mappo: 2 tensors in both, 0 differ" in capsys.readouterr().out
    b["mappo"]["w"][1] = torch.nextafter(torch.tensor(1.0), torch.tensor(2.0))
    torch.save(b, tmp_path / "b.pt")
    assert weights.main(["--compare", str(tmp_path / "a.pt"), str(tmp_path / "b.pt")]) == 1
    assert "1 differ (largest difference 1.19e-07)" in capsys.readouterr().out
    del b["mappo"]["b"]
    torch.save(b, tmp_path / "b.pt")
    assert weights.main(["--compare", str(tmp_path / "a.pt"), str(tmp_path / "b.pt")]) == 1
    assert "1 in one file only: ['b']" in capsys.readouterr().out


def test_the_curve_of_a_run_averages_the_collected_returns_between_evaluations(tmp_path, capsys):
    curves = _script("curves")
    run = tmp_path / "mappo" / "version_0"
    run.mkdir(parents=True)
    header = "counters/frames,timers/iteration_time,collection/reward/episode_reward_mean,val/return"
    rows = ["100,30,0.1,", "200,30,,", "200,,,0.25", "300,60,0.2,", "400,60,0.4,", "400,,,0.5"]
    (run / "metrics.csv").write_text("\n".join([header, *rows]) + "\n")
    out = tmp_path / "curve.json"
    result = curves.main([str(tmp_path / "mappo"), "--scale", "2", "--out", str(out)])
    assert result == [{"frames": 200, "val_return": 0.5, "collected_return": 0.2, "minutes": 1.0},
                      {"frames": 400, "val_return": 1.0, "collected_return": 0.6000000000000001, "minutes": 3.0}]
    assert json.loads(out.read_text()) == result
    assert "| 400 | 1.000 | 0.600 | 3.0 |" in capsys.readouterr().out
    curves.main([str(run), "--every", "5"])  # the last evaluation is always shown
    assert capsys.readouterr().out.splitlines()[2:] == ["| 400 | 0.500 | 0.300 | 3.0 |"]
    (run / "metrics.csv").write_text(header + "\n100,30,0.1,\n")
    with pytest.raises(SystemExit, match="logged no evaluation"):
        curves.main([str(run)])
    with pytest.raises(SystemExit):
        curves.main([str(run), "--scale", "0"])
    assert "--scale: 0.0 is not a positive number" in capsys.readouterr().err


@pytest.mark.parametrize("entry", ["shipped", "one_stream"])
def test_the_one_stream_arm_seeds_the_training_envs_once(entry, tmp_path, monkeypatch):
    """Issue 32 item 3's arm: lit-marl re-seeds at every iteration that starts on episode boundaries (every one
    here: 4 envs × 10 steps, episodes of 10); ``one_stream.py`` seeds at the first collection only."""
    import importlib.util

    from lit_marl.algorithms import MAPPO
    from lit_marl.algorithms import collection
    from lit_marl.algorithms.collection import Sampler
    from tests.helpers.tiny import tiny_kwargs, tiny_task, tiny_trainer

    monkeypatch.setattr(Sampler, "collect", Sampler.collect)  # restored after the test, whatever the import patched
    if entry == "one_stream":
        spec = importlib.util.spec_from_file_location("one_stream", ROOT / "benchmarks" / "vs_benchmarl" /
                                                      "one_stream.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.install()
    seeded = []
    derived = collection.derived_seed
    monkeypatch.setattr(collection, "derived_seed", lambda seed, rank, iteration: seeded.append(iteration) or
                        derived(seed, rank, iteration))
    model = MAPPO(task=tiny_task(), **tiny_kwargs())
    tiny_trainer(tmp_path, max_epochs=3, check_val_every_n_epoch=100).fit(model)
    assert seeded == ([0, 1, 2] if entry == "shipped" else [0])


def test_the_reseeding_table_compares_the_two_arms_over_seeds(tmp_path, monkeypatch):
    reseeding = _script("reseeding")
    monkeypatch.setattr(reseeding, "OUT", tmp_path)
    for arm, finals in (("shipped", [1.0, 2.0, 3.0]), ("one_stream", [2.0, 3.0, 4.0])):
        for seed, after in enumerate(finals):
            (tmp_path / f"qmix_{arm}_seed{seed}.json").write_text(json.dumps(
                {"algorithm": "qmix", "seed": seed, "arm": arm, "before": -1.0, "after": after, "iterations": 18,
                 "reseeded_iterations": list(range(18 if arm == "shipped" else 1))}))
    result = reseeding.main(["table", "--algorithm", "qmix"])
    assert result["shipped"]["reseeds"] == [18, 18, 18] and result["one_stream"]["reseeds"] == [1, 1, 1]
    assert result["difference"]["mean_difference"]["value"] == pytest.approx(1.0)
    assert json.loads((tmp_path / "qmix_table.json").read_text())["one_stream"]["after"] == [2.0, 3.0, 4.0]


def test_one_mappo_iteration_runs_the_loops_code_in_six_files():
    """benchmarks/iteration_files.py (issue 35 item 1): what one MAPPO iteration calls of lit-marl, apart from the
    task's envs, the networks and three helper modules called by name, lives in the loop, the collection, the PPO
    learner and its base, the run and the callbacks (6 files with callbacks/ as one)."""
    module = _script("iteration_files")
    functions = module.files_of_one_iteration("mappo")
    helpers = {"distributed.py", "lightning_adapter.py", "utils.py"}
    own = {f.split("/")[0] if f.startswith("callbacks/") else f for f in functions
           if not f.startswith(module.STEPPED) and f not in helpers}
    assert own == {"algorithms/loops.py", "algorithms/collection.py", "algorithms/ppo.py", "algorithms/learner.py",
                   "algorithms/base.py", "callbacks"}
    assert "clip_per_loss" in functions["algorithms/learner.py"]  # the clipping ran, where the learners are
    assert {"Sampler.collect", "Collection.collect"} <= functions["algorithms/collection.py"]


@pytest.mark.slow  # the script at its own sizes (two 6,000-frame VMAS collections): 40-80 s
def test_the_levers_benchmark_times_each_lever_and_gae_with_one_critic_call_or_two(tmp_path, monkeypatch):
    """benchmarks/levers.py (issues 13 and 33): every variant and PPO's GAE both ways get a time, and the one-call
    path is put back afterwards."""
    import json
    import sys

    from lit_marl.algorithms import ppo

    levers = _script("levers")
    one_call = ppo.state_values_in_one_call
    monkeypatch.setattr(sys, "argv", ["levers.py", "--algorithm", "mappo", "--steps", "1", "--rounds", "1",
                                      "--gae-envs", "4", "--out", str(tmp_path)])
    levers.main()
    times = json.loads((tmp_path / "levers_mappo.json").read_text())["ms_per_step"]
    assert {"all levers", "none (as before)", "GAE on 4 envs x 100 steps, one critic call",
            "GAE on 4 envs x 100 steps, torchrl's two calls"} <= set(times)
    assert all(t > 0 for t in times.values())
    assert ppo.state_values_in_one_call is one_call


def test_the_epymarl_comparison_puts_the_reference_team_value_on_lit_marls_scale(tmp_path, capsys):
    """EPyMARL logs its team value and target divided by the number of agents and its returns summed over them;
    lit-marl logs the team value itself and returns averaged over agents: the table puts both on one scale."""
    info = tmp_path / "ref" / "seed_0" / "results" / "sacred" / "qmix" / "lbforaging:X" / "1" / "info.json"
    info.parent.mkdir(parents=True)
    info.write_text(json.dumps({
        "test_return_mean": [0.0, 0.5], "test_return_mean_T": [50, 250153],  # tested at an episode end
        "return_mean": [0.25, 0.75], "return_mean_T": [240050, 250050],
        "q_taken_mean": [{"value": 3.0, "dtype": "float"}], "q_taken_mean_T": [241600],
        "target_mean": [2.5], "target_mean_T": [241600]}))
    run = tmp_path / "lit" / "seed_0" / "train" / "version_0"
    run.mkdir(parents=True)
    (run / "metrics.csv").write_text(
        "counters/frames,val/return,collection/reward/episode_reward_mean,train/agents/q_taken_mean,"
        "train/agents/target_mean\n"
        "249500,,0.125,1.5,1.25\n250000,0.2,0.375,2.5,2.25\n")
    assert _script("vs_epymarl/compare").main([str(tmp_path / "ref"), str(tmp_path / "lit"), "--until", "250000"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if "0.25M" in line]
    assert rows == ["| EPyMARL ref | seed_0 | 0.25M | 0.500 | 0.500 | 6.000 | 5.000 |",
                    "| lit-marl | seed_0 | 0.25M | 0.400 | 0.500 | 2.000 | 1.750 |"]


def test_the_epymarl_runner_refuses_a_missing_venv_and_a_seed_it_would_overwrite(tmp_path, capsys):
    run = _script("vs_epymarl/run")
    with pytest.raises(SystemExit):
        run.main(["--out", str(tmp_path / "out"), "--venv", str(tmp_path / "none")])
    assert "--venv" in capsys.readouterr().err
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text("")
    (tmp_path / "out" / "seed_1").mkdir(parents=True)
    with pytest.raises(SystemExit):
        run.main(["--out", str(tmp_path / "out"), "--venv", str(tmp_path / "venv"), "--seeds", "0", "1"])
    assert "seed_1 exists" in capsys.readouterr().err
    assert not (tmp_path / "out" / "seed_0").exists()  # refused before anything was started
    with pytest.raises(SystemExit):
        run.main(["--out", str(tmp_path / "new"), "--venv", str(tmp_path / "venv"), "lr0.001"])
    assert "'lr0.001' is not key=value" in capsys.readouterr().err
    # issue 48: repeated and negative seeds, and steps that are not positive, named before anything starts
    for args, words in ((["--seeds", "0", "0"], "--seeds: [0, 0] repeats 0"), (["--seeds", "-1"], "negative seed"),
                        (["--t-max", "0"], "--t-max: 0; allowed"), (["--time-limit", "-5"], "--time-limit: -5")):
        with pytest.raises(SystemExit):
            run.main(["--out", str(tmp_path / "new"), "--venv", str(tmp_path / "venv"), *args])
        assert words in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_the_epymarl_table_refuses_rows_every_zero_frames(tmp_path, capsys):
    compare = _script("vs_epymarl/compare")
    for option in ("--every", "--until", "--agents"):
        with pytest.raises(SystemExit):
            compare.main([str(tmp_path), option, "0"])
        assert f"argument {option}: invalid positive integer value: '0'" in capsys.readouterr().err
