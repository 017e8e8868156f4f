"""``lit-marl benchmark``: the grid is checked before anything runs, one folder per run, and a re-run after a kill
skips finished runs and resumes the interrupted one from its last.ckpt."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from lit_marl.cli import main
from lit_marl.benchmark import Benchmark
from tests.helpers.runs import BALANCE, metric_frames, tiny_balance, tiny_grid
from tests.helpers.tiny import CONFIGS, ROOT
from tests.helpers.waiting import wait_until

GRIDS = sorted((CONFIGS / "benchmarks").glob("*.yaml"))


@pytest.mark.slow  # four lit-marl processes: about 40 s on two busy cores
def test_benchmark_resumes_after_a_kill_without_repeating_finished_runs(tmp_path, capsys):
    grid = tiny_grid(tmp_path)
    root = tmp_path / "bench" / "tiny" / "balance" / "mappo"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "lit_marl.cli", "benchmark", "--config", str(grid)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        wait_until((root / "seed_1" / "train" / "version_0" / "checkpoints" / "last.ckpt").is_file,
                   "seed_1's first last.ckpt (the kill comes then)", process=proc)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the runner and its fit process
        proc.wait()
    assert (root / "seed_0" / "finished.json").is_file() and not (root / "seed_1" / "finished.json").exists()
    finished_before = (root / "seed_0" / "finished.json").read_bytes()
    killed_at = metric_frames(root / "seed_1" / "train" / "version_0" / "metrics.csv")[-1]
    assert 0 < killed_at < 400

    main(["benchmark", "--config", str(grid)])
    out = capsys.readouterr().out
    assert "1 finished, 1 to resume, 0 to start" in out
    # the finished run was not repeated
    assert [p.name for p in (root / "seed_0" / "train").iterdir()] == ["version_0"]
    assert (root / "seed_0" / "finished.json").read_bytes() == finished_before
    # the interrupted one continued from its last.ckpt
    resumed = metric_frames(root / "seed_1" / "train" / "version_1" / "metrics.csv")
    assert resumed[0] > 40 and resumed[-1] == 400
    info = json.loads((root / "seed_1" / "finished.json").read_text())
    assert info["frames"] == 400 and info["resumed_from"].endswith("version_0/checkpoints/last.ckpt")
    steps = json.loads((root / "seed_1" / "marl_eval.json").read_text())["vmas"]["balance"]["mappo"]["seed_1"]
    assert [steps[f"step_{k}"]["step_count"] for k in range(2)] == [200, 400]
    assert "| balance | mappo | 1 | finished (resumed) | 400 |" in out
    assert (tmp_path / "bench" / "tiny" / "summary.md").read_text() in out

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        main(["benchmark", "--config", str(grid)])  # everything finished: nothing runs
        assert torch.get_num_threads() == 2  # the runner's one thread per run is not left on its caller
    finally:
        torch.set_num_threads(threads)
    assert "2 finished, 0 to resume, 0 to start" in capsys.readouterr().out


@pytest.mark.slow  # a launcher and its fit process, signalled mid-training: about 30 s each on two busy cores
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_to_the_launcher_stops_its_runs_at_their_checkpoint(tmp_path, signum):
    """Issue 48: SIGTERM (SIGHUP, a Ctrl-C sent to it alone) killed the launcher without a word while its fit trained
    on as an orphan. Now each running fit is asked to stop (it saves last.ckpt), the launcher waits for it, says in
    one line what it stopped, and exits 128 + the signal, as fit does."""
    grid = tiny_grid(tmp_path, overrides={"model.init_args.max_frames": 400_000, "checkpoint.every_n_epochs": 100_000,
                                          "trainer.check_val_every_n_epoch": 100_000,
                                          "model.init_args.n_minibatch_iters": 1})
    run = tmp_path / "bench" / "tiny" / "balance" / "mappo" / "seed_0"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    log = tmp_path / "launcher.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "lit_marl.cli", "benchmark", "--config", str(grid)],
                                stdout=out, stderr=out, env=env, start_new_session=True)
    try:
        # its first metric row: training has started, so the fit's own signal handler is in place
        wait_until(lambda: any(metric_frames(m) for m in run.glob("train/version_0/metrics.csv")),
                   "a metric row of seed_0", process=proc)
        os.kill(proc.pid, signum)  # the launcher alone, not its process group
        try:
            code = proc.wait(timeout=240)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the launcher did not end after {signal.Signals(signum).name}") from None
        said = log.read_text()
        assert code == 128 + signum, said[-3000:]
        label = "SIGINT (Ctrl-C)" if signum == signal.SIGINT else signal.Signals(signum).name
        assert said.count("lit-marl: benchmark tiny stopped by") == 1 and "Traceback" not in said, said[-3000:]
        assert (f"lit-marl: benchmark tiny stopped by {label}: balance/mappo/seed_0 saved its last.ckpt and stopped "
                f"(exit 143); 1 run not started; the same command continues the grid") in said, said[-3000:]
        with pytest.raises(ProcessLookupError):  # no process of the launch is left: no orphan trains on
            os.killpg(proc.pid, 0)
    finally:  # whatever is left of the launch (an orphan, when this test fails)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert "lit-marl: stopped by SIGTERM" in (run / "train.log").read_text()
    meta = torch.load(run / "train" / "version_0" / "checkpoints" / "last.ckpt", weights_only=True)["lit_marl"]
    assert meta["frames"] == metric_frames(run / "train" / "version_0" / "metrics.csv")[-1]  # the last iteration
    assert not (run / "finished.json").exists() and not (run.parent / "seed_1" / "train").exists()


def test_a_run_at_its_budget_without_finished_json_is_finished_not_failed(tmp_path, capsys):
    """A launcher stopped between a fit's end and its finished.json (killed, a job at its time limit): the next
    launch records the run as finished; before, it resumed it, the fit refused (nothing left to train) and the run
    was counted as failed. A checkpoint short of a raised budget still resumes."""
    from lit_marl.benchmark.run_folder import at_budget
    from lit_marl.benchmark.slurm import FitRun, run_state

    grid = tiny_grid(tmp_path, seeds=[0])
    Benchmark(grid).run(in_process=True)
    run = Benchmark(grid).runs[0]
    (run.folder / "finished.json").unlink()
    capsys.readouterr()
    assert run_state(run, None, {}) == "finished"
    ckpt = run.folder / "train" / "version_0" / "checkpoints" / "last.ckpt"
    raised = yaml.safe_load(yaml.safe_dump(run.config))
    raised["model"]["init_args"]["max_frames"] = 800
    assert at_budget(ckpt, run.config) and not at_budget(ckpt, raised)

    (runs,) = Benchmark(grid).run(in_process=True)
    out = capsys.readouterr().out
    assert "1 finished, 0 to resume, 0 to start" in out and "finished.json was missing; written now" in out
    assert runs.status == "skipped" and "| balance | mappo | 0 | skipped | 400 |" in out
    assert [p.name for p in (run.folder / "train").iterdir()] == ["version_0"]  # nothing ran again
    info = json.loads((run.folder / "finished.json").read_text())
    assert info["recorded_late"] is True and info["frames"] == 400 and info["checkpoint"] == str(ckpt)
    assert info["seconds"] is None and info["resumed_from"] is None

    (run.folder / "finished.json").unlink()  # the same on SLURM: the array task's wrapper writes it
    assert FitRun(str(run.folder)).before().startswith("finished already (its last.ckpt has its max_frames")
    assert json.loads((run.folder / "finished.json").read_text())["recorded_late"] is True


@pytest.mark.slow  # two lit-marl processes at once
def test_benchmark_runs_in_parallel_processes(tmp_path, capsys):
    grid = tiny_grid(tmp_path, parallel=2, overrides={"model.init_args.max_frames": 80})
    main(["benchmark", "--config", str(grid)])
    assert "2 to start (2 at a time)" in capsys.readouterr().out
    infos = [json.loads((tmp_path / "bench" / "tiny" / "balance" / "mappo" / f"seed_{s}" / "finished.json").read_text())
             for s in (0, 1)]
    assert all(i["frames"] == 80 for i in infos)
    assert max(i["started"] for i in infos) < min(i["ended"] for i in infos)  # they ran at the same time


_HOLD_THE_LOCK = """
import sys
from pathlib import Path
from lit_marl.benchmark.launcher import launcher_lock

with launcher_lock(Path(sys.argv[1])):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_one_launcher_per_benchmark_folder(tmp_path, capsys):
    """Issue 48: two launchers on one grid trained the same run folders at once. The second is refused by name, with
    the first's pid; --status still reads the folder; a launcher that dies leaves no stale lock."""
    from lit_marl.benchmark.launcher import launcher_lock

    grid = tiny_grid(tmp_path, seeds=[0])
    root = tmp_path / "bench" / "tiny"
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_THE_LOCK, str(root)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline() == "held\n", "the lock holder ended before it held the lock"
        with pytest.raises(SystemExit) as exit_info:
            main(["benchmark", "--config", str(grid)])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2
        assert (f"output_dir: {str(root)!r} is in use by another lit-marl benchmark launcher (pid {holder.pid} on "
                f"{socket.gethostname()}, holding {root / 'launcher.lock'}); allowed: one launcher per benchmark "
                f"folder") in err, err
        assert not (root / "balance").exists()  # nothing of the runs written
        main(["benchmark", "--config", str(grid), "--status"])  # read-only: no lock needed
        assert "| balance | mappo | 0 | not started |" in capsys.readouterr().out
    finally:
        holder.kill()  # SIGKILL: no chance to clean up
        holder.wait()
    with launcher_lock(root):  # the OS released it
        pass


def test_a_folder_that_cannot_be_locked_is_said_and_the_launch_goes_on(tmp_path, monkeypatch, capsys):
    """Some cluster file systems have no flock: a launch there is not refused, and says it is unguarded."""
    import errno

    from lit_marl.benchmark import launcher

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(launcher.fcntl, "flock", no_locks)
    with launcher.launcher_lock(tmp_path / "root"):
        pass
    assert ("launcher.lock cannot be locked (No locks available); a second launcher on this folder would not be "
            "refused") in capsys.readouterr().err


@pytest.mark.parametrize(
    ("change", "fragments"),
    [
        ({"tasks": {"balanse": {"class_path": "lit_marl.envs.VmasTask", "init_args": {"scenario": "balanse"}}}},
         ["tasks.balanse", "unknown VMAS scenario 'balanse'"]),
        ({"tasks": {"t": {"class_path": "lit_marl.envs.NoSuchTask", "init_args": {}}}},
         ["tasks.t", "NoSuchTask"]),
        ({"algorithms": {"vdn": str(CONFIGS / "vdn_vmas_navigation.yaml")}},  # discrete-only on a continuous task
         ["algorithms.vdn", "VDN", "continuous", "'balance'"]),
        ({"seeds": []}, ["seeds", "[]"]),
        # issue 48: each of these failed only once its run had started (a duplicate ran twice into one folder)
        ({"seeds": [0, 1, 0]}, ["seeds[2]: 0 is given twice", "allowed: distinct integers"]),
        ({"seeds": [0, -1]}, ["seeds[1]: -1 is out of range; allowed: integers in [0, 4294967295]"]),
        ({"seeds": [2**32]}, ["seeds[0]: 4294967296 is out of range"]),
    ],
)
def test_a_bad_grid_is_refused_before_anything_runs(tmp_path, capsys, change, fragments):
    _assert_refused(tiny_grid(tmp_path, **change), capsys, fragments)


@pytest.mark.parametrize(
    ("change", "fragments"),
    [
        ({"name": "../escaped"}, ["name: '../escaped' is not a folder name"]),
        ({"name": "/tmp/escaped"}, ["name: '/tmp/escaped' is not a folder name"]),
        ({"name": ".."}, ["name: '..' is not a folder name"]),
        ({"tasks": {"../../escaped": BALANCE}}, ["tasks.../../escaped: '../../escaped' is not a folder name"]),
        ({"algorithms": {"a/b": "mappo.yaml"}}, ["algorithms.a/b: 'a/b' is not a folder name"]),
    ],
)
def test_a_name_that_is_a_path_is_refused_before_anything_is_written(tmp_path, capsys, change, fragments):
    """Issue 48: a grid's, task's or algorithm's name is a folder under the output folder; ``name: ../x`` wrote the
    runs beside it."""
    (tmp_path / "inside").mkdir()
    _assert_refused(tiny_grid(tmp_path / "inside", **change), capsys, [*fragments, "allowed: a name without '/'"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inside"]


def _assert_refused(grid: Path, capsys, fragments: list[str]) -> None:
    """``lit-marl benchmark`` on ``grid`` exits 2 with every fragment in its message, and has written nothing."""
    with pytest.raises(SystemExit) as exit_info:
        main(["benchmark", "--config", str(grid)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    assert not (grid.parent / "bench").exists()


def test_overrides_go_from_the_grid_to_the_task_for_one_algorithm(tmp_path):
    tiny = str(tiny_balance(tmp_path / "mappo.yaml"))
    grid = tiny_grid(tmp_path, seeds=[0], algorithms={
        "mappo": tiny,
        "ippo": {"config": tiny, "overrides": {"model.class_path": "lit_marl.algorithms.IPPO",
                                               "model.init_args.lr": 1.0e-4}},
    }, tasks={
        "plain": BALANCE,
        "long": {**BALANCE, "overrides": {"model.init_args.lr": 2.0e-4, "model.init_args.gamma": 0.9},
                 "algorithm_overrides": {"ippo": {"model.init_args.gamma": 0.8}}},
    })
    runs = {(r.task, r.algorithm): r.config for r in Benchmark(grid).runs}
    model = {key: (config["model"]["class_path"].rpartition(".")[2], config["model"]["init_args"]["lr"],
                   config["model"]["init_args"].get("gamma"))
             for key, config in runs.items()}
    assert model == {("plain", "mappo"): ("MAPPO", 3e-4, None), ("long", "mappo"): ("MAPPO", 2e-4, 0.9),
                     ("plain", "ippo"): ("IPPO", 1e-4, None), ("long", "ippo"): ("IPPO", 2e-4, 0.8)}
    assert all("overrides" not in c["model"]["init_args"]["task"] for c in runs.values())  # the task is the task


@pytest.mark.parametrize(
    ("tasks_change", "overrides", "fragments"),
    [
        ({"algorithm_overrides": {"ipo": {"model.init_args.lr": 1.0}}}, {},
         ["tasks.balance.algorithm_overrides", "'ipo'", "allowed: mappo"]),
        ({"overrides": {"model.init_args.gama": 0.9}}, {},
         ["'model.init_args.gama'", "mappo on balance", "MAPPO", "did you mean 'gamma'"]),
        ({}, {"model.init_args.minibatch_sise": 4}, ["'model.init_args.minibatch_sise'", "'minibatch_size'"]),
        ({"overrides": [1]}, {}, ["tasks.balance.overrides", "mapping"]),
        # issue 48: values fit's parser refuses, refused before the first run (they failed each run at its start)
        ({}, {"model.init_args.lr": "abc"}, ["algorithms.mappo on tasks.balance: lit-marl fit refuses its run config: "
                                             "model.init_args.lr: 'abc' is not a number"]),
        ({"algorithm_overrides": {"mappo": {"trainer.max_epochs": "ten"}}}, {},
         ["algorithms.mappo on tasks.balance", "trainer.max_epochs: 'ten' is not an integer"]),
        # ... and those the algorithm refuses as it is built
        ({}, {"model.init_args.max_frames": -5}, ["algorithms.mappo on tasks.balance: lit-marl fit refuses its run "
                                                  "config: max_frames: must be a positive integer, got -5"]),
        ({"overrides": {"model.init_args.sampling_device": "cuda:99"}}, {},
         ["lit-marl fit refuses its run config: sampling_device: 'cuda:99'"]),
    ],
)
def test_a_bad_override_is_refused_by_name_before_anything_runs(tmp_path, capsys, tasks_change, overrides,
                                                                fragments):
    grid = tiny_grid(tmp_path, tasks={"balance": {**BALANCE, **tasks_change}},
                     overrides={"model.init_args.max_frames": 400, **overrides})
    _assert_refused(grid, capsys, fragments)


def test_an_unknown_algorithm_is_refused(tmp_path, capsys):
    config = yaml.safe_load(tiny_balance(tmp_path / "mappo.yaml").read_text())
    config["model"]["class_path"] = "lit_marl.algorithms.MAPO"
    (tmp_path / "mapo.yaml").write_text(yaml.safe_dump(config))
    grid = tiny_grid(tmp_path)
    data = yaml.safe_load(grid.read_text())
    data["algorithms"] = {"mapo": str(tmp_path / "mapo.yaml")}
    grid.write_text(yaml.safe_dump(data))
    with pytest.raises(SystemExit):
        main(["benchmark", "--config", str(grid)])
    err = capsys.readouterr().err
    assert "algorithms.mapo" in err and "'lit_marl.algorithms.MAPO'" in err and "MAPPO" in err


@pytest.mark.parametrize("grid", [g.name for g in GRIDS])
def test_every_benchmark_grid_is_valid(grid, capsys):
    bench = Benchmark(CONFIGS / "benchmarks" / grid)  # imports every algorithm, probes every task
    assert len(bench.runs) == len({r.folder for r in bench.runs}) > 1
    for run in {(r.algorithm, r.task): r for r in bench.runs}.values():  # each algorithm × task config parses
        path = Path(f"{run.algorithm}_{run.task}.yaml")
        path.write_text(yaml.safe_dump(run.config))
        with pytest.raises(SystemExit) as exit_info:
            main(["fit", "--config", str(path), "--print_config"])
        assert exit_info.value.code in (0, None)
        printed = yaml.safe_load(capsys.readouterr().out)["model"]["init_args"]["task"]
        given = run.config["model"]["init_args"]["task"]
        assert printed["class_path"] == given["class_path"]
        assert {k: printed["init_args"][k] for k in given["init_args"]} == given["init_args"]
