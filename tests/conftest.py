"""Shared fixtures; the helpers tests import (tiny tasks, budgets, trainers) are in ``tests/helpers/``."""

from __future__ import annotations

import os

if "PYTEST_XDIST_WORKER" in os.environ and "OMP_NUM_THREADS" not in os.environ:
    # pytest -n N: the workers share the cores, each with its share of threads (the tests' numbers were measured with
    # one torch thread per run); set before torch is imported, so its OpenMP pool starts at that size, and inherited
    # by the lit-marl processes tests start
    os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) //
                                            int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))

import pytest

from tests.helpers.tiny import ROOT

#: under ``CI``, a skip not on its short allow-list fails the run (tests/helpers/ci_skips.py)
pytest_plugins = ["tests.helpers.ci_skips"]

os.environ.setdefault("PYTHONHASHSEED", "0")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``pytest -n auto``: one worker a core, at most 8 (each holds torch, simulators and the runs it starts)."""
    return max(1, min(os.cpu_count() or 1, 8))


# Subprocesses (``lit-marl …``) import lit_marl from this checkout too, not from wherever it was pip-installed from.
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])


@pytest.fixture(autouse=True)
def _in_tmp_cwd(tmp_path, monkeypatch):
    """Runs write ``runs/`` relative to the working directory: keep them out of the repo."""
    monkeypatch.chdir(tmp_path)

