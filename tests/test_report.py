"""Benchmark statistics and ``lit-marl report``: known IQM and CIs on fixed synthetic scores, probability of
improvement, performance profiles, and the report files; mismatched runs are refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lit_marl.cli import main
from lit_marl.errors import ConfigError
from lit_marl.evaluation import statistics as st
from lit_marl.evaluation.results import compute, load_runs

#: 5 runs × 3 tasks of normalised scores
SCORES = np.array([[0.10, 0.55, 0.90],
                   [0.20, 0.60, 0.35],
                   [0.35, 0.70, 0.80],
                   [0.40, 0.20, 0.95],
                   [0.05, 0.65, 0.50]])


def _oracle_stratified_ci(scores, statistic, resamples=20_000, seed=1):
    """A plain stratified percentile bootstrap (each task's runs resampled on their own), as the reference."""
    rng = np.random.default_rng(seed)
    runs, tasks = scores.shape
    picks = rng.integers(0, runs, size=(resamples, runs, tasks))
    resampled = np.take_along_axis(np.broadcast_to(scores, (resamples, runs, tasks)), picks, axis=1)
    values = statistic(resampled.reshape(resamples, -1))
    return np.percentile(values, [2.5, 97.5])


def test_iqm_and_its_stratified_ci_match_known_values():
    flat = np.sort(SCORES.ravel())
    assert st.iqm(SCORES.ravel()) == pytest.approx(flat[3:12].mean())  # 15 scores: 3 trimmed off each end
    assert flat[3:12].tolist() == pytest.approx([0.2, 0.35, 0.35, 0.4, 0.5, 0.55, 0.6, 0.65, 0.7])
    result = st.aggregate_metrics(SCORES, n_resamples=20_000, seed=0)
    assert result["iqm"]["value"] == pytest.approx(4.3 / 9)
    low, high = _oracle_stratified_ci(SCORES, lambda x: st.iqm(x, axis=-1))
    assert result["iqm"]["ci_low"] == pytest.approx(low, abs=0.01)
    assert result["iqm"]["ci_high"] == pytest.approx(high, abs=0.01)
    assert result["mean"]["value"] == pytest.approx(SCORES.mean())
    low, high = _oracle_stratified_ci(SCORES, lambda x: x.mean(-1))
    assert (result["mean"]["ci_low"], result["mean"]["ci_high"]) == (pytest.approx(low, abs=0.01),
                                                                      pytest.approx(high, abs=0.01))
    assert result["optimality_gap"]["value"] == pytest.approx(1 - SCORES.mean())
    assert result["median"]["value"] == pytest.approx(np.median(SCORES))
    # reproducible: the same seed gives the same interval
    assert st.aggregate_metrics(SCORES, n_resamples=20_000, seed=0) == result


def test_probability_of_improvement_and_performance_profile():
    better = st.probability_of_improvement(SCORES + 1.0, SCORES, n_resamples=500)
    assert better == {"value": 1.0, "ci_low": 1.0, "ci_high": 1.0}
    same = st.probability_of_improvement(SCORES, SCORES, n_resamples=500)
    assert same["value"] == pytest.approx(0.5) and same["ci_low"] < 0.5 < same["ci_high"]
    # task 0: x = [1, 2], y = [2, 3]: pairs x > y: 0 of 4, ties: 1 of 4 → 0.125
    x, y = np.array([[1.0], [2.0]]), np.array([[2.0], [3.0]])
    assert st.probability_of_improvement(x, y, n_resamples=200)["value"] == pytest.approx(0.125)
    profile = st.performance_profile(SCORES, np.array([0.0, 0.5, 1.0]), n_resamples=500)
    assert profile["value"] == pytest.approx([1.0, 7 / 15, 0.0])  # 7 of 15 scores exceed 0.5


def test_paired_difference_ci_excludes_zero_only_when_one_is_better():
    rng = np.random.default_rng(0)
    b = rng.normal(size=200)
    clear = st.paired_difference(b + 0.5 + 0.1 * rng.normal(size=200), b)
    assert clear["mean_difference"]["ci_low"] > 0.4 and clear["a_better_fraction"] > 0.99
    noise = st.paired_difference(b + 0.1 * rng.normal(size=200), b)
    assert noise["mean_difference"]["ci_low"] < 0 < noise["mean_difference"]["ci_high"]


def _marl_eval(path: Path, task: str, algorithm: str, seed: int, curve: list[float]) -> None:
    steps = {f"step_{k}": {"step_count": 100 * (k + 1), "return": [v - 0.5, v + 0.5], "agents_return": [v, v]}
             for k, v in enumerate(curve)}
    steps["absolute_metrics"] = {"step_count": 100 * len(curve), "return": [curve[-1]] * 20}
    path.mkdir(parents=True, exist_ok=True)
    (path / "marl_eval.json").write_text(json.dumps({"vmas": {task: {algorithm: {f"seed_{seed}": steps}}}}))


def _synthetic_benchmark(root: Path, seeds=(0, 1, 2)) -> None:
    for task, scale in (("balance", 10.0), ("navigation", 1.0)):
        for algorithm, final in (("mappo", 0.8), ("ippo", 0.5)):
            for seed in seeds:
                end = scale * (final + 0.05 * seed)
                _marl_eval(root / task / algorithm / f"seed_{seed}", task, algorithm, seed, [0.0, end / 2, end])


def test_report_writes_tables_and_plots(tmp_path, capsys):
    _synthetic_benchmark(tmp_path / "bench")
    main(["report", str(tmp_path / "bench"), "--out", str(tmp_path / "report"), "--n_resamples", "500"])
    out = tmp_path / "report"
    assert sorted(p.name for p in out.iterdir()) == [
        "aggregate_metrics.png", "performance_profile.png", "report.json", "report.md", "report.tex",
        "sample_efficiency.png", "task_curves.png"]
    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result = json.loads((out / "report.json").read_text())
    assert result["tasks"] == ["vmas/balance", "vmas/navigation"] and result["seeds"] == [0, 1, 2]
    # per task, raw: mappo on balance scores 8.0, 8.5, 9.0
    assert result["per_task"]["vmas/balance"]["mappo"]["mean"]["value"] == pytest.approx(8.5)
    # normalised per task by min (ippo seed 0) and max (mappo seed 2): every task maps alike
    assert result["scores"]["ippo"][0] == pytest.approx([5.0, 0.5])
    assert result["aggregate"]["mappo"]["mean"]["value"] == pytest.approx((3.0 + 3.5 + 4.0) / 4.0 / 3)  # (8, 8.5, 9 - 5) / 4
    assert result["probability_of_improvement"]["mappo > ippo"]["value"] == 1.0
    assert result["sample_efficiency"]["mappo"]["frames"] == [100, 200, 300]
    markdown = (out / "report.md").read_text()
    assert "| mappo |" in markdown and "| vmas/balance | mappo | 8.500 [" in markdown
    assert "\\begin{tabular}" in (out / "report.tex").read_text()
    assert "Aggregate" in capsys.readouterr().out

    with pytest.raises(SystemExit) as exit_info:  # never over an earlier report
        main(["report", str(tmp_path / "bench"), "--out", str(out)])
    assert exit_info.value.code == 2 and "already exists" in capsys.readouterr().err


def test_report_over_mismatched_runs_names_the_missing_ones(tmp_path):
    _synthetic_benchmark(tmp_path / "bench")
    _marl_eval(tmp_path / "bench" / "balance" / "mappo" / "seed_3", "balance", "mappo", 3, [1.0, 2.0, 3.0])
    _marl_eval(tmp_path / "bench" / "sampling" / "ippo" / "seed_0", "sampling", "ippo", 0, [1.0, 2.0, 3.0])
    with pytest.raises(ConfigError) as err:
        compute(load_runs([tmp_path / "bench"]))
    message = str(err.value)
    for missing in ("vmas/balance / ippo / seed 3", "vmas/navigation / mappo / seed 3", "vmas/sampling / mappo / seed 0",
                    "vmas/sampling / ippo / seed 1"):
        assert missing in message
    assert "vmas/balance / mappo / seed 3" not in message


def _run_folder(path: Path, class_path: str, seed: int, returns: list[float], first_frames: int = 100) -> None:
    path.mkdir(parents=True)
    task = {"class_path": "lit_marl.envs.VmasTask", "init_args": {"scenario": "balance", "max_steps": 10}}
    (path / "config.yaml").write_text(json.dumps({"seed_everything": seed,
                                                  "model": {"class_path": class_path, "init_args": {"task": task}}}))
    rows = ["counters/frames,epoch,val/return"]
    rows += [f"{first_frames + 100 * k},{k},{r}" for k, r in enumerate(returns)]
    (path / "metrics.csv").write_text("\n".join(rows) + "\n")


def test_report_reads_plain_run_folders_and_merges_resumes(tmp_path):
    _run_folder(tmp_path / "runs" / "a" / "version_0", "lit_marl.algorithms.MAPPO", 0, [1.0, 2.0])
    _run_folder(tmp_path / "runs" / "a" / "version_1", "lit_marl.algorithms.MAPPO", 0, [3.0], first_frames=300)
    _run_folder(tmp_path / "runs" / "a" / "version_2", "lit_marl.algorithms.MAPPO", 1, [0.5, 1.5, 2.5])
    _run_folder(tmp_path / "runs" / "b" / "version_0", "lit_marl.algorithms.IPPO", 0, [1.0, 1.0, 1.0])
    _run_folder(tmp_path / "runs" / "b" / "version_1", "lit_marl.algorithms.IPPO", 1, [0.0, 0.0, 0.0])
    runs = load_runs([tmp_path / "runs"])
    mappo_0 = runs["vmas/balance"]["mappo"][0]
    assert [mappo_0[f"step_{k}"]["step_count"] for k in range(3)] == [100, 200, 300]  # version_1 resumed version_0
    result = compute(runs, n_resamples=200)
    assert result["scores"] == {"ippo": [[1.0], [0.0]], "mappo": [[3.0], [2.5]]}
    assert result["sample_efficiency"]["mappo"]["frames"] == [100, 200, 300]
