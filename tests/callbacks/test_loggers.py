"""Loggers beside TensorBoard: MLflow (a local store) receives the same metrics, hyper-parameters and evaluation
videos as TensorBoard; W&B in offline mode receives the metrics, hyper-parameters and a video; ``lit-marl fit
--trainer.logger <MLflow>`` keeps a versioned run folder."""

from __future__ import annotations

import csv
import hashlib
import json
import struct
import time
from pathlib import Path

import lightning.pytorch as pl
import pytest
from lightning.fabric.utilities.logger import _convert_params, _flatten_dict

from lit_marl.algorithms import MAPPO
from lit_marl.cli import main
from lit_marl.callbacks import EvaluationReport
from tests.helpers.tiny import tiny_kwargs, tiny_task


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _fit(loggers: list, tmp_path: Path, epochs: int = 2) -> pl.Trainer:
    trainer = pl.Trainer(max_epochs=epochs, logger=loggers, enable_progress_bar=False, enable_model_summary=False,
                         num_sanity_val_steps=0, check_val_every_n_epoch=1, log_every_n_steps=1,
                         enable_checkpointing=False, default_root_dir=tmp_path,
                         callbacks=[EvaluationReport(val_video_every=1)])
    trainer.fit(MAPPO(tiny_task(), **tiny_kwargs()))
    return trainer


@pytest.fixture
def mlflow_file_store(monkeypatch):
    """MLflow 3's local file store refuses to start unless this is set (it recommends a database backend)."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    return pytest.importorskip("mlflow")


def test_mlflow_receives_the_metrics_hyperparameters_and_videos_tensorboard_does(tmp_path, mlflow_file_store):
    pytest.importorskip("av")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tensorboard = pl.loggers.TensorBoardLogger(tmp_path, name="tb", default_hp_metric=False)
    mlflow = pl.loggers.MLFlowLogger(experiment_name="lit-marl", tracking_uri=f"file:{tmp_path / 'mlruns'}")
    trainer = _fit([tensorboard, mlflow], tmp_path)
    client = mlflow_file_store.tracking.MlflowClient(tracking_uri=f"file:{tmp_path / 'mlruns'}")
    run = client.get_run(mlflow.run_id)

    events = EventAccumulator(tensorboard.log_dir, size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    scalars = set(events.Tags()["scalars"])
    assert {"val/return", "counters/frames", "train/agents/loss_objective"} <= scalars
    assert set(run.data.metrics) == scalars
    for tag in scalars:
        expected = sorted((e.step, e.value) for e in events.Scalars(tag))
        got = sorted((m.step, m.value) for m in client.get_metric_history(mlflow.run_id, tag))
        assert [s for s, _ in got] == [s for s, _ in expected], tag
        assert [v for _, v in got] == pytest.approx([v for _, v in expected], rel=1e-6), tag  # TensorBoard: float32

    hparams = _flatten_dict(_convert_params(dict(tensorboard.hparams)))
    assert len(hparams) > 10 and "lr" in hparams
    assert run.data.params == {k: str(v)[:250] for k, v in hparams.items()}  # Lightning cuts MLflow's at 250

    videos = sorted((Path(trainer.log_dir) / "videos").glob("*.mp4"))  # the first logger's run folder
    assert [v.name for v in videos] == ["val_frames_000000040.mp4", "val_frames_000000080.mp4"]
    evaluations = [e.step for e in events.Scalars("val/return")]
    assert [i.step for i in events.Images("val/video/0")] == evaluations  # one GIF per evaluation
    artifacts = client.list_artifacts(mlflow.run_id, "val/video")
    assert sorted(a.path for a in artifacts) == [f"val/video/{v.name}" for v in videos]
    for video in videos:
        local = client.download_artifacts(mlflow.run_id, f"val/video/{video.name}", str(tmp_path / "download"))
        assert _sha256(local) == _sha256(video)


def test_lit_marl_fit_with_the_mlflow_logger_alone_keeps_a_run_folder_per_run(tmp_path, mlflow_file_store, capsys):
    pytest.importorskip("av")
    config = tmp_path / "tiny.yaml"
    config.write_text(json.dumps({
        "seed_everything": 0,
        "trainer": {"check_val_every_n_epoch": 1, "log_every_n_steps": 1, "enable_progress_bar": False,
                    "enable_model_summary": False},
        "model": {"class_path": "lit_marl.algorithms.MAPPO", "init_args": {
            "task": {"class_path": "lit_marl.envs.VmasTask",
                     "init_args": {"scenario": "simple_spread", "max_steps": 10}},
            "actor_model": {"class_path": "lit_marl.models.Mlp", "init_args": {"num_cells": [16]}},
            "critic_model": {"class_path": "lit_marl.models.Mlp", "init_args": {"num_cells": [16]}},
            "frames_per_batch": 40, "num_envs": 4, "max_frames": 80, "n_minibatch_iters": 1, "minibatch_size": 20,
            "evaluation_episodes": 2}}}))
    for _ in range(2):  # a second run is not refused for the MLflow store the first one wrote
        main(["fit", "--config", str(config), "--trainer.logger", "lightning.pytorch.loggers.MLFlowLogger",
              "--trainer.logger.save_dir", "mlruns", "--evaluation.val_video_every", "1"])
    assert "MLFlowLogger keeps no run folder of its own" in capsys.readouterr().err
    runs = sorted(Path("runs/lit-marl").iterdir())
    assert [r.name for r in runs] == ["version_0", "version_1"]
    client = mlflow_file_store.tracking.MlflowClient(tracking_uri="file:./mlruns")
    (experiment,) = [e for e in client.search_experiments() if e.name == "lightning_logs"]
    logged = client.search_runs([experiment.experiment_id])
    assert len(logged) == 2
    for run_folder in runs:
        files = {p.name for p in run_folder.iterdir()}
        assert {"config.yaml", "metrics.csv", "hparams.yaml", "checkpoints", "videos"} <= files
        rows = [r for r in csv.DictReader(open(run_folder / "metrics.csv")) if r.get("val/return")]
        assert len(rows) == 2
    for run in logged:
        history = client.get_metric_history(run.info.run_id, "val/return")
        assert [m.step for m in history] == [int(r["step"]) for r in rows]
        assert [a.path for a in client.list_artifacts(run.info.run_id, "val/video")] == [
            "val/video/val_frames_000000040.mp4", "val/video/val_frames_000000080.mp4"]
    # the saved config re-runs with both loggers
    main(["fit", "--config", str(runs[0] / "config.yaml")])
    assert len(client.search_runs([experiment.experiment_id])) == 3


def _wandb_records(path: Path) -> list:
    """The records of an offline W&B run file (``run-<id>.wandb``): a 7-byte header, then LevelDB log records
    (4-byte checksum, 2-byte length, 1-byte type: full, first, middle, last) in 32 KiB blocks, each a protobuf
    ``Record``."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, position, pending, records = 32768, 7, b"", []
    while position + 7 <= len(data):
        left = block - position % block
        if left < 7:  # a block's tail too short for a header is padding
            position += left
            continue
        _, length, kind = struct.unpack("<IHB", data[position:position + 7])
        if kind == 0:
            position += left
            continue
        pending += data[position + 7:position + 7 + length]
        position += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def test_wandb_offline_receives_the_metrics_hyperparameters_and_a_video(tmp_path, monkeypatch):
    pytest.importorskip("av")
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    csv_logger = pl.loggers.CSVLogger(tmp_path, name="run")
    wandb_logger = pl.loggers.WandbLogger(offline=True, save_dir=str(tmp_path), project="lit-marl")
    trainer = _fit([csv_logger, wandb_logger], tmp_path, epochs=1)
    run_dir = Path(wandb_logger.experiment.dir).parent
    wandb_logger.experiment.finish()

    records: list = []
    for _ in range(300):  # W&B's service may write the offline file after finish() returned: wait for its exit record
        records = _wandb_records(next(run_dir.glob("run-*.wandb")))
        if any(r.WhichOneof("record_type") == "exit" for r in records):
            break
        time.sleep(0.1)
    rows = [{item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in r.history.item}
            for r in records if r.WhichOneof("record_type") == "history"]
    for row in csv.DictReader(open(Path(csv_logger.log_dir) / "metrics.csv")):
        for key, value in row.items():
            if value and key not in ("step", "epoch"):
                assert any(r.get("trainer/global_step") == int(row["step"])
                           and r.get(key) == pytest.approx(float(value)) for r in rows), (key, row["step"])
    config = {item.key: json.loads(item.value_json) for r in records if r.WhichOneof("record_type") == "config"
              for item in r.config.update}
    assert config["lr"] == 1e-3 and config["frames_per_batch"] == 40

    (video,) = (Path(trainer.log_dir) / "videos").glob("*.mp4")
    (row,) = [r for r in rows if "val/video/videos" in r]
    assert row["trainer/global_step"] == next(r["trainer/global_step"] for r in rows if "val/return" in r)
    (logged,) = row["val/video/videos"]
    assert logged["sha256"] == _sha256(video) and _sha256(run_dir / "files" / logged["path"]) == _sha256(video)
