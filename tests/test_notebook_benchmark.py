"""notebooks/benchmark.ipynb (train → test → compare → benchmark → report) runs top to bottom."""

from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient

from tests.helpers.tiny import ROOT


def _text(cell) -> str:
    parts = []
    for output in cell.outputs:
        parts.append(output.get("text", ""))
        parts.extend(str(v) for k, v in output.get("data", {}).items() if k in ("text/plain", "text/markdown"))
    return "".join(parts)


@pytest.mark.slow  # the notebook trains and reports a small grid: 20-40 s
def test_benchmark_notebook_executes(tmp_path):
    pytest.importorskip("av")
    notebook = nbformat.read(ROOT / "notebooks" / "benchmark.ipynb", as_version=4)
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = "\n".join(_text(cell) for cell in notebook.cells if cell.cell_type == "code")
    assert "iteration_0.ckpt" in outputs and "last.ckpt" in outputs
    assert "iqm return" in outputs and "95% CI" in outputs and "'video': 'videos/episode_0000.mp4'" in outputs
    assert "exported episodes: (20, 20)" in outputs
    assert "over 20 paired episodes" in outputs
    assert "4 runs, 0 finished, 0 to resume, 4 to start" in outputs
    assert "| balance | ippo | 1 | finished | 600 |" in outputs
    assert "| mappo | " in outputs and "P(mappo > ippo) =" in outputs
    images = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs
              if "image/png" in o.get("data", {})]
    assert images, "the report's plot is shown"
