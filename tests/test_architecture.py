"""The layering the design promises (docs/design-notes.md, README "How it fits together"), checked on the source:
file sizes, which package may import which, and ``@override`` on every overridden method."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import lit_marl

ROOT = Path(lit_marl.__file__).parent
MAX_LINES = 450
#: packages whose overriding methods must say so with ``@override``
OVERRIDE_PACKAGES = ("lit_marl.algorithms", "lit_marl.envs", "lit_marl.models", "lit_marl.data", "lit_marl.callbacks",
                     "lit_marl.tune", "lit_marl.slurm", "lit_marl.evaluation", "lit_marl.export")


def _sources() -> list[Path]:
    return sorted(ROOT.rglob("*.py"))


def _imported_modules(path: Path, top_level_only: bool = False) -> set[str]:
    """Every module ``path`` imports, at the top or inside functions (absolute names); with ``top_level_only``, the
    ones imported when the module loads."""
    names: set[str] = set()
    tree = ast.parse(path.read_text())
    for node in tree.body if top_level_only else ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_no_source_file_is_longer_than_the_limit():
    long = {str(p.relative_to(ROOT)): n for p in _sources() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"files over {MAX_LINES} lines: {long}"


@pytest.mark.parametrize("package, forbidden", [
    ("data", "lit_marl.algorithms"),   # the iterables read a narrow Protocol, not the algorithm classes
    ("evaluation", "lit_marl.cli"),    # the CLI calls evaluation, never the other way round
    ("envs", "lit_marl.algorithms"),
    ("models", "lit_marl.algorithms"),
    ("callbacks", "lit_marl.algorithms"),
])
def test_dependencies_run_one_way(package, forbidden):
    offenders = {str(p.relative_to(ROOT)): sorted(m for m in _imported_modules(p) if m.startswith(forbidden))
                 for p in (ROOT / package).rglob("*.py")}
    assert not {k: v for k, v in offenders.items() if v}, f"{package}/ imports {forbidden}"


def test_evaluation_holds_offline_results_and_no_callback():
    """The callbacks that write results during a run live in ``callbacks/`` and build them with ``evaluation/``; the
    evaluation package defines none and loads without them (it reaches them only when a checkpoint is evaluated)."""
    from lightning.pytorch import Callback

    callbacks = [f"{cls.__module__}.{cls.__qualname__}" for cls in _classes("lit_marl.evaluation")
                 if issubclass(cls, Callback)]
    assert not callbacks, f"callbacks in evaluation/: {callbacks}"
    at_load = {str(p.relative_to(ROOT)): sorted(m for m in _imported_modules(p, top_level_only=True)
                                                 if m.startswith(("lit_marl.callbacks", "lit_marl.algorithms")))
               for p in (ROOT / "evaluation").rglob("*.py")}
    assert not {k: v for k, v in at_load.items() if v}, "evaluation/ imports callbacks/ or algorithms/ at load"


def test_tests_mirror_the_package():
    """``tests/<room>/`` tests ``lit_marl/<room>/``; beside them only the shared helpers, fixtures and the reliability
    checks (which cut across rooms); tests of top-level modules (cli.py, checkpoint.py…) sit in ``tests/``."""
    tests = Path(__file__).parent
    rooms = {p.name for p in tests.iterdir() if p.is_dir() and any(p.glob("test_*.py"))}
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert rooms - packages == {"reliability"}, f"test folders that are not lit_marl packages: {rooms - packages}"
    assert not any((tests / name).is_dir() and not (tests / name / "__init__.py").is_file() for name in rooms)


def test_the_registry_imports_no_algorithm_module():
    """Algorithms register themselves as they are defined, so the registry needs none of their modules (the
    ``base.py`` ↔ ``registry.py`` import circle is gone); it only imports the package, to load every family."""
    imported = _imported_modules(ROOT / "algorithms" / "registry.py")
    assert not {m for m in imported if m.startswith("lit_marl.algorithms.") and m != "lit_marl.algorithms.arguments"}
    assert "lit_marl.algorithms.registry" not in _imported_modules(ROOT / "algorithms" / "learner.py")


def _classes(package: str):
    module = importlib.import_module(package)
    names = [package] + [info.name for info in pkgutil.walk_packages(getattr(module, "__path__", []), package + ".")]
    for name in names:
        for _, cls in inspect.getmembers(importlib.import_module(name), inspect.isclass):
            if cls.__module__ == name:
                yield cls


def _overridden_without_decorator(cls: type) -> list[str]:
    missing = []
    for name, value in vars(cls).items():
        if name.startswith("__") and name.endswith("__"):
            continue  # dunder methods (``__init__``, ``forward``'s ``__call__``…) are not hooks
        function = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
        if not inspect.isfunction(function):
            continue
        overrides = any(name in vars(base) for base in cls.__mro__[1:] if base is not object)
        if overrides and not getattr(function, "__override__", False):
            missing.append(f"{cls.__module__}.{cls.__qualname__}.{name}")
    return missing


def _cli_modules() -> list[str]:
    """The modules ``lit-marl`` loads by string (``lit-marl benchmark|report|compare|export|tune``)."""
    from lit_marl.cli import RESULT_COMMANDS

    return sorted(set(RESULT_COMMANDS.values()))


def test_every_module_the_cli_loads_by_string_exists_and_is_checked():
    """A module named in a string is found only when the command runs: each must import, have ``main(argv)``, and
    fall under the ``@override`` check below (a package of OVERRIDE_PACKAGES, or checked on its own)."""
    for name in _cli_modules():
        assert callable(getattr(importlib.import_module(name), "main", None)), name


@pytest.mark.parametrize("package", OVERRIDE_PACKAGES + tuple(
    m for m in _cli_modules() if not m.startswith(tuple(p + "." for p in OVERRIDE_PACKAGES)) and m not in OVERRIDE_PACKAGES))
def test_every_overridden_method_carries_override(package):
    missing = [m for cls in _classes(package) for m in _overridden_without_decorator(cls)]
    assert not missing, f"overridden without @override: {missing}"


def test_the_override_check_sees_a_missing_decorator():
    class Base:
        def hook(self) -> None: ...

    class Forgets(Base):
        def hook(self) -> None: ...

    assert _overridden_without_decorator(Forgets) == [f"{__name__}.{Forgets.__qualname__}.hook"]
