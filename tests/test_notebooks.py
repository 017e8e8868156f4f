"""The notebooks run top to bottom."""

from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient

from tests.conftest import ROOT


@pytest.mark.parametrize("name", ["quickstart.ipynb"])
def test_notebook_executes(name, tmp_path):
    notebook = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = "".join(o.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs)
    assert "val/return=" in outputs and "restored after 36000 frames" in outputs
    assert "loss_l2" in outputs
