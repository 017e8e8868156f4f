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



def test_independent_difference_resamples_each_side_on_its_own():
    a, b = np.array([1.0, 2.0, 6.0]), np.array([0.0, 1.0])
    result = st.independent_difference(a, b, n_resamples=20_000)
    assert result["mean_difference"]["value"] == pytest.approx(3.0 - 0.5)
    # 6 pairs: 1 beats 0 and ties 1 (a half), 2 and 6 beat both
    assert result["probability_a_better"] == pytest.approx((1 + 0.5 + 2 + 2) / 6)
    rng = np.random.default_rng(1)  # the oracle: each side resampled with replacement on its own
    picks_a, picks_b = rng.integers(0, 3, (20_000, 3)), rng.integers(0, 2, (20_000, 2))
    low, high = np.percentile(a[picks_a].mean(-1) - b[picks_b].mean(-1), [2.5, 97.5])
    assert result["mean_difference"]["ci_low"] == pytest.approx(low, abs=0.1)
    assert result["mean_difference"]["ci_high"] == pytest.approx(high, abs=0.1)
    # unequal sizes are fine (unlike pairs); an empty side is refused by name
    assert st.independent_difference(a, np.array([5.0]))["runs"] == [3, 1]
    with pytest.raises(ConfigError, match="runs: .*non-empty"):
        st.independent_difference(a, [])

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
    main(["report", str(tmp_path / "bench"), "--out", str(tmp_path / "report"), "--n_resamples", "500",
          "--normalisation", "run-scores"])
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
    assert result["normalisation"]["name"] == "run-scores"
    assert result["aggregate"]["mappo"]["mean"]["value"] == pytest.approx((3.0 + 3.5 + 4.0) / 4.0 / 3)  # (8, 8.5, 9 - 5) / 4
    assert result["probability_of_improvement"]["mappo > ippo"]["value"] == 1.0
    assert result["sample_efficiency"]["mappo"]["frames"] == [100, 200, 300]
    markdown = (out / "report.md").read_text()
    assert "| mappo |" in markdown and "| vmas/balance | mappo | 8.500 [" in markdown
    assert "Normalisation `run-scores`: per task, by the lowest and highest score of any run" in markdown
    assert "\\begin{tabular}" in (out / "report.tex").read_text()
    assert "% Normalisation run-scores:" in (out / "report.tex").read_text()
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


def _run_folder(path: Path, class_path: str, seed: int, returns: list[float], first_frames: int = 100,
                **init_args) -> None:
    path.mkdir(parents=True)
    task = {"class_path": "lit_marl.envs.VmasTask", "init_args": {"scenario": "balance", "max_steps": 10}}
    (path / "config.yaml").write_text(json.dumps({"seed_everything": seed, "model": {
        "class_path": class_path, "init_args": {"task": task, **init_args}}}))
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
    # no run config says otherwise: the algorithms' default, the greedy policy
    assert {result["per_task"]["vmas/balance"][a]["evaluation"] for a in ("mappo", "ippo")} == {"greedy"}


def test_the_report_says_how_each_algorithm_evaluated_and_warns_when_runs_differ(tmp_path):
    """Issue 36 item 2: greedy against sampled evaluation is not like-for-like; the report shows each run's mode
    (its config's ``evaluation_deterministic``, a benchmark run's ``run_config.yaml`` beside its marl_eval.json) and
    says so where they differ."""
    from lit_marl.evaluation.results import evaluation_note, latex, markdown

    for seed in (0, 1):
        _run_folder(tmp_path / "runs" / f"mappo_{seed}", "lit_marl.algorithms.MAPPO", seed, [1.0, 2.0],
                    evaluation_deterministic=False)
        _run_folder(tmp_path / "runs" / f"qmix_{seed}", "lit_marl.algorithms.QMIX", seed, [1.0, 3.0],
                    evaluation_deterministic=True)
    result = compute(load_runs([tmp_path / "runs"]), n_resamples=100)
    assert result["per_task"]["vmas/balance"]["mappo"]["evaluation"] == "sampled"
    assert result["per_task"]["vmas/balance"]["qmix"]["evaluation"] == "greedy"
    assert "Not like-for-like" in evaluation_note(result) and "greedy, sampled" in evaluation_note(result)
    text = markdown(result)
    assert "| vmas/balance | mappo | " in text and text.split("| vmas/balance | mappo | ")[1].split("\n")[0].endswith(
        "| sampled |")
    assert "**Not like-for-like" in text and "& sampled \\\\" in latex(result)

    # a resume that changed the mode makes that run "mixed"
    _run_folder(tmp_path / "runs" / "mappo_0b", "lit_marl.algorithms.MAPPO", 0, [4.0], first_frames=300,
                evaluation_deterministic=True)
    result = compute(load_runs([tmp_path / "runs"]), n_resamples=100)
    assert result["per_task"]["vmas/balance"]["mappo"]["evaluation"] == "mixed"

    # marl-eval JSON: the mode from the run_config.yaml beside it; without one it is not recorded
    bench = tmp_path / "bench"
    _synthetic_benchmark(bench, seeds=(0, 1))
    for seed in (0, 1):
        for task in ("balance", "navigation"):
            (bench / task / "mappo" / f"seed_{seed}" / "run_config.yaml").write_text(json.dumps(
                {"model": {"class_path": "lit_marl.algorithms.MAPPO",
                           "init_args": {"evaluation_deterministic": False}}}))
    result = compute(load_runs([bench]), n_resamples=100)
    assert result["per_task"]["vmas/navigation"]["mappo"]["evaluation"] == "sampled"
    assert result["per_task"]["vmas/navigation"]["ippo"]["evaluation"] == "not recorded"
    assert "Not like-for-like" in evaluation_note(result)
    plain = tmp_path / "plain"
    _synthetic_benchmark(plain, seeds=(0, 1))
    assert "is not recorded" in evaluation_note(compute(load_runs([plain]), n_resamples=100))


# ------------------------------------------------------------------------ marl-eval's normalisation
#: a fixed marl-eval JSON: 3 VMAS tasks × mappo, ippo × 3 seeds, 3 evaluations of 4 episodes and absolute metrics of
#: 8; on navigation one step lowers the minimum and holds the largest return, and one transport run lists its
#: absolute metrics first (BenchMARL's order)
MARL_EVAL_RUNS = Path(__file__).parents[1] / "fixtures" / "marl_eval_runs.json"


def _marl_eval_matrices(raw: dict, env: str) -> tuple[dict, dict]:
    """marl-eval's procedure (data_process_pipeline, then create_matrices_for_rliable, for the metric "return"), as
    its README and source describe it, written out independently of lit-marl: keys lower-cased; per task a
    global min and max over the ``return`` list of every step of every run (absolute metrics included), walked in
    the JSON's order with ``if new min: set min / elif new max: set max``; each episode normalised by
    ``(x - min) / (max - min + 1e-6)``, ``mean_norm_return`` the mean of a step's list; ``[runs, tasks]`` of the
    absolute step, ``[runs, tasks, steps]`` of the others (runs and steps in the first run's order)."""
    def lower(d):
        return {k.lower(): lower(v) for k, v in d.items()} if isinstance(d, dict) else d

    data = lower(raw)[env]
    mean_norm: dict = {}
    for task, algorithms in data.items():
        info = None
        for runs in algorithms.values():
            for steps in runs.values():
                for metrics in steps.values():
                    low, high = np.min(metrics["return"]), np.max(metrics["return"])
                    if info is None:
                        info = [low, high]
                    elif info[0] > low:
                        info[0] = low
                    elif info[1] < high:
                        info[1] = high
        for algorithm, runs in algorithms.items():
            for run, steps in runs.items():
                for step, metrics in steps.items():
                    normed = (np.array(metrics["return"]) - info[0]) / (info[1] - info[0] + 1e-6)
                    mean_norm[task, algorithm, run, step] = np.mean(normed)
    tasks = list(data)
    algorithms = list(data[tasks[0]])
    runs = list(data[tasks[0]][algorithms[0]])
    steps = list(data[tasks[0]][algorithms[0]][runs[0]])
    absolute = next(s for s in steps if "absolute" in s)
    steps.remove(absolute)
    scores = {a: np.array([[mean_norm[t, a, r, absolute] for t in tasks] for r in runs]) for a in algorithms}
    curves = {a: np.array([[[mean_norm[t, a, r, s] for s in steps] for t in tasks] for r in runs])
              for a in algorithms}
    return scores, curves


def _check_against(result: dict, scores: dict, curves: dict) -> None:
    from scipy.stats import trim_mean

    for algorithm, matrix in scores.items():
        assert np.array(result["normalised_scores"][algorithm]) == pytest.approx(matrix, rel=1e-12, abs=1e-12)
        aggregate = result["aggregate"][algorithm]
        assert aggregate["iqm"]["value"] == pytest.approx(trim_mean(matrix, 0.25, axis=None), rel=1e-12)  # rliable
        assert aggregate["mean"]["value"] == pytest.approx(matrix.mean(), rel=1e-12)
        assert aggregate["median"]["value"] == pytest.approx(np.median(matrix), rel=1e-12)
        assert aggregate["optimality_gap"]["value"] == pytest.approx(1 - np.minimum(matrix, 1).mean(), rel=1e-12)
        tensor = curves[algorithm]
        expected = [trim_mean(tensor[:, :, k], 0.25, axis=None) for k in range(tensor.shape[2])]
        assert result["sample_efficiency"][algorithm]["value"] == pytest.approx(expected, rel=1e-12)


def test_marl_eval_normalisation_equals_marl_eval_s_matrices_and_iqm(tmp_path, capsys):
    raw = json.loads(MARL_EVAL_RUNS.read_text())
    main(["report", str(MARL_EVAL_RUNS), "--out", str(tmp_path / "report"), "--n_resamples", "200"])  # the default
    result = json.loads((tmp_path / "report" / "report.json").read_text())
    assert result["tasks"] == ["vmas/balance", "vmas/navigation", "vmas/transport"]
    assert result["seeds"] == [0, 1, 2] and result["algorithms"] == ["ippo", "mappo"]
    scores, curves = _marl_eval_matrices(raw, "vmas")
    _check_against(result, scores, curves)

    normalisation = result["normalisation"]
    assert normalisation["name"] == "marl-eval" and normalisation["epsilon"] == 1e-6
    assert normalisation["low"] == [10.48, -0.75, -4.331]  # the smallest episode return of each task
    # navigation: the step that set the minimum also held the largest return (3.9); marl-eval's maximum stays below
    navigation = [x for runs in raw["vmas"]["navigation"].values() for run in runs.values() for step in run.values()
                  for x in step["return"] if x != 3.9]
    assert normalisation["high"][1] == max(navigation) < 3.9
    assert normalisation["high"][0] == 39.118 and normalisation["high"][2] == 18.589
    assert len(normalisation["notes"]) == 1 and normalisation["notes"][0].startswith("vmas/navigation: marl-eval's max")
    out = capsys.readouterr().out
    assert "Normalisation `marl-eval`: as marl-eval computes it (data_process_pipeline): per task, by the lowest" in out
    assert "- vmas/navigation: marl-eval's maximum" in out


def test_marl_eval_normalisation_equals_marl_eval_itself(tmp_path):
    """Against marl-eval's own code (``pip install --no-deps id-marl-eval`` plus numpy and colorama)."""
    processing = pytest.importorskip("marl_eval.utils.data_processing_utils")
    import copy

    raw = json.loads(MARL_EVAL_RUNS.read_text())
    processed = processing.data_process_pipeline(raw_data=copy.deepcopy(raw), metrics_to_normalize=["return"])
    assert "extra" in processed  # marl-eval returns the raw data unprocessed when it fails
    matrices, tensors = processing.create_matrices_for_rliable(
        data_dictionary=processed, environment_name="vmas", metrics_to_normalize=["return"])
    scores, curves = matrices["mean_norm_return"], tensors["mean_norm_return"]
    # the transcription the other test relies on is marl-eval's
    mine = _marl_eval_matrices(raw, "vmas")
    for algorithm in scores:
        assert scores[algorithm] == pytest.approx(mine[0][algorithm], rel=1e-12)
        assert curves[algorithm] == pytest.approx(mine[1][algorithm], rel=1e-12)
    _check_against(compute(load_runs([MARL_EVAL_RUNS]), n_resamples=200), scores, curves)


def test_marl_eval_normalisation_of_runs_without_absolute_metrics_says_so(tmp_path):
    _run_folder(tmp_path / "runs" / "a" / "version_0", "lit_marl.algorithms.MAPPO", 0, [1.0, 2.0])
    _run_folder(tmp_path / "runs" / "b" / "version_0", "lit_marl.algorithms.IPPO", 0, [0.0, 4.0])
    result = compute(load_runs([tmp_path / "runs"]), n_resamples=200)
    assert result["normalisation"]["low"] == [0.0] and result["normalisation"]["high"] == [4.0]
    assert result["normalised_scores"]["mappo"][0][0] == pytest.approx(2.0 / (4.0 + 1e-6))
    assert result["normalisation"]["notes"] == [
        "2 runs have no absolute_metrics and are scored by their last evaluation (marl-eval would refuse them)"]


# ------------------------------------------------------------------------------- reference normalisation
def test_reference_file_puts_runs_on_its_scale(tmp_path):
    _synthetic_benchmark(tmp_path / "bench")
    reference = tmp_path / "reference.json"
    reference.write_text(json.dumps({"vmas/balance": {"min": 0.0, "max": 20.0},
                                     "VMAS/Navigation": {"min": -1, "max": 1}, "vmas/other": {"min": 0, "max": 1}}))
    result = compute(load_runs([tmp_path / "bench"]), n_resamples=200, normalisation=str(reference))
    assert result["normalisation"]["name"] == "reference" and result["normalisation"]["source"] == str(reference)
    assert result["normalisation"]["low"] == [0.0, -1.0] and result["normalisation"]["high"] == [20.0, 1.0]
    # mappo seed 0: 20 absolute returns of 8.0 on balance, 0.8 on navigation
    assert result["normalised_scores"]["mappo"][0] == pytest.approx([8.0 / (20 + 1e-6), 1.8 / (2 + 1e-6)])
    assert result["normalisation"]["notes"] == []
    inline = compute(load_runs([tmp_path / "bench"]), n_resamples=200, normalisation=reference.read_text())
    assert inline["normalised_scores"] == result["normalised_scores"]  # the JSON given as text

    # a marl-eval JSON as the reference: its per-task min and max, marl-eval's way
    published = json.loads(MARL_EVAL_RUNS.read_text())
    published["vmas"]["navigation"] = published["vmas"]["balance"]
    (tmp_path / "published.json").write_text(json.dumps(published))
    result = compute(load_runs([tmp_path / "bench"]), n_resamples=200, normalisation=str(tmp_path / "published.json"))
    assert result["normalisation"]["low"] == [10.48, 10.48] and result["normalisation"]["high"] == [39.118, 39.118]


@pytest.mark.parametrize("content, message", [
    ("{not json", "is not JSON"),
    ("[]", "is not a non-empty JSON object"),
    ('{"vmas/balance": {"min": 0, "max": 1}}', "has no minimum and maximum for vmas/navigation (it has vmas/balance)"),
    ('{"vmas/balance": {"min": 1, "max": 1}, "vmas/navigation": {"min": 0, "max": 1}}', "max 1 is not above min 1"),
    ('{"vmas/balance": {"min": 0, "max": "9"}, "vmas/navigation": {"min": 0, "max": 1}}', "must be finite numbers"),
    ('{"vmas/balance": {"low": 0, "high": 1}}', "exactly 'min' and 'max'"),
    ('{"vmas/balance": {"min": 0, "max": 1}, "vmas": {}}', "mixes '<env>/<task>' keys with other keys"),
    ('{"vmas": {"balance": {"mappo": {"seed_0": {"step_0": {"return": "high"}}}}}}', "'return' must be a list"),
    ('{"vmas": {"balance": [1, 2]}}', "is not an object {algorithm:"),
])
def test_bad_reference_files_are_refused_by_name(tmp_path, capsys, content, message):
    _synthetic_benchmark(tmp_path / "bench")
    reference = tmp_path / "reference.json"
    reference.write_text(content)
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(tmp_path / "bench"), "--out", str(tmp_path / "report"), "--normalisation", str(reference)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and f"--normalisation {str(reference)!r}" in err and message in err, err
    assert not (tmp_path / "report").exists()  # nothing written


def test_unknown_normalisation_is_refused(tmp_path, capsys):
    _synthetic_benchmark(tmp_path / "bench")
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(tmp_path / "bench"), "--out", str(tmp_path / "report"), "--normalisation", "marl_eval"])
    assert exit_info.value.code == 2
    assert "'marl_eval' is neither marl-eval, run-scores, JSON nor an existing file" in capsys.readouterr().err


def test_published_results_are_drawn_and_listed_beside_the_runs(tmp_path, monkeypatch):
    """Issue 36: ``--references`` puts papers' points on the per-task curves and in report.md with source and budget."""
    from lit_marl.evaluation import results

    _synthetic_benchmark(tmp_path / "bench")
    (tmp_path / "refs.yaml").write_text(
        "vmas/balance:\n"
        "  - {label: MAPPO (paper), frames: 10000000, return: 9.5, source: 'A et al. 2024, fig. 2 (read off)',"
        " note: other simulator version}\n")
    drawn = []
    real_plots = results.plots

    def plots(result, out):  # what the per-task plot receives
        drawn.append(result.get("references"))
        return real_plots(result, out)

    monkeypatch.setattr(results, "plots", plots)
    main(["report", str(tmp_path / "bench"), "--out", str(tmp_path / "report"), "--n_resamples", "200",
          "--normalisation", "run-scores", "--references", str(tmp_path / "refs.yaml")])
    point = {"label": "MAPPO (paper)", "frames": 10_000_000, "return": 9.5,
             "source": "A et al. 2024, fig. 2 (read off)", "note": "other simulator version"}
    assert drawn == [{"vmas/balance": [point]}]
    assert json.loads((tmp_path / "report" / "report.json").read_text())["references"] == {"vmas/balance": [point]}
    assert ("| vmas/balance | MAPPO (paper) | 10,000,000 | 9.5 | A et al. 2024, fig. 2 (read off) (other simulator "
            "version) |") in (tmp_path / "report" / "report.md").read_text()


@pytest.mark.parametrize("content, message", [
    ("vmas/balanse:\n  - {label: x, frames: 1, return: 1, source: s}\n",
     "references.vmas/balanse: no run of this report is on task 'vmas/balanse'"),
    ("vmas/balance:\n  - {label: x, frames: 1, return: 1}\n", "references.vmas/balance[0].source: missing"),
    ("vmas/balance:\n  - {label: x, frames: 0, return: 1, source: s}\n", "references.vmas/balance[0].frames: 0"),
    ("vmas/balance:\n  - {label: x, frames: 5, return: .nan, source: s}\n", "[0].return: nan; allowed: a finite"),
    ("vmas/balance: []\n", "references.vmas/balance: expected a list of points"),
    ("[1, 2]\n", "holds no task"),
    # issue 48: YAML would keep the second list only, silently
    ("vmas/balance:\n  - {label: x, frames: 1, return: 1, source: s}\nvmas/balance:\n  - {label: y, frames: 2, "
     "return: 2, source: s}\n", "with the key 'vmas/balance' twice (lines 1 and 3)"),
])
def test_bad_published_results_are_refused_before_anything_is_written(tmp_path, capsys, content, message):
    _synthetic_benchmark(tmp_path / "bench")
    (tmp_path / "refs.yaml").write_text(content)
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(tmp_path / "bench"), "--out", str(tmp_path / "report"), "--references",
              str(tmp_path / "refs.yaml")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and message in err, err
    assert not (tmp_path / "report").exists()


def test_the_shipped_published_results_file_reads():
    """benchmarks/references.yaml (HARL's HalfCheetah 2x3 curves, Mava's RWARE comparison) passes the checks."""
    from lit_marl.evaluation.references import read_references

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "references.yaml"
    tasks = ["mamujoco/HalfCheetah-2x3", "rware/rware-tiny-2ag-v2"]
    points = read_references(path, tasks)
    assert sorted(points) == tasks and all(p["source"] for ps in points.values() for p in ps)


def test_the_shipped_epymarl_reference_points_read_in_lit_marls_units():
    """benchmarks/vs_epymarl/references_lbf.yaml (EPyMARL's QMIX measured here) passes the checks, in lit-marl's units
    (the agents' mean: at most 0.5 on LBF 8x8-2p-2f-coop, where EPyMARL's sum is at most 1)."""
    from lit_marl.evaluation.references import read_references

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "vs_epymarl" / "references_lbf.yaml"
    task = "lbf/Foraging-8x8-2p-2f-coop-v3"
    points = read_references(path, [task])[task]
    assert all(0 < p["return"] <= 0.5 and p["frames"] == 2_000_000 for p in points)
    assert sorted(p["return"] for p in points) == [0.2, 0.21, 0.2375]  # seeds 2, 0, 1: EPyMARL's 0.400 / 0.420 / 0.475
