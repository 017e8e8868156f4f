"""Shared fixtures; the helpers tests import (tiny tasks, budgets, trainers) are in ``tests/helpers/``."""

from __future__ import annotations

import os

import pytest

from tests.helpers.tiny import ROOT

os.environ.setdefault("PYTHONHASHSEED", "0")
# Subprocesses (``lit-marl …``) import lit_marl from this checkout too, not from wherever it was pip-installed from.
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])


@pytest.fixture(autouse=True)
def _in_tmp_cwd(tmp_path, monkeypatch):
    """Runs write ``runs/`` relative to the working directory: keep them out of the repo."""
    monkeypatch.chdir(tmp_path)
