"""Studies on a real SLURM cluster (``bash scripts/start_slurm.sh`` makes a one-node one; CI runs these after it):
a grid as one job array, a cancelled or killed run resumed by the next submission, a run requeued at its time limit,
and a study whose SLURM workers share one journal. Without SLURM these tests fail: they are what proves the launcher.

Runs are tiny (40 frames an iteration); where a test needs a run interrupted at a known point, its first attempt
sleeps a second after each iteration (``tests.helpers.slurm_helpers.SlowFirstAttempt``), whatever the machine's speed."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from lit_marl.cli import main
from lit_marl.slurm.jobs import queued, read_jobs, wait_for
from lit_marl.tune.journal import journal_storage
from lit_marl.tune.study import JOURNAL, STUDY_NAME
from tests.helpers.runs import metric_frames, tiny_balance, tiny_grid
from tests.helpers.waiting import wait_until
from tests.tune.test_tune import _tiny_study_files

pytestmark = pytest.mark.slurm

SLOW_FIRST = {"class_path": "tests.helpers.slurm_helpers.SlowFirstAttempt", "init_args": {"seconds": 1.0}}


@pytest.fixture(autouse=True)
def _cluster():
    """SLURM answers here (a missing one fails the test: `bash scripts/start_slurm.sh`); the test's jobs are
    cancelled when it ends."""
    if shutil.which("sbatch") is None or subprocess.run(["sinfo", "-h"], capture_output=True).returncode != 0:
        pytest.fail("no SLURM cluster answers here: run `bash scripts/start_slurm.sh` (as root) first")
    before = set(queued())
    yield
    mine = [job for job in queued() if job not in before]
    if mine:
        subprocess.run(["scancel", *mine], check=False)


def _slurm_grid(tmp_path: Path, name: str, slurm: dict, callbacks: list, **changes) -> tuple[Path, Path]:
    path = tiny_grid(tmp_path, name=name, launcher="slurm", slurm=slurm, **changes)
    grid = yaml.safe_load(path.read_text())
    grid["overrides"]["trainer.callbacks"] = callbacks
    path.write_text(yaml.safe_dump(grid))
    return path, tmp_path / "bench" / name


def test_a_grid_runs_as_one_job_array_and_reads_like_a_local_one(tmp_path, capsys):
    """2 algorithms x 1 task x 2 seeds through sbatch: one array, one task per run, each a lit-marl fit whose world is
    its own (one process, or the two DDP processes of its trainer.devices, never SLURM's tasks); --status and
    lit-marl report read the folder; a second submission submits nothing."""
    ippo = tmp_path / "ippo.yaml"
    ippo.write_text(tiny_balance(tmp_path / "mappo.yaml").read_text().replace("algorithms.MAPPO", "algorithms.IPPO"))
    ddp = {"trainer.strategy": "ddp", "trainer.devices": 2, "trainer.accelerator": "cpu"}
    grid, root = _slurm_grid(tmp_path, "array", {"timeout_min": 10, "cpus_per_task": 1},
                             [{"class_path": "tests.helpers.slurm_helpers.RecordEnvironment"}],
                             algorithms={"mappo": str(tmp_path / "mappo.yaml"),
                                         "ippo": {"config": str(ippo), "overrides": ddp}})
    assert main(["benchmark", "--config", str(grid)]) is None
    jobs = read_jobs(root)
    assert sorted(jobs) == [f"balance/{a}/seed_{s}" for a in ("ippo", "mappo") for s in (0, 1)]
    assert len({job["job_id"].split("_")[0] for job in jobs.values()}) == 1  # one array
    main(["benchmark", "--config", str(grid)])  # while they are queued or running: nothing submitted twice
    assert "0 to resume, 0 to start" in capsys.readouterr().out and read_jobs(root) == jobs

    assert main(["benchmark", "--config", str(grid), "--wait"]) is None
    for name, job in jobs.items():
        run = root / name
        assert json.loads((run / "finished.json").read_text())["frames"] == 400
        assert [p.name for p in (run / "train").iterdir()] == ["version_0"]
        seen = json.loads((run / "train" / "version_0" / "environment.json").read_text())
        assert seen == {"world_size": 2 if "ippo" in name else 1, "num_nodes": 1,
                        "cluster_environment": "LightningEnvironment"}
    capsys.readouterr()
    main(["benchmark", "--config", str(grid), "--status"])
    rows = [line.split("|") for line in capsys.readouterr().out.splitlines() if "| balance |" in line]
    assert [(r[4].strip(), r[5].strip(), r[6].strip()) for r in rows] == \
        [("finished", jobs[f"balance/{a}/seed_{s}"]["job_id"], "400") for a in ("ippo", "mappo") for s in (0, 1)]
    main(["report", str(root), "--out", str(tmp_path / "report"), "--n_resamples", "200"])
    assert (tmp_path / "report" / "report.md").is_file()


def _fit_pid(run_config: Path) -> int | None:
    """The lit-marl fit process of one run (its command line names the run's config), started by this test's job."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if str(run_config).encode() in cmdline and b"fit" in cmdline:
                return int(proc.name)
    return None


def test_a_cancelled_and_a_killed_run_resume_when_the_grid_is_submitted_again(tmp_path, capsys):
    grid, root = _slurm_grid(tmp_path, "cancel", {"timeout_min": 10, "cpus_per_task": 1}, [SLOW_FIRST])
    main(["benchmark", "--config", str(grid)])
    cancelled, killed = root / "balance" / "mappo" / "seed_0", root / "balance" / "mappo" / "seed_1"
    first = {run: run / "train" / "version_0" / "checkpoints" / "last.ckpt" for run in (cancelled, killed)}
    wait_until(lambda: all(p.is_file() for p in first.values()), "a last.ckpt in both runs", timeout=180)
    jobs = read_jobs(root)
    subprocess.run(["scancel", jobs["balance/mappo/seed_0"]["job_id"]], check=True)  # SIGTERM: a checkpoint
    os.kill(_fit_pid(killed / "run_config.yaml"), signal.SIGKILL)  # no warning: the periodic last.ckpt
    wait_for({job["job_id"] for job in jobs.values()}, poll_s=1.0)
    capsys.readouterr()
    main(["benchmark", "--config", str(grid), "--status"])
    status = capsys.readouterr().out
    assert status.count("| interrupted (resumable) |") == 2, status
    stopped_at = {run: metric_frames(run / "train" / "version_0" / "metrics.csv")[-1] for run in (cancelled, killed)}
    assert all(0 < frames < 400 for frames in stopped_at.values()), stopped_at

    main(["benchmark", "--config", str(grid), "--wait"])
    assert "0 finished, 0 queued or running already, 2 to resume, 0 to start" in capsys.readouterr().out
    for run in (cancelled, killed):
        info = json.loads((run / "finished.json").read_text())
        assert info["frames"] == 400 and info["resumed_from"].endswith("version_0/checkpoints/last.ckpt")
        resumed = metric_frames(run / "train" / "version_1" / "metrics.csv")
        assert resumed[0] > 40 and resumed[-1] == 400  # continued, not restarted
    assert read_jobs(root)["balance/mappo/seed_0"]["job_id"] != jobs["balance/mappo/seed_0"]["job_id"]


def test_a_run_at_its_time_limit_is_requeued_and_finishes(tmp_path):
    """A one-minute limit, SIGUSR2 5 s before it (SLURM sends it up to 30 s earlier): the first attempt (slow) is
    checkpointed and requeued by submitit, and the same job resumes from last.ckpt until the run has its frames."""
    grid, root = _slurm_grid(tmp_path, "limit", {"timeout_min": 1, "signal_delay_s": 5, "max_requeues": 5},
                             [SLOW_FIRST], seeds=[0])
    changed = yaml.safe_load(grid.read_text())
    changed["overrides"]["model.init_args.max_frames"] = 2000  # 50 iterations: more than a minute the first time
    grid.write_text(yaml.safe_dump(changed))
    main(["benchmark", "--config", str(grid), "--wait"])
    run = root / "balance" / "mappo" / "seed_0"
    info = json.loads((run / "finished.json").read_text())
    assert info["frames"] == 2000
    versions = sorted(int(p.name.split("_")[1]) for p in (run / "train").iterdir())
    assert len(versions) >= 2, "the run was not requeued"
    assert metric_frames(run / "train" / f"version_{versions[1]}" / "metrics.csv")[0] > 40  # resumed
    (job,) = read_jobs(root).values()  # one submission, one job: requeued, not submitted again
    (log,) = Path(job["submission"]).glob(f"{job['job_id']}/*_log.out")
    text = log.read_text()
    assert "this job is timed-out" in text and f"Requeued job {job['job_id']}" in text


def test_a_study_with_two_slurm_workers_survives_a_cancelled_worker_and_writes_a_best_config(tmp_path):
    """trials run as SLURM array tasks sharing one journal; the pruning callback reports from inside them; a worker
    cancelled mid-trial leaves its trial FAIL and its parameters retried; best.yaml runs."""
    config, space = _tiny_study_files(tmp_path)
    data = yaml.safe_load(config.read_text())
    data["model"]["init_args"]["max_frames"] = 120  # three iterations, each evaluated (and reported)
    config.write_text(yaml.safe_dump(data))
    space_data = yaml.safe_load(space.read_text())
    space_data.update(pruner={"type": "median", "n_startup_trials": 1}, launcher="slurm",
                      slurm={"timeout_min": 10, "cpus_per_task": 1})
    space.write_text(yaml.safe_dump(space_data))
    study_dir = tmp_path / "study"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), os.environ.get(
        "PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "lit_marl", "tune", "--config", str(config), "--space",
                             str(space), "--out", str(study_dir), "--trials", "4", "--workers", "2", "--wait"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        worker_log = study_dir / "workers" / "worker_0.log"
        wait_until(lambda: worker_log.is_file() and "(worker 0)" in worker_log.read_text(), "worker 0's first trial",
                   timeout=180)
        subprocess.run(["scancel", read_jobs(study_dir)["worker_0"]["job_id"]], check=True)  # mid-trial
        out, _ = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    study = optuna.load_study(study_name=STUDY_NAME, storage=journal_storage(study_dir / JOURNAL))
    states = [t.state for t in study.trials]
    failed = [t for t in study.trials if t.state == TrialState.FAIL]
    assert len(failed) == 1 and failed[0].user_attrs["failed_because"] == "its worker stopped", states
    retry = [t for t in study.trials if t.user_attrs.get("retry_of") == failed[0].number]
    assert len(retry) == 1 and retry[0].params == failed[0].params
    finished = [t for t in study.trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(finished) == 4 and states.count(TrialState.COMPLETE) >= 1, states
    assert all(t.intermediate_values for t in finished)  # every run reported its evaluations to the study
    rows = list(csv.DictReader(open(study_dir / "trials.csv")))
    assert len(rows) == len(study.trials)
    best = yaml.safe_load((study_dir / "best.yaml").read_text())
    assert best["model"]["init_args"]["lr"] == study.best_params["model.init_args.lr"]
    main(["fit", "--config", str(study_dir / "best.yaml"), "--trainer.default_root_dir", str(tmp_path / "best")])
    assert list((tmp_path / "best").glob("*/version_0/checkpoints/last.ckpt"))
