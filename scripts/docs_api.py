"""The API reference's generated pages, written before every docs build (``docs/_ext/generated_tables.py``
calls ``write_all``) into ``docs/_generated/`` (not committed): the lists of public names, from each
public module's ``__all__``, so the reference cannot leave out a public class or function.

    python scripts/docs_api.py            # writes docs/_generated/api_*.md (what the build does)
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: the public API: each module's public names (its ``__all__`` where it has one); the API reference lists exactly
#: these, and ``tests/test_docs_api.py`` requires a docstring on each (and on their public members)
PUBLIC_MODULES: dict[str, list[str] | None] = {
    "lit_marl.algorithms": None,
    "lit_marl.envs": None,
    "lit_marl.models": None,
    "lit_marl.data": None,
    "lit_marl.callbacks": None,
    "lit_marl.evaluation": None,
    "lit_marl.evaluate": ["evaluate_checkpoint", "compare_checkpoints"],
    "lit_marl.export": ["export_policy", "export_checkpoint", "load_exported"],
    "lit_marl.benchmark": ["Benchmark", "Run", "latest_checkpoint", "summary_table"],
    "lit_marl.errors": ["ConfigError", "CheckpointError", "NumericalError"],
    "lit_marl.cli": ["LitMarlCLI", "main"],
}

#: the API reference's sections: title, a sentence, and the modules in it
API_SECTIONS = {
    "algorithms": ("Algorithms, learners and loops",
                   "The runs (LightningModules) a config names, the learners they hold and the loops that order "
                   "their updates.", ["lit_marl.algorithms"]),
    "envs": ("Tasks", "The benchmark task families: each builds torchrl environments and names their groups.",
             ["lit_marl.envs"]),
    "models": ("Models", "Network configurations the algorithms build their policies and critics from.",
               ["lit_marl.models"]),
    "data": ("Data", "Replay sampling and evaluation batches.", ["lit_marl.data"]),
    "callbacks": ("Callbacks", "What hooks into Lightning's Trainer during a run.", ["lit_marl.callbacks"]),
    "evaluation": ("Evaluation and results",
                   "Evaluating checkpoints, the records of ``eval_info.json``, comparisons and exported policies.",
                   ["lit_marl.evaluate", "lit_marl.evaluation", "lit_marl.export"]),
    "benchmark": ("Benchmarks and the command line",
                  "Grids of runs, the ``lit-marl`` command and the errors it names.",
                  ["lit_marl.benchmark", "lit_marl.cli", "lit_marl.errors"]),
}


def public_api() -> dict[str, list[str]]:
    """``{module: [public name, ...]}`` for every public module."""
    api = {}
    for module_name, names in PUBLIC_MODULES.items():
        module = importlib.import_module(module_name)
        api[module_name] = list(names if names is not None else module.__all__)
    return api


def api_pages() -> dict[str, str]:
    """One Markdown page per API section: an autosummary of its public names, each rendered on a page of its own."""
    api = public_api()
    pages = {}
    for slug, (title, intro, modules) in API_SECTIONS.items():
        lines = [f"# {title}", "", intro, ""]
        for module_name in modules:
            lines += [f"## `{module_name}`", "", "```{eval-rst}", f".. currentmodule:: {module_name}", "",
                      ".. autosummary::", "   :toctree: generated", "   :nosignatures:", ""]
            lines += [f"   {name}" for name in api[module_name]]
            lines += ["```", ""]
        pages[f"api_{slug}.md"] = "\n".join(lines)
    listed = {m for _, _, modules in API_SECTIONS.values() for m in modules}
    missing = set(PUBLIC_MODULES) - listed
    if missing:
        raise RuntimeError(f"public modules in no API section: {sorted(missing)}")
    return pages


def write_pages(out: Path, pages: dict[str, str]) -> list[Path]:
    """Writes ``{file name: text}`` under ``out``; a file is rewritten only when its text changed (so Sphinx's
    incremental build re-reads only what changed). Also what ``scripts/docs_algorithms.py`` writes with."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in pages.items():
        path = out / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        written.append(path)
    return written


def write_all(out: Path) -> list[Path]:
    """Writes every API page under ``out``."""
    return write_pages(out, api_pages())


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    for path in write_all(ROOT / "docs" / "_generated"):
        print(path.relative_to(ROOT))
