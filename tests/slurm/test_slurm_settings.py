"""The SLURM launcher without a cluster: its settings are refused by name before anything is submitted, each run's
state is read from its folder and the queue, and an array task's process sees no SLURM (``tests/slurm/test_slurm.py``
runs the real thing)."""

from __future__ import annotations

import json
import os
import pickle
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typing_extensions import override

from lit_marl.benchmark import Benchmark
from lit_marl.benchmark.slurm import FitRun, status_table
from lit_marl.cli import main
from lit_marl.errors import ConfigError
from lit_marl.slurm.jobs import Watched, child_env, record_jobs
from lit_marl.slurm.settings import SlurmSettings, check_cluster, parse_settings
from tests.helpers.tiny import ROOT
from tests.helpers.runs import tiny_grid
from tests.helpers.waiting import wait_until


@pytest.mark.parametrize("data, message", [
    ({"partiton": "gpu"}, "slurm.partiton: unknown SLURM setting; did you mean 'partition'? allowed: partition, "
                          "timeout_min, cpus_per_task, gpus_per_task, mem_gb, array_parallelism, signal_delay_s, "
                          "max_requeues, sbatch_flags"),
    ({"cpus_per_task": 0}, "slurm.cpus_per_task: must be a positive integer, got 0"),
    ({"timeout_min": -5}, "slurm.timeout_min: must be a positive integer, got -5"),
    ({"mem_gb": "16G"}, "slurm.mem_gb: must be a positive finite number, got '16G'"),
    ({"gpus_per_task": -1}, "slurm.gpus_per_task: must be an integer >= 0, got -1"),
    ({"array_parallelism": 1.5}, "slurm.array_parallelism: must be a positive integer, got 1.5"),
    ({"timeout_min": 1, "signal_delay_s": 60}, "slurm.signal_delay_s: 60 s is not shorter than the time limit "
                                               "(slurm.timeout_min 1 min)"),
    ({"sbatch_flags": {"time": "01:00:00"}}, "slurm.sbatch_flags.time: lit-marl sets this sbatch flag itself; "
                                             "allowed: the setting slurm.timeout_min"),
    ({"sbatch_flags": {"ntasks": 4}}, "slurm.sbatch_flags.ntasks: lit-marl sets this sbatch flag itself; allowed: "
                                      "nothing (one task per run, its logs in the grid's slurm/ folder, run in the "
                                      "submitting directory)"),
    ({"sbatch_flags": {"--qos": "high"}}, "slurm.sbatch_flags: '--qos' is not an sbatch flag name"),
    ("gpu", "slurm: must be a mapping of SLURM settings, got 'gpu'"),
])
def test_bad_slurm_settings_name_the_field(data, message):
    with pytest.raises(ConfigError) as err:
        parse_settings(data)
    assert str(err.value).startswith(message)


def test_settings_become_sbatch_flags():
    settings = parse_settings({"partition": "gpu", "timeout_min": 90, "cpus_per_task": 4, "gpus_per_task": 1,
                               "mem_gb": 16, "sbatch_flags": {"account": "lab", "exclusive": True}})
    assert settings.sbatch_args() == ["--time=90", "--cpus-per-task=4", "--partition=gpu", "--gpus-per-node=1",
                                      "--mem=16384M", "--account=lab", "--exclusive"]
    assert parse_settings(None) == SlurmSettings()


def _fake_slurm(folder: Path, partitions: str = "debug", sbatch_error: str = "", queue: str = "") -> None:
    """sinfo, squeue, scontrol and sbatch stand-ins: what the checks read, nothing submitted."""
    folder.mkdir()
    scripts = {"sinfo": f"echo '{partitions}'", "squeue": f"echo '{queue}'", "scontrol": "true",
               "sbatch": f"echo '{sbatch_error}' >&2; exit 1" if sbatch_error else "echo 'would start'"}
    for name, body in scripts.items():
        (folder / name).write_text(f"#!/bin/sh\n{body}\n")
        (folder / name).chmod(stat.S_IRWXU)


def test_no_sbatch_or_an_unknown_partition_is_refused_before_anything_is_submitted(tmp_path, monkeypatch, capsys):
    grid = tiny_grid(tmp_path, launcher="slurm", slurm={"partition": "gpu"})
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(SystemExit) as exit_info:
        main(["benchmark", "--config", str(grid)])
    assert exit_info.value.code == 2
    assert "launcher: 'slurm' but sbatch, squeue, sinfo, scontrol are not on PATH" in capsys.readouterr().err
    assert not (tmp_path / "bench").exists()  # nothing written, nothing submitted

    _fake_slurm(tmp_path / "bin", partitions="debug\nlong")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(ConfigError, match=r"slurm.partition: 'gpu' is not a partition of this cluster; allowed: "
                                          r"debug, long"):
        check_cluster(parse_settings({"partition": "gpu"}))
    check_cluster(parse_settings({"partition": "long"}))


def test_resources_the_cluster_refuses_are_named_before_submitting(tmp_path, monkeypatch):
    _fake_slurm(tmp_path / "bin", sbatch_error="sbatch: error: Batch job submission failed: Requested node "
                                               "configuration is not available")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(ConfigError) as err:
        check_cluster(parse_settings({"cpus_per_task": 64}))
    assert str(err.value).startswith("slurm: SLURM refuses these settings (--time=60 --cpus-per-task=64): sbatch: "
                                     "error: Batch job submission failed: Requested node configuration")


def test_a_grid_names_an_unknown_launcher(tmp_path):
    with pytest.raises(ConfigError, match="launcher: 'kubernetes' is not one of 'local', 'slurm'"):
        Benchmark(tiny_grid(tmp_path, launcher="kubernetes"))
    with pytest.raises(ConfigError, match="slurm.cpus: unknown SLURM setting"):
        Benchmark(tiny_grid(tmp_path, slurm={"cpus": 2}))  # checked with the local launcher too


def test_status_reads_each_runs_folder_and_the_queue(tmp_path):
    bench = Benchmark(tiny_grid(tmp_path, seeds=[0, 1, 2, 3, 4, 5, 6]))
    runs = {run.seed: run.folder for run in bench.runs}
    for folder in runs.values():
        folder.mkdir(parents=True)
    (runs[0] / "finished.json").write_text("{}")
    (runs[1] / "train" / "version_0" / "checkpoints").mkdir(parents=True)
    (runs[1] / "train" / "version_0" / "checkpoints" / "last.ckpt").write_bytes(b"")
    (runs[4] / "failed.json").write_text("{}")
    record_jobs(bench.root, {f"balance/mappo/seed_{s}": {"job_id": f"7_{s}"} for s in (0, 1, 2, 3, 4, 5)})
    table = status_table(bench, queue={"7_2": "RUNNING", "7_3": "PENDING"})
    states = [(line.split("|")[3].strip(), line.split("|")[4].strip(), line.split("|")[5].strip())
              for line in table.splitlines() if "| balance |" in line]
    assert states == [("0", "finished", "7_0"), ("1", "interrupted (resumable)", "7_1"), ("2", "running", "7_2"),
                      ("3", "pending", "7_3"), ("4", "failed", "7_4"),
                      ("5", "failed", "7_5"),  # submitted, gone from the queue, nothing written
                      ("6", "not started", "")]
    assert sorted(json.loads((bench.root / "slurm_jobs.json").read_text())) == [
        f"balance/mappo/seed_{s}" for s in range(6)]


def test_an_array_tasks_process_sees_no_slurm(monkeypatch):
    """Lightning takes SLURM_NTASKS for an srun launch of its own (world size, ranks, its own requeue on SIGUSR1)."""
    from lightning.fabric.plugins.environments import SLURMEnvironment

    for key, value in {"SLURM_NTASKS": "1", "SLURM_JOB_ID": "12", "SLURM_PROCID": "0", "SLURM_JOB_NAME": "lit-marl",
                       "SUBMITIT_EXECUTOR": "slurm", "CUDA_VISIBLE_DEVICES": "0", "SLURM_CPUS_PER_TASK": "4"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert SLURMEnvironment.detect()
    env = child_env()
    assert not [k for k in env if k.startswith(("SLURM_", "SUBMITIT_"))]
    assert env["CUDA_VISIBLE_DEVICES"] == "0" and env["OMP_NUM_THREADS"] == "4"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(Path(__file__).resolve().parents[2])
    monkeypatch.setattr(os, "environ", env)
    assert not SLURMEnvironment.detect()


def test_a_task_pickles_without_its_process(tmp_path):
    task = FitRun(str(tmp_path))
    task._proc = object()  # a process handle does not travel with a requeue
    copy = pickle.loads(pickle.dumps(task))
    assert copy.folder == str(tmp_path) and copy._proc is None


def test_a_local_launch_of_a_grid_with_runs_on_slurm_is_refused(tmp_path, monkeypatch, capsys):
    grid = tiny_grid(tmp_path)
    bench = Benchmark(grid)
    record_jobs(bench.root, {"balance/mappo/seed_1": {"job_id": "9_1"}})
    _fake_slurm(tmp_path / "bin", queue="9_1|RUNNING")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(SystemExit) as exit_info:
        main(["benchmark", "--config", str(grid)])
    assert exit_info.value.code == 2
    assert ("launcher: 1 run(s) of this grid are queued or running on SLURM (balance/mappo/seed_1: job 9_1); a local "
            "launch would run them twice") in capsys.readouterr().err
    assert not (bench.root / "balance").exists()


class _LateHandler(Watched):
    """A process that installs its SIGUSR1 handler (exit 138, as lit-marl fit after its checkpoint) a second late."""

    @override
    def command(self) -> list[str]:
        return [sys.executable, "-c", "import signal, sys, time; time.sleep(1.0); "
                "signal.signal(signal.SIGUSR1, lambda *_: sys.exit(138)); time.sleep(60)"]


def test_the_time_limit_signal_stops_the_process_at_its_handler_and_hands_back_a_fresh_task(tmp_path):
    """SLURM's SIGUSR2 reaches every process of the task: the watched one ignores it, and the stop signal is sent
    until its handler takes it (a run signalled during its start-up still checkpoints)."""
    task = _LateHandler(str(tmp_path))
    result = []
    thread = threading.Thread(target=lambda: result.append(task()))
    thread.start()
    wait_until(lambda: task._proc is not None, "the task to start its process", timeout=120)
    task._proc.send_signal(signal.SIGUSR2)
    time.sleep(0.3)
    assert task._proc.poll() is None  # not killed by SIGUSR2, nor by the SIGUSR1 that comes before its handler
    delayed = task.checkpoint()
    thread.join(timeout=30)
    assert task._proc.returncode == 138 and result == ["exit 138"]
    assert isinstance(delayed.function, _LateHandler) and delayed.function is not task
    assert delayed.function.folder == str(tmp_path) and delayed.function._proc is None


def test_importing_submitit_leaves_the_applications_logging_alone(tmp_path):
    """submitit's first import runs logging.config.dictConfig, which closes every handler the process has (here a
    log file; under pytest, its own captures, which crashed the test run); lit-marl imports it without that."""
    script = f"""
import logging, sys
handler = logging.FileHandler({str(tmp_path / 'app.log')!r})
logging.getLogger().addHandler(handler)
from lit_marl.slurm.settings import import_submitit
assert "submitit" not in sys.modules
import_submitit()
logging.getLogger("app").warning("still logging")
handler.flush()
print("submitit" in sys.modules, handler in logging.getLogger().handlers)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"]
    assert (tmp_path / "app.log").read_text() == "still logging\n"
    assert "Logging error" not in done.stderr
