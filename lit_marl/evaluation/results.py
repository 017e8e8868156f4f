"""``lit-marl report``: benchmark statistics over runs, as PNG plots and Markdown/LaTeX tables.

Reads marl-eval JSON files (``marl_eval.json``, written by :class:`~lit_marl.callbacks.MarlEvalJson`
in every benchmark run) found under the given folders, and run folders of ``lit-marl fit`` without one (their
``config.yaml`` and the ``val/return`` column of ``metrics.csv``). A run's score is the mean return of its
``absolute_metrics`` (the best policy on 10× the evaluation episodes), or of its last evaluation where there is
none. Per task: mean and IQM of the raw scores with bootstrap CIs over seeds. Over tasks, on min-max normalised
scores: mean, median, IQM and optimality gap with stratified bootstrap CIs, the probability of improvement of
each algorithm over each other, performance profiles and sample-efficiency curves (Agarwal et al., NeurIPS
2021). The normalisation (``--normalisation``, :mod:`lit_marl.evaluation.normalisation`) is marl-eval's by
default (per task, by the lowest and highest return of any evaluation episode), so the numbers equal marl-eval's
on the same JSON; ``run-scores`` normalises by the lowest and highest run score, and a reference file by given
per-task minima and maxima (e.g. of published results). Every algorithm must have run every task with the same
seeds: a report over mismatched runs is refused, naming what is missing. How each run evaluated (the greedy policy
or sampled actions, ``evaluation_deterministic``) is read from its config and shown per task and algorithm: numbers
evaluated differently are not like-for-like.
"""

from __future__ import annotations

import argparse
import csv
import importlib
import inspect
import os
from pathlib import Path
from typing import Any

import numpy as np

from lit_marl.atomic import atomic_target
from lit_marl.envs.base import Task
from lit_marl.errors import ConfigError
from lit_marl.evaluation import normalisation as norm_
from lit_marl.evaluation import statistics as st
from lit_marl.evaluation.io import write_atomic, write_json
from lit_marl.evaluation.marl_eval import ALLOWED, FILE_NAME, marl_eval_shape
from lit_marl.evaluation.references import markdown_lines, read_references
from lit_marl.reading import json_kind, read_json, read_text, read_yaml, refused
from lit_marl.utils import instantiate

#: run index: {task ("env/task"): {algorithm: {seed: run entry of the marl-eval JSON}}}; lit-marl adds the entry
#: ``evaluation`` (:data:`GREEDY` or :data:`SAMPLED`) where the run's config says how it evaluated
Runs = dict[str, dict[str, dict[int, dict[str, Any]]]]

#: how a run evaluated: the policy's mode (``evaluation_deterministic: true``) or actions sampled from it
GREEDY, SAMPLED = "greedy", "sampled"
#: the configs a marl_eval.json may sit beside: a benchmark run's (lit-marl benchmark) or a fit's (Lightning's log dir)
CONFIGS_BESIDE_MARL_EVAL = ("run_config.yaml", "config.yaml")


def load_runs(paths: list[str | os.PathLike]) -> Runs:
    """Every run at ``paths``: marl-eval JSON files, and folders searched for ``marl_eval.json`` files and for
    Lightning run folders (``config.yaml`` + ``metrics.csv``, e.g. of ``lit-marl fit``) that have none."""
    files: list[Path] = []
    run_folders: list[Path] = []
    for path in map(Path, paths):
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            found = sorted(path.rglob(FILE_NAME))
            files.extend(found)
            covered = {f.parent.resolve() for f in found}
            for config in sorted(path.rglob("config.yaml")):
                folder = config.parent
                if (folder / "metrics.csv").is_file() and not any(
                        p in covered for p in (folder.resolve(), *folder.resolve().parents)):
                    run_folders.append(folder)
        else:
            raise refused("report:", path, "missing (no such file or folder)", ALLOWED)
    if not files and not run_folders:
        raise ConfigError(f"report: no {FILE_NAME} and no run folder under {', '.join(map(str, paths))}; allowed: "
                          f"benchmark folders (lit-marl benchmark), run folders (lit-marl fit) or marl-eval JSON files")
    runs: Runs = {}
    for file in files:
        data = read_json(file, "report: marl-eval JSON", ALLOWED, marl_eval_shape)
        config = next((file.parent / n for n in CONFIGS_BESIDE_MARL_EVAL if (file.parent / n).is_file()), None)
        mode = evaluation_mode(read_yaml(config, "report: run config", RUN_ALLOWED, _mapping)) if config else None
        for env, tasks in data.items():
            for task, algorithms in tasks.items():
                for algorithm, seeds in algorithms.items():
                    for seed_key, run in seeds.items():
                        seed = int(seed_key.removeprefix("seed_"))
                        entry = runs.setdefault(f"{env}/{task}", {}).setdefault(algorithm, {})
                        if seed in entry:
                            raise ConfigError(f"report: run {env}/{task} {algorithm} seed {seed} appears twice "
                                              f"(again in {file})")
                        if not any(k.startswith("step_") for k in run) and "absolute_metrics" not in run:
                            continue  # started, never evaluated
                        entry[seed] = run if mode is None else {**run, "evaluation": mode}
    for folder in run_folders:
        task, algorithm, seed, steps, mode = _run_folder(folder)
        if not steps:
            continue
        entry = runs.setdefault(task, {}).setdefault(algorithm, {})
        # the folders of one algorithm, task and seed are one run and its resumes: their evaluations merge (a resume
        # may change how it evaluates: then the run's mode is "mixed")
        earlier = entry.get(seed, {})
        merged = {v["step_count"]: v for v in _steps(earlier)}
        merged.update({v["step_count"]: v for v in steps})
        entry[seed] = {f"step_{k}": merged[c] for k, c in enumerate(sorted(merged))}
        entry[seed]["evaluation"] = mode if earlier.get("evaluation", mode) == mode else MIXED
    return runs


#: a run (or a set of runs) that evaluated both ways
MIXED = "mixed"


def evaluation_mode(config: dict[str, Any]) -> str:
    """:data:`GREEDY` or :data:`SAMPLED`: the run config's ``model.init_args.evaluation_deterministic``, else its
    algorithm's default."""
    model = config.get("model") or {}
    value = (model.get("init_args") or {}).get("evaluation_deterministic")
    if value is None:
        value = _algorithm_default(str(model.get("class_path", "")), "evaluation_deterministic")
    return GREEDY if value in (True, None) else SAMPLED


def _algorithm_default(class_path: str, argument: str) -> Any:
    module_name, _, cls_name = class_path.rpartition(".")
    try:
        parameter = inspect.signature(getattr(importlib.import_module(module_name), cls_name)).parameters[argument]
    except (ImportError, AttributeError, KeyError, ValueError):
        return None
    return None if parameter.default is inspect.Parameter.empty else parameter.default


#: what ``lit-marl report`` reads of a run folder
RUN_ALLOWED = "a run folder of lit-marl fit (its config.yaml and metrics.csv as lit-marl wrote them)"


def _mapping(data: Any) -> str | None:
    return None if isinstance(data, dict) else f"{json_kind(data)} where a mapping belongs"


def _run_folder(folder: Path) -> tuple[str, str, int, list[dict[str, Any]], str]:
    """``(task name, algorithm name, seed, evaluations, evaluation mode)`` of a Lightning run folder (``val/return``
    per evaluation)."""
    config_file, metrics = folder / "config.yaml", folder / "metrics.csv"
    config = read_yaml(config_file, "report: run config", RUN_ALLOWED, _mapping)
    try:
        model = config.get("model") or {}
        module_name, _, cls_name = str(model.get("class_path", "")).rpartition(".")
        algorithm = getattr(importlib.import_module(module_name), cls_name).algorithm_name
        task = instantiate(model["init_args"]["task"], Task, f"{folder}: model.init_args.task").name
        seed = int(config.get("seed_everything") or 0)
    except (ImportError, AttributeError, KeyError, ValueError, TypeError) as err:
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise refused("report: run config", config_file, f"not a lit-marl run config ({reason})", RUN_ALLOWED) from None
    steps = []
    for row_number, row in enumerate(csv.DictReader(read_text(metrics, "report: metrics", RUN_ALLOWED).splitlines())):
        if row.get("val/return") and row.get("counters/frames"):
            try:
                steps.append({"step_count": int(float(row["counters/frames"])), "return": [float(row["val/return"])]})
            except ValueError:
                raise refused("report: metrics", metrics, f"of the wrong shape (row {row_number + 1}: counters/frames "
                              f"{row['counters/frames']!r} or val/return {row['val/return']!r} is not a number)",
                              RUN_ALLOWED) from None
    return task, algorithm, seed, steps, evaluation_mode(config)


def check_complete(runs: Runs) -> tuple[list[str], list[str], list[int]]:
    """Tasks, algorithms and seeds, when every algorithm ran every task with every seed; else a ConfigError
    listing the missing ``task / algorithm / seed`` runs."""
    tasks = sorted(runs)
    algorithms = sorted({a for by_alg in runs.values() for a in by_alg})
    seeds = sorted({s for by_alg in runs.values() for by_seed in by_alg.values() for s in by_seed})
    missing = [f"{t} / {a} / seed {s}" for t in tasks for a in algorithms for s in seeds
               if s not in runs[t].get(a, {})]
    if missing:
        raise ConfigError(f"report: the runs do not cover every task × algorithm × seed; missing {len(missing)}: "
                          f"{', '.join(missing[:20])}{' …' if len(missing) > 20 else ''}; allowed: complete grids "
                          f"(finish them with lit-marl benchmark, or report on a subset folder)")
    if not tasks:
        raise ConfigError("report: no evaluated run found")
    return tasks, algorithms, seeds


def _steps(run: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted((v for k, v in run.items() if k.startswith("step_")), key=lambda v: v["step_count"])


def score_returns(run: dict[str, Any]) -> list[float]:
    """The returns a run is scored on: its absolute metrics' (marl-eval: the step whose key contains
    "absolute"), else its last evaluation's."""
    absolute = next((k for k in run if "absolute" in k and isinstance(run[k], dict) and run[k].get("return")), None)
    if absolute is not None:
        return list(run[absolute]["return"])
    return list(_steps(run)[-1]["return"])


def run_score(run: dict[str, Any]) -> float:
    """The absolute metric's mean return, else the last evaluation's."""
    return float(np.mean(score_returns(run)))


def compute(runs: Runs, n_resamples: int = st.N_RESAMPLES, seed: int = 0, confidence: float = st.CONFIDENCE,
            normalisation: str = "marl-eval") -> dict[str, Any]:
    """Every statistic of the report, as plain data; ``normalisation``: ``marl-eval``, ``run-scores`` or the
    path of a reference file (:mod:`lit_marl.evaluation.normalisation`)."""
    tasks, algorithms, seeds = check_complete(runs)
    raw = {a: np.array([[run_score(runs[t][a][s]) for t in tasks] for s in seeds]) for a in algorithms}
    norm = norm_.resolve(normalisation, runs, tasks, raw)
    normalised = {a: np.array([[norm.normalise(score_returns(runs[t][a][s]), i) for i, t in enumerate(tasks)]
                               for s in seeds]) for a in algorithms}
    kw = dict(confidence=confidence, n_resamples=n_resamples, seed=seed)

    per_task = {t: {a: {name: st.estimate([raw[a][:, i]], st.AGGREGATES[name], **kw) for name in ("mean", "iqm")}
                    for a in algorithms} for i, t in enumerate(tasks)}
    for t in tasks:
        for a in algorithms:
            per_task[t][a]["evaluation"] = _modes([runs[t][a][s].get("evaluation") for s in seeds])
    aggregate = {a: st.aggregate_metrics(normalised[a], **kw) for a in algorithms}
    improvement = {f"{x} > {y}": st.probability_of_improvement(normalised[x], normalised[y], **kw)
                   for x in algorithms for y in algorithms if x != y}
    taus = np.linspace(0.0, 1.0, 21)
    profiles = {a: st.performance_profile(normalised[a], taus, **kw) for a in algorithms}

    curves: dict[str, Any] = {}
    for a in algorithms:
        counts = sorted(set.intersection(*[{v["step_count"] for v in _steps(runs[t][a][s])}
                                           for t in tasks for s in seeds]))
        if not counts:
            continue

        def returns(t: str, s: int, c: int) -> list[float]:
            return next(v["return"] for v in _steps(runs[t][a][s]) if v["step_count"] == c)

        values = np.array([[[norm.normalise(returns(t, s, c), i) for c in counts] for i, t in enumerate(tasks)]
                           for s in seeds])  # [runs, tasks, points]
        curve = st.sample_efficiency(values, **kw)
        curve["raw_mean"] = np.array([[[np.mean(returns(t, s, c)) for c in counts] for t in tasks]
                                      for s in seeds]).mean(0).tolist()  # [tasks, points]
        curves[a] = {"frames": counts, **curve}
    return {
        "tasks": tasks, "algorithms": algorithms, "seeds": seeds, "confidence": confidence,
        "n_resamples": n_resamples, "bootstrap_seed": seed,
        "scores": {a: raw[a].tolist() for a in algorithms},
        "normalised_scores": {a: normalised[a].tolist() for a in algorithms},
        "normalisation": norm.as_dict(),
        "per_task": per_task, "aggregate": aggregate, "probability_of_improvement": improvement,
        "performance_profiles": profiles, "sample_efficiency": curves,
    }


def _modes(modes: list[str | None]) -> str:
    """One word for how a task's runs of one algorithm evaluated: greedy, sampled, mixed, or not recorded (a
    marl-eval JSON given without the run's config beside it)."""
    known = set(modes) - {None}
    if not known:
        return NOT_RECORDED
    return known.pop() if len(known) == 1 and None not in modes else MIXED


NOT_RECORDED = "not recorded"


def evaluation_note(result: dict[str, Any]) -> str | None:
    """A warning line where the report compares runs that evaluated differently (greedy against sampled, or runs
    whose mode is mixed or unknown): such numbers are not like-for-like."""
    modes = {result["per_task"][t][a]["evaluation"] for t in result["tasks"] for a in result["algorithms"]}
    if len(modes) == 1 and modes <= {GREEDY, SAMPLED}:
        return None
    if modes == {NOT_RECORDED}:
        return ("How these runs evaluated (greedy or sampled actions) is not recorded: their marl-eval JSON came "
                "without the runs' configs.")
    return (f"Not like-for-like: these runs did not all evaluate the same way ({', '.join(sorted(modes))}; the "
            f"column \"evaluation\" below says which), and one policy's greedy and sampled returns differ.")


# ----------------------------------------------------------------------------------------------- tables
def _cell(e: dict[str, Any], digits: int = 3) -> str:
    return f"{e['value']:.{digits}f} [{e['ci_low']:.{digits}f}, {e['ci_high']:.{digits}f}]"


def _normalisation_line(normalisation: dict[str, Any]) -> str:
    source = f" `{normalisation['source']}`" if normalisation.get("source") else ""
    return f"Normalisation `{normalisation['name']}`{source}: {normalisation['description']}."


def markdown(result: dict[str, Any]) -> str:
    conf = f"{result['confidence']:.0%}"
    lines = ["# Benchmark report", "",
             f"{len(result['algorithms'])} algorithms × {len(result['tasks'])} tasks × {len(result['seeds'])} seeds "
             f"({', '.join(map(str, result['seeds']))}). Values with {conf} bootstrap CIs "
             f"({result['n_resamples']} resamples; stratified over tasks for aggregates).", "",
             "## Aggregate (min-max normalised per task)", "", _normalisation_line(result["normalisation"]), ""]
    lines += [f"- {note}" for note in result["normalisation"]["notes"]]
    lines += [""] if result["normalisation"]["notes"] else []
    note = evaluation_note(result)
    lines += [f"**{note}**", ""] if note else []
    lines += ["| algorithm | mean | median | IQM | optimality gap |", "|---|---|---|---|---|"]
    for a in result["algorithms"]:
        agg = result["aggregate"][a]
        lines.append(f"| {a} | {_cell(agg['mean'])} | {_cell(agg['median'])} | {_cell(agg['iqm'])} | "
                     f"{_cell(agg['optimality_gap'])} |")
    lines += ["", "![aggregate](aggregate_metrics.png)", "", "## Per task (raw return)", "",
              "| task | algorithm | mean | IQM | evaluation |", "|---|---|---|---|---|"]
    for t in result["tasks"]:
        for a in result["algorithms"]:
            e = result["per_task"][t][a]
            lines.append(f"| {t} | {a} | {_cell(e['mean'])} | {_cell(e['iqm'])} | {e['evaluation']} |")
    lines += ["", "## Probability of improvement", "", "| X > Y | P(X > Y) |", "|---|---|"]
    for pair, e in result["probability_of_improvement"].items():
        lines.append(f"| {pair} | {_cell(e)} |")
    lines += ["", "![performance profiles](performance_profile.png)", "",
              "![sample efficiency](sample_efficiency.png)", "", "![per-task curves](task_curves.png)", ""]
    lines += markdown_lines(result.get("references") or {})
    return "\n".join(lines)


def latex(result: dict[str, Any]) -> str:
    def cell(e: dict[str, Any]) -> str:
        return f"{e['value']:.3f} \\scriptsize{{[{e['ci_low']:.3f}, {e['ci_high']:.3f}]}}"

    def escape(text: str) -> str:
        return text.replace("_", "\\_").replace("&", "\\&").replace("%", "\\%")

    lines = ["% requires \\usepackage{booktabs}",
             f"% {_normalisation_line(result['normalisation']).replace('`', '')}",
             "\\begin{tabular}{lllll}", "\\toprule",
             "Algorithm & Mean & Median & IQM & Optimality gap \\\\", "\\midrule"]
    for a in result["algorithms"]:
        agg = result["aggregate"][a]
        lines.append(f"{escape(a)} & {cell(agg['mean'])} & {cell(agg['median'])} & {cell(agg['iqm'])} & "
                     f"{cell(agg['optimality_gap'])} \\\\")
    lines += ["\\bottomrule", "\\end{tabular}", "", "\\begin{tabular}{lllll}", "\\toprule",
              "Task & Algorithm & Mean return & IQM return & Evaluation \\\\", "\\midrule"]
    for t in result["tasks"]:
        for a in result["algorithms"]:
            e = result["per_task"][t][a]
            lines.append(f"{escape(t)} & {escape(a)} & {cell(e['mean'])} & {cell(e['iqm'])} & "
                         f"{e['evaluation']} \\\\")
    lines += ["\\bottomrule", "\\end{tabular}", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ plots
def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ConfigError("report: plots need matplotlib; allowed: pip install matplotlib "
                          "(or pip install 'lit-marl[eval]')") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, path: Path) -> None:
    with atomic_target(path) as tmp:
        fig.savefig(tmp, dpi=120, bbox_inches="tight")


def plots(result: dict[str, Any], out: Path) -> list[Path]:
    plt = _pyplot()
    algorithms = result["algorithms"]
    colors = {a: plt.get_cmap("tab10")(i % 10) for i, a in enumerate(algorithms)}
    written = []

    names = ["mean", "median", "iqm", "optimality_gap"]
    fig, axes = plt.subplots(1, 4, figsize=(14, 0.6 * len(algorithms) + 1.5), sharey=True)
    for ax, name in zip(axes, names):
        for y, a in enumerate(algorithms):
            e = result["aggregate"][a][name]
            ax.barh(y, e["ci_high"] - e["ci_low"], left=e["ci_low"], height=0.6, color=colors[a], alpha=0.7)
            ax.vlines(e["value"], y - 0.3, y + 0.3, color="black")
        ax.set_title(name.replace("_", " ").replace("iqm", "IQM"))
        ax.set_xlabel("normalised score")
    axes[0].set_yticks(range(len(algorithms)), algorithms)
    _save(fig, out / "aggregate_metrics.png"), plt.close(fig), written.append(out / "aggregate_metrics.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    for a in algorithms:
        p = result["performance_profiles"][a]
        ax.plot(p["tau"], p["value"], color=colors[a], label=a)
        ax.fill_between(p["tau"], p["ci_low"], p["ci_high"], color=colors[a], alpha=0.2)
    ax.set_xlabel("normalised score τ"), ax.set_ylabel("fraction of runs with score > τ"), ax.legend()
    _save(fig, out / "performance_profile.png"), plt.close(fig), written.append(out / "performance_profile.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    for a, c in result["sample_efficiency"].items():
        ax.plot(c["frames"], c["value"], color=colors[a], label=a)
        ax.fill_between(c["frames"], c["ci_low"], c["ci_high"], color=colors[a], alpha=0.2)
    ax.set_xlabel("frames"), ax.set_ylabel("IQM normalised return"), ax.legend()
    _save(fig, out / "sample_efficiency.png"), plt.close(fig), written.append(out / "sample_efficiency.png")

    tasks = result["tasks"]
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 3.5), squeeze=False)
    for i, (ax, t) in enumerate(zip(axes[0], tasks)):
        for a, c in result["sample_efficiency"].items():
            ax.plot(c["frames"], c["raw_mean"][i], color=colors[a], label=a)
        for point in (result.get("references") or {}).get(t, []):  # published results, as marked points
            ax.plot([point["frames"]], [point["return"]], marker="*", markersize=10, linestyle="none", color="black")
            ax.annotate(point["label"], (point["frames"], point["return"]), textcoords="offset points",
                        xytext=(4, 4), fontsize=7)
        ax.set_title(t), ax.set_xlabel("frames"), ax.set_ylabel("mean return over seeds")
    axes[0][0].legend()
    _save(fig, out / "task_curves.png"), plt.close(fig), written.append(out / "task_curves.png")
    return written


def report(paths: list[str | os.PathLike], out: str | os.PathLike, n_resamples: int = st.N_RESAMPLES,
           seed: int = 0, normalisation: str = "marl-eval",
           references: str | os.PathLike | None = None) -> dict[str, Any]:
    """Write the report of the runs under ``paths`` into the new folder ``out``; returns its numbers.
    ``normalisation``: ``marl-eval`` (the default), ``run-scores`` or a reference file's path; ``references``: a YAML
    file of published results to draw beside the runs (:mod:`lit_marl.evaluation.references`)."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"out: {str(out)!r} already exists and is not empty; nothing was written; allowed: a new "
                          f"or empty folder")
    runs = load_runs(list(paths))
    result = compute(runs, n_resamples=n_resamples, seed=seed, normalisation=normalisation)
    if references is not None:  # checked before anything is written
        result["references"] = read_references(references, result["tasks"])
    _pyplot()  # fail before writing anything
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "report.json", result)
    write_atomic(out / "report.md", markdown(result))
    write_atomic(out / "report.tex", latex(result))
    plots(result, out)
    return result


def main(argv: list[str]) -> int:
    """``lit-marl report DIR [DIR ...] --out OUT``."""
    parser = argparse.ArgumentParser(prog="lit-marl report", description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", help="benchmark folders or marl-eval JSON files")
    parser.add_argument("--out", required=True, help="a new folder for report.md, report.tex, report.json, PNGs")
    parser.add_argument("--n_resamples", type=int, default=st.N_RESAMPLES, help="bootstrap resamples")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    parser.add_argument(
        "--normalisation", default="marl-eval", metavar="marl-eval|run-scores|FILE|JSON",
        help="per-task min-max normalisation: marl-eval (default; the lowest and highest return of any evaluation "
             "episode, as marl-eval computes it), run-scores (the lowest and highest run score), or a JSON file of "
             'per-task minima and maxima {"<env>/<task>": {"min": x, "max": y}} (or that JSON as text) or a '
             "marl-eval JSON (e.g. published results) to score on its scale")
    parser.add_argument("--references", default=None, metavar="FILE",
                        help="a YAML file of published results per task ({label, frames, return, source} points, "
                             "e.g. benchmarks/references.yaml), drawn on the per-task curves and listed in report.md")
    args = parser.parse_args(argv)
    result = report(args.paths, args.out, n_resamples=args.n_resamples, seed=args.seed,
                    normalisation=args.normalisation, references=args.references)
    print(markdown(result).split("## Per task")[0])
    print(f"lit-marl report: {args.out}/report.md, report.tex, report.json and plots")
    return 0
