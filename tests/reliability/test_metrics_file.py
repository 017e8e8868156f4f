"""metrics.csv survives a failure while Lightning's CSVLogger rewrites it for a new column."""

from __future__ import annotations

import csv

import pytest
from lightning.pytorch.loggers import CSVLogger

from lit_marl.lightning_adapter import atomic_csv_rewrites


def _logger_with_rows(tmp_path, atomic: bool) -> CSVLogger:
    logger = CSVLogger(tmp_path, name="run")
    if atomic:
        atomic_csv_rewrites(logger)
    for step in range(3):
        logger.log_metrics({"train/loss": float(step)}, step=step)
    logger.save()
    return logger


def _interrupted_rewrite(logger: CSVLogger, monkeypatch) -> None:
    """A new column makes the logger rewrite the file; the rewrite dies after the header (as a kill would)."""
    real = csv.DictWriter.writerows

    def dies(self, rows):
        raise OSError("killed while rewriting metrics.csv")

    monkeypatch.setattr(csv.DictWriter, "writerows", dies)
    logger.log_metrics({"val/return": 1.0}, step=3)
    with pytest.raises(OSError, match="killed while rewriting"):
        logger.save()
    monkeypatch.setattr(csv.DictWriter, "writerows", real)


def _steps(logger: CSVLogger) -> list[str]:
    with open(logger.experiment.metrics_file_path, newline="") as f:
        return [r["step"] for r in csv.DictReader(f)]


def test_lightnings_in_place_rewrite_loses_the_rows(tmp_path, monkeypatch):
    logger = _logger_with_rows(tmp_path, atomic=False)
    _interrupted_rewrite(logger, monkeypatch)
    assert _steps(logger) == []  # why lit-marl replaces the rewrite


def test_atomic_rewrite_keeps_every_row(tmp_path, monkeypatch):
    logger = _logger_with_rows(tmp_path, atomic=True)
    _interrupted_rewrite(logger, monkeypatch)
    assert _steps(logger) == ["0", "1", "2"]
    assert [p.name for p in (tmp_path / "run" / "version_0").iterdir()] == ["metrics.csv"]  # no temp file left


def test_atomic_rewrite_adds_the_column(tmp_path):
    logger = _logger_with_rows(tmp_path, atomic=True)
    logger.log_metrics({"val/return": 2.0}, step=3)
    logger.save()
    with open(logger.experiment.metrics_file_path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["step"] for r in rows] == ["0", "1", "2", "3"] and rows[-1]["val/return"] == "2.0"
    assert rows[0]["train/loss"] == "0.0" and rows[0]["val/return"] == ""
