"""The notebooks run top to bottom (notebooks/benchmark.ipynb has a test of its own)."""

from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient

from tests.helpers.tiny import ROOT


@pytest.mark.slow  # trains 36,000 frames and resumes: 20-45 s
@pytest.mark.parametrize("name", ["quickstart.ipynb"])
def test_notebook_executes(name, tmp_path):
    notebook = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = "".join(o.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs)
    assert "val/return=" in outputs and "restored after 36000 frames" in outputs
    assert "loss_l2" in outputs


@pytest.mark.slow  # two worker processes, six fit processes: about 2 minutes
def test_tune_notebook_executes(tmp_path):
    notebook = nbformat.read(ROOT / "notebooks" / "tune.ipynb", as_version=4)
    NotebookClient(notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = "".join(o.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs)
    assert "6 trials so far" not in outputs and "up to 6, 2 worker(s)" in outputs  # a new study, two workers
    assert "6 trials:" in outputs and "best.yaml: lr" in outputs and "'param_importances.png'" in outputs
    assert any("image/png" in o.get("data", {}) for cell in notebook.cells if cell.cell_type == "code"
               for o in cell.outputs)
