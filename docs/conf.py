"""Sphinx configuration of lit-marl's documentation (``sphinx-build -W docs docs/_build/html``).

Offline: no intersphinx inventories are fetched, so references to torch, Lightning, torchrl and tensordict objects
are left as plain text (``nitpick_ignore_regex``); every reference to one of lit-marl's own objects must resolve
(``nitpicky``, warnings as errors)."""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import pkgutil
import re
import runpy
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
autodoc_class_signature = "mixed"
# a signature too long for one line lists one argument per line
python_maximum_signature_line_length = 100
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


# ---------------------------------------------------------------------------------------------------------------------
# What each class page shows. A class page lists what the class itself defines, plus what it inherits from lit-marl's
# internal bases (``Configurable.to_config``, ``AnnealedExploration.anneal_frames``: no page of their own), on the page
# of the least derived public class that inherits it; what a public base defines is on that base's page (linked from
# "Bases:"), and what Lightning, torch or torchrl define is theirs to document.

@functools.cache
def _public_classes() -> frozenset[int]:
    """The ids of the public classes (``scripts/docs_api.py``'s lists): the ones with a page of their own."""
    docs_api = runpy.run_path(str(ROOT / "scripts" / "docs_api.py"), run_name="__docs_conf__")
    objects = [getattr(importlib.import_module(module), name)
               for module, names in docs_api["public_api"]().items() for name in names]
    return frozenset(id(obj) for obj in objects if inspect.isclass(obj))


def _attribute_owner(cls: type, name: str) -> type | None:
    """The class along ``cls``'s MRO that defines ``name``: in its body, or as a ``#:``-documented instance
    attribute of its ``__init__``."""
    from sphinx.pycode import ModuleAnalyzer

    for klass in cls.__mro__:
        if name in vars(klass):
            return klass
        try:
            if (klass.__qualname__, name) in ModuleAnalyzer.for_module(klass.__module__).find_attr_docs():
                return klass
        except Exception:
            continue
    return None


def _skip_member(app, what, name, obj, skip, options):
    if what not in ("class", "exception"):
        return None
    current = app.env.current_document
    try:
        cls = getattr(importlib.import_module(current.autodoc_module), current.autodoc_class)
    except (ImportError, AttributeError, ValueError):
        return None
    owner = _attribute_owner(cls, name) if inspect.isclass(cls) else None
    if owner is None or owner is cls:
        return None
    public_classes = _public_classes()
    if owner.__module__.startswith("lit_marl") and id(owner) not in public_classes:
        pages = [klass for klass in cls.__mro__ if id(klass) in public_classes and owner in klass.__mro__]
        if pages and pages[-1] is cls:
            return None
    return True


def _public_bases(app, name, obj, options, bases: list) -> None:
    """The "Bases:" line names classes a reader can look up: an internal lit-marl base (``_Recurrent``,
    ``AgentTupleTask``) is replaced by its own nearest bases that have a page or belong to another project."""
    public_classes = _public_classes()

    def shown(base: type) -> list[type]:
        if base is object:
            return []
        if base.__module__.split(".")[0] != "lit_marl" or id(base) in public_classes:
            return [base]
        return [b for parent in base.__bases__ for b in shown(parent)]

    replaced = list(dict.fromkeys(b for base in bases for b in shown(base)))
    most_derived = [b for b in replaced if not any(other is not b and b in other.__mro__ for other in replaced)]
    bases[:] = most_derived or [object]


#: the sections of a Google-style docstring, in the order a class page shows them
_SECTION_ORDER = ("Args", "Arguments", "Attributes", "Returns", "Yields", "Raises", "Notes", "Warning", "Warnings",
                  "References", "See Also", "Example", "Examples")
_SECTION = re.compile(r"(" + "|".join(_SECTION_ORDER) + r"):\s*")
#: how a class docstring points at its module's docstring, which the class page then shows as its Notes
_MODULE_DOCSTRING = re.compile(r"the module\s+docstring|\(module docstring\)")


def _split_sections(lines: list[str]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """A docstring's free text and its sections (title, lines); a section ends at the next unindented line."""
    free: list[str] = []
    sections: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    for line in lines:
        if _SECTION.fullmatch(line):
            current = [line]
            sections.append((line.split(":")[0], current))
            continue
        if current is not None and line.strip() and not line.startswith(" "):
            current = None
        (free if current is None else current).append(line)
    return free, sections


def _args_in_signature_order(section: list[str], obj: object) -> list[str]:
    """An ``Args:`` section's entries in the order of ``obj``'s signature (an algorithm's composed ``Args:`` come
    learner first, then loop, then run, while its signature starts with ``task``)."""
    try:
        parameters = inspect.signature(obj).parameters
    except (TypeError, ValueError):
        return section
    order = list(parameters)
    entries: list[list[str]] = []
    for line in section[1:]:
        if not entries or (line.strip() and len(line) - len(line.lstrip()) == 4):
            entries.append([])
        entries[-1].append(line)

    def argument(entry: list[str]) -> str:
        return entry[0].strip().split(":")[0].strip().lstrip("*")

    if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        # what the signature does not take (``critic_model`` of an algorithm without a critic) is no argument of it
        entries = [entry for entry in entries if argument(entry) in order]
    entries.sort(key=lambda entry: order.index(argument(entry)) if argument(entry) in order else len(order))
    return [section[0], *(line for entry in entries for line in entry)]


def _class_sections(app, what, name, obj, options, lines) -> None:
    """A class page's docstring in one order: the description, ``Args:`` (in the signature's order), ``Notes:``,
    ``Examples:``. An algorithm's ``Args:`` are appended to its own docstring when its constructor is composed
    (:mod:`lit_marl.algorithms.arguments`), after any ``Examples:`` it has; a class whose docstring points at its
    module's docstring gets that docstring as its ``Notes:`` (the reference has no module pages)."""
    if what not in ("class", "exception") or not name.startswith("lit_marl.") or not lines:
        return
    text = "\n".join(lines)
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    module_doc = inspect.getdoc(module) if module is not None else None
    notes = None
    if module_doc and _MODULE_DOCSTRING.search(text):
        text = re.sub(r"the module\s+docstring", "its notes", text.replace("(module docstring)", "(see its notes)"))
        notes = ["Notes:", *("    " + line if line else "" for line in module_doc.splitlines())]
    free, sections = _split_sections(text.split("\n"))
    if notes is not None:
        sections.append(("Notes", notes))
    sections = [(title, _args_in_signature_order(body, obj) if title in ("Args", "Arguments") else body)
                for title, body in sections]
    sections.sort(key=lambda section: _SECTION_ORDER.index(section[0]))
    out = free
    for _, body in sections:
        while out and not out[-1].strip():
            out.pop()
        out += ["", *body]
    lines[:] = out


# ---------------------------------------------------------------------------------------------------------------------
# Public constants (``lit_marl.envs.PETTINGZOO_TASKS``…) are documented by the ``#:`` comment where they are defined;
# autodoc looks for that comment in the package that re-exports them, finds none and would show the docstring of
# their type (``dict``'s). Their values are shown as what a reader looks up in them, not as a repr of the whole object.

def _defining_module_comment(name: str, obj: object) -> list[str] | None:
    """The ``#:`` comment above the assignment of ``name``'s last part in the lit-marl module that defines it."""
    from sphinx.pycode import ModuleAnalyzer

    attribute = name.rsplit(".", 1)[-1]
    for info in pkgutil.walk_packages(lit_marl.__path__, "lit_marl."):
        try:
            module = importlib.import_module(info.name)
        except Exception:  # an optional task family's simulator is not installed
            continue
        if vars(module).get(attribute) is not obj:
            continue
        try:
            comment = ModuleAnalyzer.for_module(info.name).find_attr_docs().get(("", attribute))
        except Exception:
            continue
        if comment:
            return list(comment)
    return None


def _value_lines(obj: object) -> list[str]:
    """A constant's value as a reader uses it: a mapping's keys, a collection's items, a scalar's repr."""
    if isinstance(obj, dict):
        return ["", "Keys: " + ", ".join(f"``{key}``" for key in obj) + "."]
    if isinstance(obj, (tuple, list, set, frozenset)) and all(isinstance(item, str) for item in obj):
        return ["", "Values: " + ", ".join(f"``{item}``" for item in obj) + "."]
    if isinstance(obj, (str, int, float, bool)):
        return ["", f"Value: ``{obj!r}``."]
    return []


def _constant_docstring(app, what, name, obj, options, lines) -> None:
    if what not in ("data", "attribute") or not name.startswith("lit_marl.") or callable(obj):
        return
    if lines and type(obj).__doc__ and lines[0].strip() == type(obj).__doc__.strip().splitlines()[0].strip():
        lines[:] = _defining_module_comment(name, obj) or []
    if lines and lines[0][:1].islower():  # a ``#:`` comment reads as a sentence on its own page
        lines[0] = lines[0][0].upper() + lines[0][1:]
    if what == "data":
        lines.extend(_value_lines(obj))


def setup(app):
    app.connect("autodoc-skip-member", _skip_member)
    app.connect("autodoc-process-bases", _public_bases)
    app.connect("autodoc-process-docstring", _class_sections, priority=400)  # on the Google-style text, before napoleon
    app.connect("autodoc-process-docstring", _constant_docstring)
