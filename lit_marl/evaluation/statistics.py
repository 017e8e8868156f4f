"""Statistics of evaluation returns, with bootstrap confidence intervals from :func:`scipy.stats.bootstrap`.

Episode-level aggregates (one checkpoint: mean, median, interquartile mean) and the benchmark statistics of
Agarwal et al., *Deep RL at the Edge of the Statistical Precipice* (NeurIPS 2021), as rliable computes them:
aggregate metrics over runs × tasks with **stratified** bootstrap CIs (each task's runs resampled on their own:
scipy resamples each sample of a multi-sample statistic independently, which is exactly that), the probability
of improvement, performance profiles and sample-efficiency curves. Every function takes a ``seed`` so a
report is reproducible.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from lit_marl.errors import ConfigError

#: width of every confidence interval unless asked otherwise
CONFIDENCE = 0.95
#: bootstrap resamples unless asked otherwise (rliable's default is 50 000; 2 000 keep reports quick)
N_RESAMPLES = 2000


def scipy_stats():
    """``scipy.stats`` (an optional dependency: ``pip install 'lit-marl[eval]'``)."""
    try:
        from scipy import stats
    except ImportError:
        raise ConfigError("statistics: scipy is not installed; allowed: pip install scipy "
                          "(or pip install 'lit-marl[eval]')") from None
    return stats


def iqm(values: np.ndarray, axis: int = -1) -> np.ndarray:
    """Interquartile mean: the mean of the middle 50% of ``values`` (25% trimmed from each end)."""
    return scipy_stats().trim_mean(values, 0.25, axis=axis)


def optimality_gap(values: np.ndarray, axis: int = -1, gamma: float = 1.0) -> np.ndarray:
    """How far normalised scores fall short of ``gamma`` on average (scores above it count as ``gamma``)."""
    return np.mean(gamma - np.minimum(values, gamma), axis=axis)


#: the aggregate metrics of a report, by name
AGGREGATES: dict[str, Callable[..., np.ndarray]] = {
    "mean": lambda x, axis=-1: np.mean(x, axis=axis),
    "median": lambda x, axis=-1: np.median(x, axis=axis),
    "iqm": iqm,
    "optimality_gap": optimality_gap,
}


def _interval(samples: Sequence[np.ndarray], statistic: Callable[..., np.ndarray], confidence: float,
              n_resamples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap CI of ``statistic(*samples, axis=-1)``, each sample resampled on its own."""
    samples = [np.asarray(s, dtype=np.float64) for s in samples]
    point = np.asarray(statistic(*samples, axis=-1))
    if any(s.size < 2 for s in samples) or all(np.ptp(s) == 0 for s in samples):
        return point, point  # nothing to resample: the data have no spread
    result = scipy_stats().bootstrap(samples, statistic, vectorized=True, n_resamples=n_resamples,
                             confidence_level=confidence, method="percentile", rng=seed)
    return np.asarray(result.confidence_interval.low), np.asarray(result.confidence_interval.high)


def estimate(samples: Sequence[np.ndarray], statistic: Callable[..., np.ndarray], confidence: float = CONFIDENCE,
             n_resamples: int = N_RESAMPLES, seed: int = 0) -> dict[str, Any]:
    """``{"value", "ci_low", "ci_high"}`` of a statistic of one or more samples (stratified resampling)."""
    samples = [np.asarray(s, dtype=np.float64) for s in samples]
    low, high = _interval(samples, statistic, confidence, n_resamples, seed)
    value = np.asarray(statistic(*samples, axis=-1))
    return {"value": _plain(value), "ci_low": _plain(low), "ci_high": _plain(high)}


def _plain(value: np.ndarray) -> Any:
    value = np.asarray(value, dtype=np.float64)
    return float(value) if value.ndim == 0 else [float(v) for v in value]


def _concatenated(statistic: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """``statistic`` of all samples pooled (runs of every task together)."""
    def pooled(*samples: np.ndarray, axis: int = -1) -> np.ndarray:
        return statistic(np.concatenate(samples, axis=-1), axis=-1)
    return pooled


def summarize(values: Sequence[float], confidence: float = CONFIDENCE, n_resamples: int = N_RESAMPLES,
              seed: int = 0) -> dict[str, dict[str, Any]]:
    """Mean, median and IQM of episode returns, each with a bootstrap CI (``{"value", "ci_low", "ci_high"}``)."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        raise ConfigError("episodes: no episode to summarise; allowed: at least one episode")
    return {name: estimate([values], AGGREGATES[name], confidence, n_resamples, seed)
            for name in ("mean", "median", "iqm")}


def paired_difference(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE,
                      n_resamples: int = N_RESAMPLES, seed: int = 0) -> dict[str, Any]:
    """Mean and IQM of ``a - b`` over paired episodes (same seeds), with bootstrap CIs over the pairs, and
    the fraction of pairs where ``a`` is better."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ConfigError(f"episodes: paired comparison needs two equally long lists, got {a.shape} and {b.shape}")
    diff = a - b
    return {
        "mean_difference": estimate([diff], AGGREGATES["mean"], confidence, n_resamples, seed),
        "iqm_difference": estimate([diff], iqm, confidence, n_resamples, seed),
        "a_better_fraction": float(np.mean(diff > 0)),
        "ties_fraction": float(np.mean(diff == 0)),
        "episodes": int(diff.size),
    }



def independent_difference(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE,
                           n_resamples: int = N_RESAMPLES, seed: int = 0) -> dict[str, Any]:
    """``mean(a) - mean(b)`` of two independent samples (runs of two implementations: the same seed numbers on
    both sides share no random stream, so the runs are not pairs), with a bootstrap CI resampling each side on its
    own, and ``P(a > b)``: the chance that a run of ``a`` beats one of ``b`` (ties count half)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim != 1 or b.ndim != 1 or a.size == 0 or b.size == 0:
        raise ConfigError(f"runs: a difference of means needs two non-empty lists, got shapes {a.shape} and {b.shape}")
    wins = (a[:, None] > b[None, :]).mean() + 0.5 * (a[:, None] == b[None, :]).mean()
    return {
        "mean_difference": estimate([a, b], _difference_of_means, confidence, n_resamples, seed),
        "probability_a_better": float(wins),
        "runs": [int(a.size), int(b.size)],
    }


def _difference_of_means(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(a, axis=axis) - np.mean(b, axis=axis)

# ---------------------------------------------------------------------------- benchmark statistics
def min_max_normalise(scores: dict[str, np.ndarray], low: np.ndarray | None = None,
                      high: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Scores ``{algorithm: [runs, tasks]}`` scaled per task to [0, 1] by the lowest and highest score any
    algorithm reached on that task (or by the given per-task ``low``/``high``)."""
    stacked = np.concatenate(list(scores.values()), axis=0)
    low = stacked.min(axis=0) if low is None else np.asarray(low, dtype=np.float64)
    high = stacked.max(axis=0) if high is None else np.asarray(high, dtype=np.float64)
    span = np.where(high > low, high - low, 1.0)  # a task where every run scored the same maps to 0
    return {name: (np.asarray(s, dtype=np.float64) - low) / span for name, s in scores.items()}


def aggregate_metrics(scores: np.ndarray, confidence: float = CONFIDENCE, n_resamples: int = N_RESAMPLES,
                      seed: int = 0) -> dict[str, dict[str, Any]]:
    """Mean, median, IQM and optimality gap of a ``[runs, tasks]`` score matrix (all runs of all tasks
    pooled) with stratified bootstrap CIs (runs resampled within each task)."""
    scores = np.asarray(scores, dtype=np.float64)
    columns = [scores[:, t] for t in range(scores.shape[1])]
    return {name: estimate(columns, _concatenated(fn), confidence, n_resamples, seed)
            for name, fn in AGGREGATES.items()}


def _improvement(n_tasks: int) -> Callable[..., np.ndarray]:
    def probability(*samples: np.ndarray, axis: int = -1) -> np.ndarray:
        per_task = []
        for x, y in zip(samples[:n_tasks], samples[n_tasks:]):
            greater = (x[..., :, None] > y[..., None, :]).mean(axis=(-2, -1))
            equal = (x[..., :, None] == y[..., None, :]).mean(axis=(-2, -1))
            per_task.append(greater + 0.5 * equal)  # the Mann-Whitney U statistic over n*m
        return np.mean(per_task, axis=0)
    return probability


def probability_of_improvement(x: np.ndarray, y: np.ndarray, confidence: float = CONFIDENCE,
                               n_resamples: int = N_RESAMPLES, seed: int = 0) -> dict[str, Any]:
    """P(X > Y): the chance that a run of X beats a run of Y on a task, averaged over tasks
    (``[runs, tasks]`` matrices, same tasks), with a stratified bootstrap CI."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    n_tasks = x.shape[1]
    samples = [x[:, t] for t in range(n_tasks)] + [y[:, t] for t in range(n_tasks)]
    return estimate(samples, _improvement(n_tasks), confidence, n_resamples, seed)


def performance_profile(scores: np.ndarray, taus: np.ndarray, confidence: float = CONFIDENCE,
                        n_resamples: int = N_RESAMPLES, seed: int = 0) -> dict[str, Any]:
    """Fraction of runs (all tasks pooled) whose normalised score exceeds each ``tau``, with CIs."""
    scores = np.asarray(scores, dtype=np.float64)
    taus = np.asarray(taus, dtype=np.float64)

    def profile(x: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.stack([(x > tau).mean(axis=-1) for tau in taus], axis=0)

    columns = [scores[:, t] for t in range(scores.shape[1])]
    result = estimate(columns, _concatenated(profile), confidence, n_resamples, seed)
    return {"tau": [float(t) for t in taus], **result}


def sample_efficiency(curves: np.ndarray, confidence: float = CONFIDENCE, n_resamples: int = N_RESAMPLES,
                      seed: int = 0) -> dict[str, Any]:
    """IQM at each point of ``[runs, tasks, points]`` normalised learning curves, with stratified CIs."""
    curves = np.asarray(curves, dtype=np.float64)
    lows, highs, values = [], [], []
    for k in range(curves.shape[2]):
        e = estimate([curves[:, t, k] for t in range(curves.shape[1])], _concatenated(iqm), confidence,
                     n_resamples, seed)
        values.append(e["value"]), lows.append(e["ci_low"]), highs.append(e["ci_high"])
    return {"value": values, "ci_low": lows, "ci_high": highs}
