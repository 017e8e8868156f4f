"""Where a run's folder goes and that it is its own: ``--trainer.default_root_dir`` places it (a logger's own
``save_dir`` wins, said in one line), ``--ckpt_path last`` looks there, and a new ``version_<n>`` folder is created
exclusively, so two runs started at once never share one."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import yaml
from jsonargparse import Namespace
from lightning.pytorch.loggers import CSVLogger

from lit_marl import run_folders
from lit_marl.cli import main
from lit_marl.run_folders import claim_version_folder
from tests.reliability.helpers import QUIET, rows, run_dirs, tiny_config

#: one iteration of tiny_config
ONE_ITERATION = [*QUIET, "--model.init_args.max_frames", "40"]


def _files(run: Path) -> set[str]:
    return {str(p.relative_to(run)) for p in run.rglob("*") if p.is_file()}


def test_default_root_dir_holds_the_run_folder_and_runs_is_the_default(tmp_path):
    config = tiny_config(tmp_path / "tiny.yaml")  # configs/quickstart.yaml: its logger sets a name, no save_dir
    main(["fit", "--config", str(config), *ONE_ITERATION, "--trainer.default_root_dir", "elsewhere"])
    assert not Path("runs").exists()
    (run,) = run_dirs(Path("elsewhere"))
    assert run == Path("elsewhere/quickstart/version_0")
    assert {"config.yaml", "metrics.csv", "checkpoints/last.ckpt"} <= _files(run)
    # the saved config re-runs into the same place
    assert yaml.safe_load((run / "config.yaml").read_text())["trainer"]["logger"]["init_args"]["save_dir"] == "elsewhere"

    main(["fit", "--config", str(config), *ONE_ITERATION])
    assert run_dirs() == [Path("runs/quickstart/version_0")]
    assert run_dirs(Path("elsewhere")) == [run]


def test_a_loggers_own_save_dir_wins_over_default_root_dir_and_says_so(tmp_path, capsys):
    config = tiny_config(tmp_path / "tiny.yaml")
    main(["fit", "--config", str(config), *ONE_ITERATION, "--trainer.default_root_dir", "elsewhere",
          "--trainer.logger.init_args.save_dir", "mine"])
    err = capsys.readouterr().err
    assert run_dirs(Path("mine")) == [Path("mine/quickstart/version_0")]
    assert not Path("runs").exists() and not list(Path("elsewhere").rglob("*.ckpt"))
    (notice,) = [line for line in err.splitlines() if "default_root_dir" in line]
    assert "'mine'" in notice and "'elsewhere'" in notice


def test_ckpt_path_last_finds_the_newest_run_under_default_root_dir(tmp_path):
    config = tiny_config(tmp_path / "tiny.yaml")
    where = ["--trainer.default_root_dir", "elsewhere"]
    main(["fit", "--config", str(config), *ONE_ITERATION, *where])
    main(["fit", "--config", str(config), *QUIET, *where, "--ckpt_path", "last", "--model.init_args.max_frames", "80"])
    first, second = run_dirs(Path("elsewhere"))
    assert yaml.safe_load((second / "config.yaml").read_text())["ckpt_path"] == str(
        first / "checkpoints" / "last.ckpt")
    assert [float(r["counters/frames"]) for r in rows(second) if r.get("counters/iteration")] == [80.0]
    assert not Path("runs").exists()


def test_loggers_without_a_run_folder_get_one_under_default_root_dir(capsys):
    config = Namespace(trainer=Namespace(default_root_dir="elsewhere", logger=Namespace(
        class_path="lightning.pytorch.loggers.MLFlowLogger", init_args=Namespace(save_dir="mlruns"))))
    run_folders.keep_a_run_folder(config)
    run_folders.place_run_folders(config)
    csv_logger, mlflow_logger = config.trainer.logger
    assert csv_logger.init_args.save_dir == "elsewhere" and mlflow_logger.init_args.save_dir == "mlruns"
    assert "elsewhere/lit-marl/version_<n>/" in capsys.readouterr().err


def test_a_version_folder_another_run_creates_meanwhile_is_not_shared(tmp_path, monkeypatch):
    # another run creates version_0 between this one's listing of the folders and its own mkdir
    real_mkdir, raced = os.mkdir, []

    def mkdir(path, *args, **kwargs):
        if Path(path).name.startswith("version_") and not raced:
            raced.append(path)
            real_mkdir(path)
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(run_folders.os, "mkdir", mkdir)
    assert claim_version_folder(tmp_path / "runs" / "x") == 1
    assert sorted(p.name for p in (tmp_path / "runs" / "x").iterdir()) == ["version_0", "version_1"]


def test_concurrent_claims_get_distinct_versions(tmp_path):
    root, start, claimed = tmp_path / "runs" / "x", threading.Barrier(8), []

    def claim():
        start.wait()
        claimed.append(claim_version_folder(root))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(claimed) == list(range(8))
    assert sorted(p.name for p in root.iterdir()) == [f"version_{n}" for n in range(8)]


def test_runs_in_a_row_and_at_the_same_time_get_their_own_folders(tmp_path, monkeypatch):
    config = tiny_config(tmp_path / "tiny.yaml")
    for _ in range(2):
        main(["fit", "--config", str(config), *ONE_ITERATION])
    assert run_dirs() == [Path("runs/quickstart/version_0"), Path("runs/quickstart/version_1")]
    # another run started in the same instant picked version_2 and created it; this run's listing (Lightning's) is
    # stale: it must not write into that folder
    Path("runs/quickstart/version_2").mkdir()
    monkeypatch.setattr(CSVLogger, "_get_next_version", lambda self: 2)
    main(["fit", "--config", str(config), *ONE_ITERATION])
    assert run_dirs()[2:] == [Path("runs/quickstart/version_3")]
    assert not any(Path("runs/quickstart/version_2").iterdir())
