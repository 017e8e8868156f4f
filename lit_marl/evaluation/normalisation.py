"""Min-max normalisation of benchmark scores for ``lit-marl report``: marl-eval's convention, the runs' own
scores, or a reference (per-task minimum and maximum from published results).

``marl-eval`` (the default) reproduces what marl-eval computes, so lit-marl's aggregates can stand next to
published marl-eval/BenchMARL figures. The facts relied on, read from marl-eval's source
(``marl_eval/utils/data_processing_utils.py`` of instadeepai/marl-eval, as released on PyPI as ``id-marl-eval``
0.0.4) and from how BenchMARL calls it (``benchmarl/eval_results.py``: ``metrics_to_normalize=["return"]``,
plots of ``"return"``):

1. ``data_process_pipeline`` lower-cases every key, then, per environment and per task, walks every algorithm,
   every run and every key of the run (each ``step_<k>`` *and* ``absolute_metrics``) in the order of the JSON
   and keeps a minimum and maximum of the ``return`` lists (every evaluation episode's return). The update is
   ``if global_min > min(step): global_min = min(step)`` / ``elif global_max < max(step): global_max = max(step)``
   (``_compare_values``): a step that lowers the minimum does not raise the maximum in the same step, so the
   maximum can stay below the largest episode return, and then which value it is depends on the order of the
   runs in the JSON. The minimum is always the smallest episode return.
2. Each episode's return is normalised on its own, ``(x - global_min) / (global_max - global_min + 1e-6)``, and
   ``mean_norm_return`` of a step is the mean of its normalised list.
3. ``create_matrices_for_rliable`` builds, per algorithm, a ``[runs, tasks]`` matrix of the ``mean_norm_return``
   of the run's step whose key contains ``"absolute"`` (data without one are refused), runs matched across tasks
   by key (``seed_<s>``); and a ``[runs, tasks, steps]`` tensor of the other steps' ``mean_norm_return`` for the
   sample-efficiency curves.
4. ``aggregate_scores`` gives those matrices to rliable: IQM is ``scipy.stats.trim_mean(scores, 0.25,
   axis=None)`` over all runs of all tasks, as :func:`lit_marl.evaluation.statistics.iqm` of the pooled scores.

lit-marl walks the runs in the order it read them (one JSON file: its own order; several: path order, as
BenchMARL's ``load_and_merge_json_dicts`` merges them in the order given), so on the same data it gives
marl-eval's numbers, including an order-dependent maximum; the report names each task where that happened. A
run without ``absolute_metrics`` (a plain ``lit-marl fit`` folder, ``MarlEvalJson(absolute_factor=0)``) is
scored by its last evaluation, where marl-eval would refuse the data; the report says how many.

Note what the absolute metric is: lit-marl's ``MarlEvalJson`` writes the protocol's (the best policy re-evaluated
on 10× the evaluation episodes); BenchMARL's own JSON writer (``benchmarl/experiment/logger.py``, ``JsonWriter``)
stores the single largest evaluation-episode return of the run. Same scale, different quantities.

A reference file (or the same JSON given as text) gives each task's minimum and maximum directly::

    {"vmas/balance": {"min": -10.5, "max": 120.0}, "vmas/navigation": {"min": 0.0, "max": 3.2}}

(keys ``<env>/<task>`` as lit-marl names tasks, case-insensitive; ``max > min``, finite numbers; nothing else), or
is itself a marl-eval JSON (``{env: {task: {algorithm: {run: {step: {"return": [...]}}}}}}``, e.g. BenchMARL's
merged results), whose per-task minimum and maximum are computed as in 1. Scores are then normalised by
marl-eval's formula of 2, so a short run is placed on the published runs' scale.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lit_marl.errors import ConfigError
from lit_marl.reading import read_json

#: the conventions named on the command line (anything else is a reference file)
NAMES = ("marl-eval", "run-scores")
#: marl-eval adds this to every task's span (data_process_pipeline)
MARL_EVAL_EPSILON = 1e-6

DESCRIPTIONS = {
    "marl-eval": "as marl-eval computes it (data_process_pipeline): per task, by the lowest and highest return of "
                 "any evaluation episode of any run, every step and the absolute metrics included, span + 1e-6; a "
                 "run's score is the mean normalised return of its absolute metrics",
    "run-scores": "per task, by the lowest and highest score of any run (a run's score: the mean return of its "
                  "absolute metrics, else of its last evaluation)",
    "reference": "per task, by the minimum and maximum of a reference file (marl-eval's formula, span + 1e-6); a "
                 "run's score is the mean normalised return of its absolute metrics",
}


@dataclass
class Normalisation:
    """Per-task ``low``/``high`` and how a list of returns maps to a normalised score."""

    name: str  #: "marl-eval", "run-scores" or "reference"
    tasks: list[str]
    low: np.ndarray
    high: np.ndarray
    epsilon: float = 0.0
    source: str | None = None  #: the reference file
    notes: list[str] = field(default_factory=list)

    @property
    def span(self) -> np.ndarray:
        if self.epsilon:
            return self.high - self.low + self.epsilon
        return np.where(self.high > self.low, self.high - self.low, 1.0)  # one score everywhere maps to 0

    def normalise(self, returns: Iterable[float], task: int) -> float:
        """The mean of the normalised returns (marl-eval's ``mean_norm_return``)."""
        values = np.asarray(list(returns), dtype=np.float64)
        return float(np.mean((values - self.low[task]) / self.span[task]))

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": DESCRIPTIONS[self.name], "source": self.source,
                "low": self.low.tolist(), "high": self.high.tolist(), "epsilon": self.epsilon, "notes": self.notes}


# ----------------------------------------------------------------------------------------- marl-eval
def _step_returns(run: Mapping[str, Any]) -> Iterable[tuple[str, list[float]]]:
    for key, step in run.items():
        if isinstance(step, Mapping) and step.get("return"):
            yield key, step["return"]


def marl_eval_min_max(algorithms: Mapping[str, Mapping[Any, Mapping[str, Any]]]) -> tuple[float, float, float]:
    """marl-eval's ``(global_min, global_max)`` of one task's runs ``{algorithm: {run: {step: {"return": [...]}}}}``
    walked in their order, with its if/elif update; and the largest episode return, for comparison."""
    low = high = None
    highest = -math.inf
    for runs in algorithms.values():
        for run in runs.values():
            for _, returns in _step_returns(run):
                step_min, step_max = float(np.min(returns)), float(np.max(returns))
                highest = max(highest, step_max)
                if low is None:
                    low, high = step_min, step_max
                elif low > step_min:
                    low = step_min
                elif high < step_max:
                    high = step_max
    if low is None:
        raise ValueError("no evaluation returns")
    return low, high, highest


def _marl_eval(runs: Mapping[str, Any], tasks: list[str]) -> Normalisation:
    lows, highs, notes = [], [], []
    for task in tasks:
        low, high, highest = marl_eval_min_max(runs[task])
        lows.append(low), highs.append(high)
        if highest > high:
            notes.append(f"{task}: marl-eval's maximum {high:.6g} is below the largest episode return {highest:.6g} "
                         f"(its update does not raise the maximum in a step that lowered the minimum); normalised "
                         f"scores may exceed 1 and depend on the order of the runs, here the order they were read")
    without = sum(1 for task in tasks for by_seed in runs[task].values() for run in by_seed.values()
                  if not any("absolute" in k for k in run))
    if without:
        notes.append(f"{without} runs have no absolute_metrics and are scored by their last evaluation (marl-eval "
                     f"would refuse them)")
    return Normalisation("marl-eval", tasks, np.array(lows), np.array(highs), MARL_EVAL_EPSILON, notes=notes)


# ----------------------------------------------------------------------------------------- reference
REFERENCE_ALLOWED = ('marl-eval, run-scores, a JSON file {"<env>/<task>": {"min": <number>, "max": <number>}, ...} '
                     'or a marl-eval JSON file {env: {task: {algorithm: {run: {step: {"return": [...]}}}}}}')


def _refuse(path: Path, what: str) -> ConfigError:
    return ConfigError(f"report: --normalisation {str(path)!r}: {what}; allowed: {REFERENCE_ALLOWED}")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def load_reference(path: str | Path) -> dict[str, tuple[float, float]]:
    """``{"<env>/<task>" (lower case): (min, max)}`` from a reference file (see the module docstring), or from
    the JSON text itself when ``path`` is a string that starts with ``{``."""
    if isinstance(path, str) and path.lstrip().startswith("{"):
        try:
            data = json.loads(path)
        except json.JSONDecodeError as err:
            raise _refuse(Path(path), f"is not JSON ({err})") from None
        path = Path(path)
    else:
        path = Path(path)
        data = read_json(path, "report: --normalisation", REFERENCE_ALLOWED)
    if not isinstance(data, dict) or not data:
        raise _refuse(path, "is not a non-empty JSON object")
    if all("/" in key for key in data):
        return _min_max_file(path, data)
    if any("/" in key for key in data):
        raise _refuse(path, "mixes '<env>/<task>' keys with other keys")
    return _marl_eval_file(path, data)


def _min_max_file(path: Path, data: dict[str, Any]) -> dict[str, tuple[float, float]]:
    result: dict[str, tuple[float, float]] = {}
    for key, entry in data.items():
        env, _, task = key.partition("/")
        if not env or not task:
            raise _refuse(path, f"key {key!r} is not '<env>/<task>'")
        if not isinstance(entry, dict) or set(entry) != {"min", "max"}:
            raise _refuse(path, f"{key!r} must be an object with exactly 'min' and 'max', got {entry!r}")
        low, high = entry["min"], entry["max"]
        if not _number(low) or not _number(high):
            raise _refuse(path, f"{key!r}: min and max must be finite numbers, got {low!r} and {high!r}")
        if not high > low:
            raise _refuse(path, f"{key!r}: max {high!r} is not above min {low!r}")
        if key.lower() in result:
            raise _refuse(path, f"task {key!r} appears twice (keys are case-insensitive)")
        result[key.lower()] = (float(low), float(high))
    return result


def _marl_eval_file(path: Path, data: dict[str, Any]) -> dict[str, tuple[float, float]]:
    result: dict[str, tuple[float, float]] = {}
    for env, tasks in data.items():
        if not isinstance(tasks, dict):
            raise _refuse(path, f"{env!r} is not an object of tasks")
        for task, algorithms in tasks.items():
            where = f"{env}/{task}"
            if not isinstance(algorithms, dict) or not all(
                    isinstance(runs, dict) and all(isinstance(run, dict) for run in runs.values())
                    for runs in algorithms.values()):
                raise _refuse(path, f"{where!r} is not an object {{algorithm: {{run: {{step: ...}}}}}}")
            for runs in algorithms.values():
                for run_key, run in runs.items():
                    for step_key, step in run.items():
                        returns = step.get("return") if isinstance(step, dict) else None
                        if not isinstance(returns, list) or not all(_number(r) for r in returns):
                            raise _refuse(path, f"{where} {run_key} {step_key}: 'return' must be a list of finite "
                                                f"numbers, got {returns!r}")
            try:
                low, high, _ = marl_eval_min_max(algorithms)
            except ValueError:
                raise _refuse(path, f"{where!r} has no evaluation returns") from None
            result[where.lower()] = (low, high)
    return result


def _reference(path: str | Path, tasks: list[str]) -> Normalisation:
    reference = load_reference(path)
    missing = [t for t in tasks if t.lower() not in reference]
    if missing:
        raise _refuse(Path(path), f"has no minimum and maximum for {', '.join(missing)} (it has "
                            f"{', '.join(sorted(reference)) or 'none'})")
    low = np.array([reference[t.lower()][0] for t in tasks])
    high = np.array([reference[t.lower()][1] for t in tasks])
    return Normalisation("reference", tasks, low, high, MARL_EVAL_EPSILON, source=str(path))


# ----------------------------------------------------------------------------------------- choice
def resolve(spec: str, runs: Mapping[str, Any], tasks: list[str], scores: Mapping[str, np.ndarray]) -> Normalisation:
    """The normalisation ``spec`` names: ``marl-eval``, ``run-scores`` (``scores``: ``{algorithm: [runs, tasks]}``)
    or the path of a reference file."""
    if spec == "marl-eval":
        return _marl_eval(runs, tasks)
    if spec == "run-scores":
        stacked = np.concatenate(list(scores.values()), axis=0)
        return Normalisation("run-scores", tasks, stacked.min(axis=0), stacked.max(axis=0))
    if spec.lstrip().startswith("{"):  # the JSON itself
        return _reference(spec, tasks)
    path = Path(spec)
    if not path.is_file():
        raise ConfigError(f"report: --normalisation {spec!r} is neither marl-eval, run-scores, JSON nor an existing "
                          f"file; allowed: marl-eval (the default), run-scores, or a JSON file (or text) of per-task "
                          f"min/max")
    return _reference(path, tasks)
