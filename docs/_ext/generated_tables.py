"""A Sphinx extension that regenerates the docs' generated pages and tables before each build, so the pages cannot
drift from the code or the recorded data: every ``scripts/docs_*.py`` has a ``write_all(out)`` that writes its files
into ``docs/_generated/`` (not committed; ``python scripts/docs_<name>.py`` writes them without a build)."""

from __future__ import annotations

import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "_generated"


def generators() -> list[Path]:
    return sorted((ROOT / "scripts").glob("docs_*.py"))


def _generate(app, config=None) -> None:
    for script in generators():
        runpy.run_path(str(script), run_name="__docs_build__")["write_all"](OUT)


def setup(app):
    # at config-inited, before Sphinx lists the source files (a fresh checkout has no docs/_generated/ yet) and before
    # autosummary writes the API pages the generated lists name
    app.connect("config-inited", _generate, priority=100)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
