"""What ``lit-marl tune`` writes from a study (atomically, rewritten after every run of the command):
``best.yaml``, ``trials.csv`` and PNG plots. A plot that cannot be made is a log line, never an error."""

from __future__ import annotations

import csv
import io
import warnings
from pathlib import Path
from typing import Any

import yaml

from lit_marl.atomic import atomic_target, write_atomic
from lit_marl.tune.journal import journal_storage
from lit_marl.tune.space import TuneSettings, parse_settings
from lit_marl.tune.study import BASE_CONFIG, JOURNAL, SETTINGS_FILE, STUDY_NAME, evaluation_curve, trial_folder, with_params

#: completed trials below which parameter importances say nothing
MIN_TRIALS_FOR_IMPORTANCES = 4


def trials_table(study) -> str:
    """CSV: number, state, value, one column per parameter, then pruning/retry notes and duration."""
    trials = study.get_trials(deepcopy=False)
    params = sorted({k for t in trials for k in t.distributions} | {k for t in trials for k in t.params})
    notes = ("pruned_at_frames", "retry_of", "failed_because", "fit_failed")
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["number", "state", "value", *params, *notes, "seconds"])
    for t in trials:
        seconds = (t.datetime_complete - t.datetime_start).total_seconds() \
            if t.datetime_complete and t.datetime_start else ""
        writer.writerow([t.number, t.state.name, "" if t.value is None else t.value,
                         *(t.params.get(k, "") for k in params), *(t.user_attrs.get(k, "") for k in notes), seconds])
    return out.getvalue()


def best_trial(study):
    """The best COMPLETE trial, or None."""
    from optuna.trial import TrialState

    if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        return None
    return study.best_trial


def best_config(config: dict[str, Any], trial, settings: TuneSettings) -> str:
    header = (f"# lit-marl tune: the config with trial {trial.number}'s parameters ({settings.objective} "
              f"{trial.value:.6g}, interquartile mean over seeds {settings.seeds})\n")
    header += "".join(f"#   {key}: {value!r}\n" for key, value in trial.params.items())
    return header + yaml.safe_dump(with_params(config, trial.params), sort_keys=False)


def _save(figure, path: Path) -> None:
    import matplotlib.pyplot as plt

    with atomic_target(path) as tmp:
        figure.savefig(tmp, dpi=100, bbox_inches="tight")
    plt.close(figure)


def _plot_history(study, root: Path, settings: TuneSettings) -> None:
    from optuna.visualization.matplotlib import plot_optimization_history

    axes = plot_optimization_history(study, target_name=settings.objective)
    _save(axes.figure, root / "optimization_history.png")


def _plot_importances(study, root: Path, settings: TuneSettings) -> str | None:
    from optuna.trial import TrialState
    from optuna.visualization.matplotlib import plot_param_importances

    complete = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
    if len(settings.space) < 2 or complete < MIN_TRIALS_FOR_IMPORTANCES:
        return (f"param_importances.png not made: it needs 2 or more parameters and {MIN_TRIALS_FOR_IMPORTANCES} or "
                f"more completed trials ({len(settings.space)} and {complete} here)")
    axes = plot_param_importances(study, target_name=settings.objective)
    _save(axes.figure, root / "param_importances.png")
    return None


def _plot_best_curve(study, root: Path, settings: TuneSettings) -> str | None:
    import matplotlib.pyplot as plt

    trial = best_trial(study)
    if trial is None:
        return "best_trial_curve.png not made: no trial has completed"
    figure, axes = plt.subplots(figsize=(6, 4))
    for seed in settings.seeds:
        curve = evaluation_curve(trial_folder(root, trial.number) / f"seed_{seed}")
        if curve:
            axes.plot([c[0] for c in curve], [c[1] for c in curve], marker="o", label=f"seed {seed}")
    axes.set_xlabel("frames")
    axes.set_ylabel("val/return")
    axes.set_title(f"trial {trial.number} (best): evaluations")
    axes.legend()
    _save(figure, root / "best_trial_curve.png")
    return None


def write_results(root: Path, study, settings: TuneSettings, config: dict[str, Any], log=print) -> None:
    """``trials.csv``, ``best.yaml`` (when a trial completed) and the plots, in the study folder."""
    write_atomic(root / "trials.csv", trials_table(study), overwrite=True)
    trial = best_trial(study)
    if trial is None:
        log(f"lit-marl tune: no trial has completed; best.yaml not written (see {root / 'trials.csv'})")
    else:
        write_atomic(root / "best.yaml", best_config(config, trial, settings), overwrite=True)
        log(f"lit-marl tune: best trial {trial.number}: {settings.objective} {trial.value:.4g} with {trial.params}; "
            f"config {root / 'best.yaml'}")
    try:
        import matplotlib

        matplotlib.use("Agg")
    except ImportError:
        log("lit-marl tune: no plots: matplotlib is not installed (pip install 'lit-marl[eval]')")
        return
    for plot in (_plot_history, _plot_importances, _plot_best_curve):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # optuna's ExperimentalWarning for its matplotlib plots
                note = plot(study, root, settings)
        except Exception as err:  # noqa: BLE001 (a plot is never worth failing a study for)
            note = f"{plot.__name__.removeprefix('_plot_')} plot not made: {type(err).__name__}: {err}"
        if note:
            log(f"lit-marl tune: {note}")


def write_study_results(root: Path, log=print) -> None:
    """``best.yaml``, ``trials.csv`` and the plots of the study in ``root``, from what it holds now."""
    import optuna  # the optional extra ``tune``

    settings = parse_settings(yaml.safe_load((root / SETTINGS_FILE).read_text()))
    config = yaml.safe_load((root / BASE_CONFIG).read_text())
    study = optuna.load_study(study_name=STUDY_NAME, storage=journal_storage(root / JOURNAL))
    write_results(root, study, settings, config, log=log)
