"""Where a run's folder goes: ``--trainer.default_root_dir`` places it (a logger's own ``save_dir`` wins, said in
one line) and ``--ckpt_path last`` looks there."""

from __future__ import annotations

from pathlib import Path

import yaml
from jsonargparse import Namespace

from lit_marl import cli
from lit_marl.cli import main
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
    cli._keep_a_run_folder(config)
    cli._place_run_folders(config)
    csv_logger, mlflow_logger = config.trainer.logger
    assert csv_logger.init_args.save_dir == "elsewhere" and mlflow_logger.init_args.save_dir == "mlruns"
    assert "elsewhere/lit-marl/version_<n>/" in capsys.readouterr().err
