"""Sphinx configuration of lit-marl's documentation (``sphinx-build -W docs docs/_build/html``).

Offline: no intersphinx inventories are fetched, so references to torch, Lightning, torchrl and tensordict objects
are left as plain text (``nitpick_ignore_regex``); every reference to one of lit-marl's own objects must resolve
(``nitpicky``, warnings as errors)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent / "_ext"))
os.environ.setdefault("OMP_NUM_THREADS", "1")

import lit_marl  # noqa: E402

project = "lit-marl"
author = "lit-marl developers"
copyright = "2026, lit-marl developers"
release = version = lit_marl.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "sphinx.ext.mathjax",
    "sphinx_copybutton",
    "sphinx_design",
    "generated_tables",
    "internal_references",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
# generated tables are parts of pages ({include}), not pages: only the API sections are documents of their own
exclude_patterns = ["_build", "**/.ipynb_checkpoints", "README.md", "_generated/algorithm*", "_generated/task*",
                    "_generated/results_*", "_generated/guide_*"]
templates_path = ["_templates"]

myst_enable_extensions = ["colon_fence", "deflist", "dollarmath", "fieldlist", "attrs_inline"]
myst_heading_anchors = 3

# API reference: generated from the docstrings, with the signatures' types and defaults
autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"members": True, "show-inheritance": True, "member-order": "bysource"}
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented_params"
autodoc_class_signature = "separated"
autodoc_preserve_defaults = True
# a method that overrides Lightning's without a docstring of its own shows none, not Lightning's (whose references
# point into Lightning's own site)
autodoc_inherit_docstrings = False
# optional task families: their modules import their simulators lazily, so nothing needs mocking; these are only the
# packages no module of lit_marl imports at module level but some signatures name
autodoc_mock_imports: list[str] = []
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

# every reference to lit-marl's own objects must resolve; other projects' objects are plain text (offline build)
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(torch|lightning|torchrl|tensordict|numpy|np|gymnasium|jsonargparse|optuna|pettingzoo|vmas|"
               r"meltingpot|submitit|matplotlib|scipy|av|pathlib|collections|typing|typing_extensions|"
               r"concurrent|contextlib|dataclasses|enum|argparse|subprocess|threading|multiprocessing|io|os|abc|"
               r"datetime|logging|signal|types|zipfile|json|re|functools|itertools|csv|random|math|"
               r"lightning_utilities|L|pl)(\..*)?"),
    # builtins and typing names that Sphinx leaves unresolved without Python's own inventory
    (r"py:.*", r"(int|float|str|bool|bytes|dict|list|tuple|set|frozenset|object|type|None|NoneType|Any|Callable|"
               r"Iterable|Iterator|Sequence|Mapping|MutableMapping|Literal|Optional|Union|Self|Generator|"
               r"Exception|ValueError|TypeError|RuntimeError|OSError|KeyError|SystemExit|BaseException|"
               r"TextIO|IO|ClassVar|Protocol|TypeVar|T|Path|PathLike|Sized|Hashable|Collection|Awaitable|"
               r"SimpleNamespace|Namespace|ModuleType|FrameType|timedelta|Enum|IntEnum|Tensor|Module|"
               r"nn\..*|ellipsis|EllipsisType|NotImplementedType|slice|range|property|classmethod|staticmethod)"),
]

html_theme = "furo"
html_title = f"lit-marl {release}"
html_static_path: list[str] = []
html_theme_options = {"source_repository": "", "navigation_with_keys": True}
copybutton_prompt_text = r"^\$ |^>>> |^\.\.\. "
copybutton_prompt_is_regexp = True
# offline: no intersphinx, no external link checks at build time
intersphinx_mapping: dict = {}
linkcheck_ignore = [r"https?://.*"]
suppress_warnings: list[str] = []
