"""``lit-marl tune``: the search space is checked by name before any trial, the pruning callback stops a worse trial,
workers share one journal-file study without exceeding its trial count, a killed worker's trial is failed and
retried, and a study writes best.yaml (which runs), trials.csv and plots, and continues when run again."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml

optuna = pytest.importorskip("optuna")

from optuna.trial import TrialState  # noqa: E402

from lit_marl.cli import main  # noqa: E402
from lit_marl.errors import ConfigError  # noqa: E402
from lit_marl.tune.command import prepare  # noqa: E402
from lit_marl.tune.journal import journal_storage  # noqa: E402
from lit_marl.tune.pruning import PRUNED_AT, TrialPruning  # noqa: E402
from lit_marl.tune.space import parse_settings  # noqa: E402
from lit_marl.tune.study import (  # noqa: E402
    FAILED_BECAUSE, JOURNAL, RETRY_OF, STUDY_NAME, Worker, objective_value,
)
from tests.helpers.tiny import ROOT  # noqa: E402
from tests.helpers.runs import tiny_balance  # noqa: E402
from tests.helpers.waiting import wait_until  # noqa: E402

KEYS = {"model.init_args.lr", "model.init_args.n_minibatch_iters", "model.init_args.share_policy_params"}
LR = {"type": "log_float", "low": 1.0e-5, "high": 1.0e-3}


def _settings(**changes):
    return {"space": {"model.init_args.lr": LR}, **changes}


@pytest.mark.parametrize(("data", "message"), [
    ({"space": {"model.init_args.lrr": LR}},
     "space.model.init_args.lrr: not a key of the config; did you mean 'model.init_args.lr'? allowed: dotted keys as "
     "`lit-marl fit --config ... --print_config` shows them"),
    ({"space": {"model.init_args.lr": {"type": "float", "low": 0.1, "high": 0.1}}},
     "space.model.init_args.lr: low 0.1 must be below high 0.1"),
    ({"space": {"model.init_args.n_minibatch_iters": {"type": "int", "low": 10, "high": 1}}},
     "space.model.init_args.n_minibatch_iters: low 10 must be below high 1"),
    ({"space": {"model.init_args.n_minibatch_iters": {"type": "int", "low": 1, "high": 10, "step": 2}}},
     "space.model.init_args.n_minibatch_iters: high - low (9) is not a multiple of step 2"),
    ({"space": {"model.init_args.lr": {"type": "log_float", "low": 0, "high": 1.0e-3}}},
     "space.model.init_args.lr.low: a log_float range must be positive, got 0; allowed: low > 0"),
    ({"space": {"model.init_args.lr": {"type": "logfloat", "low": 1.0e-5, "high": 1.0e-3}}},
     "space.model.init_args.lr.type: 'logfloat' is not a distribution; did you mean 'log_float', 'float'? allowed: "
     "float, "
     "log_float, int, categorical"),
    ({"space": {"model.init_args.lr": {"type": "float", "low": 0.1, "hi": 0.3}}},
     "space.model.init_args.lr: float takes low, high, not hi"),
    ({"space": {"model.init_args.share_policy_params": {"type": "categorical", "choices": []}}},
     "space.model.init_args.share_policy_params.choices: must be a non-empty list, got []"),
    ({"space": {}}, "space: must be a non-empty mapping of dotted config keys to distributions, got {}"),
    (_settings(objective="return"),
     "objective: 'return' is not one of val/return, auc (val/return: the last evaluation's; auc: the area under the "
     "evaluation curve)"),
    (_settings(direction="max"), "direction: 'max' is not one of maximize, minimize"),
    (_settings(pruner="medain"), "pruner: 'medain' is not one of none, median, hyperband; did you mean 'median'?"),
    (_settings(pruner={"type": "median", "warmup": 3}),
     "pruner.warmup: MedianPruner has no argument 'warmup'; did you mean 'n_warmup_steps'? allowed: n_startup_trials, "
     "n_warmup_steps, "
     "interval_steps, n_min_trials"),
    (_settings(sampler="cmaes"), "sampler: 'cmaes' is not one of tpe, random"),
    (_settings(seeds=[]), "seeds: must be a non-empty list of distinct integers, got []"),
    (_settings(trials=0), "trials: must be a positive integer, got 0"),
    (_settings(trial=3), "trial: not a search-space file setting; did you mean 'trials'? allowed: space, objective, "
                         "direction, trials, seeds, sampler, pruner, heartbeat_timeout, launcher, slurm"),
])
def test_a_bad_search_space_is_refused_by_name(data, message):
    with pytest.raises(ConfigError) as err:
        parse_settings(data, config_keys=KEYS)
    assert str(err.value) == message


def test_the_space_file_gives_distributions_and_the_command_line_wins():
    settings = parse_settings({
        "space": {"model.init_args.lr": LR,
                  "model.init_args.n_minibatch_iters": {"type": "int", "low": 1, "high": 9, "step": 2},
                  "model.init_args.share_policy_params": {"type": "categorical", "choices": [True, False]}},
        "trials": 7, "seeds": [1, 2], "pruner": {"type": "hyperband", "min_resource": 40}},
        {"trials": 3, "objective": "auc", "seeds": None}, config_keys=KEYS)
    space = settings.space
    assert space["model.init_args.lr"] == optuna.distributions.FloatDistribution(1e-5, 1e-3, log=True)
    assert space["model.init_args.n_minibatch_iters"] == optuna.distributions.IntDistribution(1, 9, step=2)
    assert space["model.init_args.share_policy_params"].choices == (True, False)
    assert (settings.trials, settings.objective, settings.seeds, settings.direction) == (3, "auc", [1, 2], "maximize")


def test_auc_is_the_mean_return_over_frames():
    curve = [(0, 0.0), (100, 10.0), (300, 10.0)]
    assert objective_value(curve, "val/return") == 10.0
    assert objective_value(curve, "auc") == pytest.approx((500 + 2000) / 300)


# ---------------------------------------------------------------------- pruning callback, on a real journal
def _study(root: Path, pruner=None, direction="maximize"):
    storage = journal_storage(root / JOURNAL)
    study = optuna.create_study(study_name=STUDY_NAME, storage=storage, direction=direction, load_if_exists=True)
    study.set_user_attr("pruner", pruner or "none")
    return study


def _evaluate(callback: TrialPruning, value: float, frames: int) -> bool:
    trainer = SimpleNamespace(sanity_checking=False, state=SimpleNamespace(fn="fit"), is_global_zero=True,
                              callback_metrics={"val/return": torch.tensor(value)}, should_stop=False,
                              strategy=SimpleNamespace(broadcast=lambda obj, src=0: obj))
    callback.on_validation_end(trainer, SimpleNamespace(frames=frames))
    return trainer.should_stop


def test_the_pruning_callback_stops_a_clearly_worse_trial(tmp_path):
    study = _study(tmp_path, {"type": "median", "n_startup_trials": 2})
    for value in (10.0, 12.0):  # two finished trials: the median at 40 and 80 frames is 11
        study.add_trial(optuna.trial.create_trial(value=value, intermediate_values={40: value, 80: value}))
    good, bad = study.ask(), study.ask()
    good_callback = TrialPruning(str(tmp_path / JOURNAL), STUDY_NAME, good.number)
    bad_callback = TrialPruning(str(tmp_path / JOURNAL), STUDY_NAME, bad.number)
    assert not _evaluate(good_callback, 20.0, 40) and not _evaluate(good_callback, 21.0, 80)
    assert _evaluate(bad_callback, -5.0, 40)
    trials = {t.number: t for t in study.get_trials()}
    assert trials[good.number].intermediate_values == {40: 20.0, 80: 21.0}
    assert trials[bad.number].intermediate_values == {40: -5.0}
    assert trials[bad.number].user_attrs == {PRUNED_AT: 40} and PRUNED_AT not in trials[good.number].user_attrs
    # a trial no longer running (its worker declared gone) stops its run too
    study.tell(good.number, state=TrialState.FAIL)
    assert _evaluate(TrialPruning(str(tmp_path / JOURNAL), STUDY_NAME, good.number), 30.0, 120)


# ---------------------------------------------------------------------- workers, with fake runs
def _worker(root: Path, trials=4, seeds=(0,), pruner="none", objective="val/return") -> Worker:
    settings = parse_settings({"space": {"model.init_args.lr": LR}, "trials": trials, "seeds": list(seeds),
                               "pruner": pruner, "objective": objective})
    return Worker(root, settings, {"model": {"init_args": {"lr": 0.1}}}, log=lambda line: None)


def _fake_fit(curves: dict[int, list[tuple[int, float]]], prune_after_seed0: bool = False):
    """A ``Worker._fit`` that writes the seed's metrics.csv (and, like TrialPruning would, marks the trial pruned)."""
    def fit(worker, trial, folder):
        seed = yaml.safe_load((folder / "run_config.yaml").read_text())["seed_everything"]
        (folder / "train" / "version_0").mkdir(parents=True)
        with open(folder / "train" / "version_0" / "metrics.csv", "w") as f:
            f.write("counters/frames,val/return\n" + "".join(f"{a},{b}\n" for a, b in curves[seed]))
        if prune_after_seed0:
            trial.set_user_attr(PRUNED_AT, curves[seed][-1][0])
        fit.seeds.append(seed)
        return 0
    fit.seeds = []
    return fit


def test_a_trial_is_the_interquartile_mean_of_its_seeds(tmp_path, monkeypatch):
    _study(tmp_path)
    curves = {s: [(40, 0.0), (80, float(v))] for s, v in zip(range(4), (1.0, 2.0, 3.0, 100.0))}
    monkeypatch.setattr(Worker, "_fit", _fake_fit(curves))
    assert _worker(tmp_path, trials=1, seeds=range(4)).run() == 1
    (trial,) = _study(tmp_path).get_trials()
    assert trial.state == TrialState.COMPLETE and trial.value == pytest.approx(2.5)  # IQM of 1, 2, 3, 100
    config = yaml.safe_load((tmp_path / "trials" / "trial_0000" / "seed_3" / "run_config.yaml").read_text())
    assert config["model"]["init_args"]["lr"] == trial.params["model.init_args.lr"] and config["seed_everything"] == 3
    assert "callbacks" not in config["trainer"]  # pruning reports the first seed only
    first = yaml.safe_load((tmp_path / "trials" / "trial_0000" / "seed_0" / "run_config.yaml").read_text())
    assert first["trainer"]["callbacks"][0]["init_args"]["trial_number"] == 0


def test_a_pruned_trial_runs_no_further_seed(tmp_path, monkeypatch):
    _study(tmp_path)
    fit = _fake_fit({0: [(40, -1.0)], 1: [(40, 5.0)]}, prune_after_seed0=True)
    monkeypatch.setattr(Worker, "_fit", fit)
    _worker(tmp_path, trials=1, seeds=(0, 1)).run()
    (trial,) = _study(tmp_path).get_trials()
    assert trial.state == TrialState.PRUNED and fit.seeds == [0]


def test_a_failed_fit_fails_its_trial_and_counts(tmp_path, monkeypatch):
    _study(tmp_path)
    monkeypatch.setattr(Worker, "_fit", lambda worker, trial, folder: 3)  # e.g. NaN stopped training
    assert _worker(tmp_path, trials=2).run() == 2  # not retried: the study ends
    trials = _study(tmp_path).get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL] * 2
    assert trials[0].user_attrs["fit_failed"].startswith("seed 0: lit-marl fit exit 3; see ")


def test_running_again_continues_up_to_the_trial_count(tmp_path, monkeypatch):
    _study(tmp_path)
    monkeypatch.setattr(Worker, "_fit", _fake_fit({0: [(40, 1.0)]}))
    assert _worker(tmp_path, trials=2).run() == 2
    assert _worker(tmp_path, trials=3).run() == 1  # one more, not three
    assert _worker(tmp_path, trials=3).run() == 0
    assert [(t.number, t.state) for t in _study(tmp_path).get_trials()] == [(n, TrialState.COMPLETE) for n in range(3)]


def test_a_study_folder_refuses_other_settings_but_takes_more_trials(tmp_path):
    settings = parse_settings(_settings(trials=2))
    config = {"model": {"init_args": {"lr": 0.1}}}
    prepare(tmp_path, settings, config)
    prepare(tmp_path, parse_settings(_settings(trials=5)), config)
    with pytest.raises(ConfigError, match=r"^seeds: differs from the study in .* \(changed: seeds\); allowed: the same "
                                          r"config and settings to continue it \(only trials may change\)"):
        prepare(tmp_path, parse_settings(_settings(seeds=[1])), config)
    with pytest.raises(ConfigError, match=r"^config: differs .* \(changed: config\)"):
        prepare(tmp_path, settings, {"model": {"init_args": {"lr": 0.2}}})
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"^out: .*other' holds files but no study \(tune.yaml is missing\)"):
        prepare(tmp_path / "other", settings, config)


WORKER_SCRIPT = """
import sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from lit_marl.tune.space import parse_settings
from lit_marl.tune.study import Worker
mode, folder = sys.argv[1], Path(sys.argv[2])
settings = parse_settings({{"space": {{"model.init_args.lr": {lr!r}}}, "trials": 8, "pruner": "none"}})
worker = Worker(folder, settings, {{}}, log=lambda line: None)
if mode == "hang":  # take a trial, then hang until killed
    print(worker.ask().number, flush=True)
    time.sleep(600)
first = [True]
def run_trial(self, trial):
    # a worker holds its first trial until the other worker has taken one, so that a slow start of
    # one process cannot let the other take all eight (both must take part for the test to mean anything)
    deadline = time.monotonic() + 60
    while first[0] and len(self.study.get_trials()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    first[0] = False
    time.sleep(0.05)
    self.study.tell(trial.number, trial.number)
Worker.run_trial = run_trial
print(worker.run(), flush=True)
"""


def _script(tmp_path: Path) -> Path:
    path = tmp_path / "worker.py"
    path.write_text(textwrap.dedent(WORKER_SCRIPT.format(root=str(ROOT), lr=LR)))
    return path


def test_two_worker_processes_share_the_journal_without_exceeding_the_trials(tmp_path):
    _study(tmp_path)
    script = _script(tmp_path)
    procs = [subprocess.Popen([sys.executable, str(script), "run", str(tmp_path)], stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    ran = [int(p.communicate(timeout=120)[0].split()[-1]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    trials = _study(tmp_path).get_trials()
    assert sum(ran) == 8 and min(ran) > 0  # both took trials, 8 in all
    assert [t.number for t in trials] == list(range(8))
    assert all(t.state == TrialState.COMPLETE and t.value == t.number for t in trials)
    # a fresh process replays the same journal
    assert len(optuna.load_study(study_name=STUDY_NAME, storage=journal_storage(tmp_path / JOURNAL)).trials) == 8


def test_a_killed_workers_trial_is_failed_and_retried_and_a_live_ones_left_running(tmp_path):
    _study(tmp_path)
    proc = subprocess.Popen([sys.executable, str(_script(tmp_path)), "hang", str(tmp_path)], stdout=subprocess.PIPE,
                            text=True)
    try:
        number = int(proc.stdout.readline())
        _worker(tmp_path).fail_gone_trials()  # its worker is alive: left alone
        assert _study(tmp_path).get_trials()[number].state == TrialState.RUNNING
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    worker = _worker(tmp_path, trials=1)
    retry = worker.ask()  # the next start marks it FAIL and takes its parameters again
    killed = _study(tmp_path).get_trials()[number]
    assert killed.state == TrialState.FAIL and killed.user_attrs[FAILED_BECAUSE] == "its worker stopped"
    assert retry.number == number + 1 and retry.params == killed.params and retry.user_attrs[RETRY_OF] == number
    worker.study.tell(retry.number, 1.0)
    assert worker.ask() is None  # the retry took the failed trial's place in the trial count


# ---------------------------------------------------------------------- the command, end to end
def _tiny_study_files(tmp_path: Path) -> tuple[Path, Path]:
    config_path = tiny_balance(tmp_path / "tiny.yaml")
    config = yaml.safe_load(config_path.read_text())
    config["model"]["init_args"].update(max_frames=40, n_minibatch_iters=1)  # one iteration, one evaluation
    config["model"]["init_args"]["task"]["init_args"]["scenario_kwargs"]["n_agents"] = 2
    config["trainer"].update(check_val_every_n_epoch=1, enable_model_summary=False, enable_progress_bar=False)
    config_path.write_text(yaml.safe_dump(config))
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({"space": {"model.init_args.lr": LR,
                                               "model.init_args.clip_epsilon": {"type": "float", "low": 0.1,
                                                                                "high": 0.3}},
                                     "pruner": "none"}))
    return config_path, space


def test_tune_help_lists_its_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["tune", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: lit-marl tune") and all(
        option in out for option in ("--config", "--space", "--trials", "--workers", "--out", "--pruner"))


def test_a_bad_space_stops_the_command_before_anything_is_written(tmp_path, capsys):
    config, space = _tiny_study_files(tmp_path)
    space.write_text(yaml.safe_dump({"space": {"model.init_args.clip_epsilom": LR}}))
    with pytest.raises(SystemExit) as exit_info:
        main(["tune", "--config", str(config), "--space", str(space), "--out", str(tmp_path / "study")])
    assert exit_info.value.code == 2
    assert "space.model.init_args.clip_epsilom: not a key of the config; did you mean 'model.init_args.clip_epsilon'?" \
        in capsys.readouterr().err
    assert not (tmp_path / "study").exists()


def test_a_one_trial_study_writes_a_best_config_that_runs(tmp_path, capsys):
    config, space = _tiny_study_files(tmp_path)
    study_dir = tmp_path / "study"
    main(["tune", "--config", str(config), "--space", str(space), "--out", str(study_dir), "--trials", "1"])
    (trial,) = optuna.load_study(study_name=STUDY_NAME, storage=journal_storage(study_dir / JOURNAL)).trials
    with open(study_dir / "trials" / "trial_0000" / "seed_0" / "train" / "version_0" / "metrics.csv") as f:
        returns = [float(r["val/return"]) for r in csv.DictReader(f) if r.get("val/return")]
    assert trial.state == TrialState.COMPLETE and trial.value == returns[-1]  # the run's last val/return
    assert trial.intermediate_values == {40: returns[-1]}  # reported from inside the fit process
    best = yaml.safe_load((study_dir / "best.yaml").read_text())
    assert best["model"]["init_args"]["lr"] == trial.params["model.init_args.lr"]
    assert best["model"]["init_args"]["clip_epsilon"] == trial.params["model.init_args.clip_epsilon"]
    assert {k: v for k, v in best.items() if k != "model"} == \
        {k: v for k, v in yaml.safe_load(config.read_text()).items() if k != "model"}  # nothing else changed
    (row,) = csv.DictReader(open(study_dir / "trials.csv"))
    assert (row["number"], row["state"], float(row["value"]), float(row["model.init_args.lr"])) == \
        ("0", "COMPLETE", trial.value, trial.params["model.init_args.lr"])
    assert (study_dir / "optimization_history.png").stat().st_size > 0
    assert (study_dir / "best_trial_curve.png").stat().st_size > 0
    assert "param_importances.png not made: it needs 2 or more parameters and 4 or more completed trials (2 and 1 " \
        "here)" in capsys.readouterr().out  # said, not raised
    main(["fit", "--config", str(study_dir / "best.yaml")])  # best.yaml is a config lit-marl fit runs
    (metrics,) = Path("runs").glob("*/version_0/metrics.csv")
    assert np.isfinite([float(r["val/return"]) for r in csv.DictReader(open(metrics)) if r.get("val/return")]).all()


def test_a_clearly_worse_trial_is_pruned_in_its_fit(tmp_path):
    config, space = _tiny_study_files(tmp_path)
    data = yaml.safe_load(config.read_text())
    data["model"]["init_args"]["max_frames"] = 120  # three iterations, each evaluated, unless pruned
    config.write_text(yaml.safe_dump(data))
    space_data = yaml.safe_load(space.read_text())
    space_data["pruner"] = {"type": "median", "n_startup_trials": 1}
    space.write_text(yaml.safe_dump(space_data))
    study_dir = tmp_path / "study"
    command = ["tune", "--config", str(config), "--space", str(space), "--out", str(study_dir)]
    main([*command, "--trials", "1", "--dry_run"])
    study = prepare(study_dir, parse_settings(space_data), data)
    study.add_trial(optuna.trial.create_trial(value=1e6, intermediate_values={40: 1e6, 80: 1e6, 120: 1e6}))
    main([*command, "--trials", "2"])
    pruned = optuna.load_study(study_name=STUDY_NAME, storage=journal_storage(study_dir / JOURNAL)).trials[1]
    assert pruned.state == TrialState.PRUNED and list(pruned.intermediate_values) == [40]
    assert pruned.user_attrs[PRUNED_AT] == 40
    run = study_dir / "trials" / "trial_0001" / "seed_0"
    frames = {int(float(r["counters/frames"])) for r in csv.DictReader(open(run / "train" / "version_0" /
                                                                             "metrics.csv"))}
    assert frames == {40}  # stopped after the first evaluation, not at max_frames
    log = (run / "train.log").read_text()
    assert "trial 1 pruned at 40 frames" in log and "Traceback" not in log
    assert list(csv.DictReader(open(study_dir / "trials.csv")))[1]["state"] == "PRUNED"


@pytest.mark.slow  # two workers, then a third trial, then a fit of best.yaml: about 70 s on two busy cores
def test_a_study_with_two_workers_writes_a_best_config_that_runs_and_continues(tmp_path, capsys):
    config, space = _tiny_study_files(tmp_path)
    study_dir = tmp_path / "study"
    command = ["tune", "--config", str(config), "--space", str(space), "--out", str(study_dir)]
    main([*command, "--trials", "2", "--workers", "2"])
    study = optuna.load_study(study_name=STUDY_NAME, storage=journal_storage(study_dir / JOURNAL))
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 2
    main([*command, "--trials", "3"])  # continues: one more trial, the first two untouched
    assert "2 trials so far, up to 3" in capsys.readouterr().out
    study = optuna.load_study(study_name=STUDY_NAME, storage=journal_storage(study_dir / JOURNAL))
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 3
    assert sorted(p.name for p in (study_dir / "trials").iterdir()) == ["trial_0000", "trial_0001", "trial_0002"]
    assert [p.name for p in (study_dir / "trials" / "trial_0000" / "seed_0" / "train").iterdir()] == ["version_0"]
    # each trial's value is its run's last val/return
    for trial in study.trials:
        with open(study_dir / "trials" / f"trial_{trial.number:04d}" / "seed_0" / "train" / "version_0" /
                  "metrics.csv") as f:
            assert trial.value == [float(r["val/return"]) for r in csv.DictReader(f) if r.get("val/return")][-1]
    best = yaml.safe_load((study_dir / "best.yaml").read_text())
    assert study.best_value == max(t.value for t in study.trials)
    assert best["model"]["init_args"]["lr"] == study.best_params["model.init_args.lr"]
    assert best["model"]["init_args"]["clip_epsilon"] == study.best_params["model.init_args.clip_epsilon"]
    rows = list(csv.DictReader(open(study_dir / "trials.csv")))
    assert [(r["number"], r["state"], float(r["value"])) for r in rows] == \
        [(str(t.number), "COMPLETE", t.value) for t in study.trials]
    assert all(float(r["model.init_args.lr"]) == t.params["model.init_args.lr"] for r, t in zip(rows, study.trials))
    assert (study_dir / "optimization_history.png").stat().st_size > 0
    assert (study_dir / "best_trial_curve.png").stat().st_size > 0
    main(["fit", "--config", str(study_dir / "best.yaml")])  # best.yaml is a config lit-marl fit runs
    (metrics,) = Path("runs").glob("*/version_0/metrics.csv")
    assert np.isfinite([float(r["val/return"]) for r in csv.DictReader(open(metrics)) if r.get("val/return")]).all()


@pytest.mark.slow  # a study killed during a fit, run again: about a minute on two busy cores
def test_a_study_killed_mid_trial_finishes_when_run_again(tmp_path, capsys):
    config, space = _tiny_study_files(tmp_path)
    study_dir = tmp_path / "study"
    command = ["tune", "--config", str(config), "--space", str(space), "--out", str(study_dir), "--trials", "2"]
    proc = subprocess.Popen([sys.executable, "-m", "lit_marl.cli", *command], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_until(lambda: list(study_dir.glob("trials/trial_0000/seed_0/train/version_0")), "trial 0's fit to start",
                   process=proc)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    main(command)
    study = optuna.load_study(study_name=STUDY_NAME, storage=journal_storage(study_dir / JOURNAL))
    states = [t.state for t in study.trials]
    assert states[0] == TrialState.FAIL and states.count(TrialState.COMPLETE) == 2 and TrialState.RUNNING not in states
    assert study.trials[1].params == study.trials[0].params and study.trials[1].user_attrs[RETRY_OF] == 0
