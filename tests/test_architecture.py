"""The layering the design promises (docs/concepts/architecture.md, "Rooms and the rules between them"), checked on
the source: file sizes, which package may import which, and ``@override`` on every overridden method."""

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
                     "lit_marl.tune", "lit_marl.slurm", "lit_marl.benchmark", "lit_marl.evaluation", "lit_marl.export")


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
    evaluation package defines none and imports neither them nor the algorithms (the checkpoint runner that needs
    both, ``lit_marl/evaluate.py``, sits above them)."""
    from lightning.pytorch import Callback

    callbacks = [f"{cls.__module__}.{cls.__qualname__}" for cls in _classes("lit_marl.evaluation")
                 if issubclass(cls, Callback)]
    assert not callbacks, f"callbacks in evaluation/: {callbacks}"
    imported = {str(p.relative_to(ROOT)): sorted(m for m in _imported_modules(p)
                                                 if m.startswith(("lit_marl.callbacks", "lit_marl.algorithms")))
                for p in (ROOT / "evaluation").rglob("*.py")}
    assert not {k: v for k, v in imported.items() if v}, "evaluation/ imports callbacks/ or algorithms/"


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
    ``base.py`` ↔ ``registry.py`` and ``arguments.py`` ↔ ``registry.py`` import circles are gone); importing it loads
    the package, and so every family, first."""
    imported = _imported_modules(ROOT / "algorithms" / "registry.py")
    assert not {m for m in imported if m.startswith("lit_marl.algorithms")}
    assert "lit_marl.algorithms.registry" not in _imported_modules(ROOT / "algorithms" / "learner.py")


def _module_name(path: Path) -> str:
    parts = ["lit_marl", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph(unit=lambda name: name) -> dict[str, set[str]]:
    """``{module: lit-marl modules it imports}`` (at the top and inside functions; ``from package import module``
    counts the module), each name mapped through ``unit`` (e.g. to its top-level package)."""
    modules = {_module_name(p): p for p in _sources()}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                targets.add(node.module)
                targets.update(f"{node.module}.{alias.name}" for alias in node.names)
        edges = {unit(t) for t in targets if t in modules} - {unit(name)}
        graph.setdefault(unit(name), set()).update(edges)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each node that lies on one (depth-first search)."""
    found, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_the_import_graph_has_no_cycle_between_modules_or_rooms():
    """Issue 35: no two modules import each other, directly or around a loop (a package's face counts as a module:
    a submodule importing its own package's ``__init__`` loops through it), and neither do the rooms (the top-level
    packages and modules of ``lit_marl/``), so every import runs from a higher layer down to a lower one."""
    assert not _cycles(_import_graph()), _cycles(_import_graph())
    rooms = _import_graph(lambda name: ".".join(name.split(".")[:2]))
    assert not _cycles(rooms), _cycles(rooms)


def test_the_cycle_check_sees_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


#: the one import of lit-marl inside a function: ``lit-marl``'s entry point imports the CLI inside a try, so that a
#: Ctrl-C while torch loads ends quietly
FUNCTION_LEVEL_IMPORTS = {"__main__.py": {"lit_marl.cli"}}


def test_lit_marl_modules_are_imported_at_the_top_and_no_private_name_across_modules():
    """Issue 35: an import of lit-marl inside a function dodges a cycle (none left: optional packages, optuna or
    submitit, are the imports functions may make); a private name (``_x``) is its module's own."""
    inside, private = {}, []
    for path in _sources():
        tree = ast.parse(path.read_text())
        top = set(id(node) for node in tree.body)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            ours = [n for n in names if n == "lit_marl" or n.startswith("lit_marl.")]
            if ours and id(node) not in top:
                inside.setdefault(str(path.relative_to(ROOT)), set()).update(ours)
            if isinstance(node, ast.ImportFrom) and ours:
                private += [f"{path.relative_to(ROOT)}: {node.module}.{a.name}" for a in node.names
                            if a.name.startswith("_") and not a.name.startswith("__")]
    assert inside == FUNCTION_LEVEL_IMPORTS
    assert not private, private


#: the packages a function may import where it needs them: optional ones (lit-marl's extras: a missing one is refused
#: by name where it is needed), never the standard library or a dependency lit-marl always has
OPTIONAL_PACKAGES = {"optuna", "submitit", "matplotlib", "scipy", "av", "PIL", "tensorboard", "onnxruntime", "mujoco",
                     "gymnasium_robotics", "rware", "pettingzoo"}


def test_only_optional_packages_are_imported_inside_functions():
    """Issue 35 item 3: "imports inside functions only where a package is optional" (``__main__``'s import of the
    CLI apart): the standard library, torch, Lightning, torchrl, jsonargparse and YAML are imported at the top."""
    inside = {}
    for path in _sources():
        tree = ast.parse(path.read_text())
        top = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top:
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                for name in names:
                    if name.split(".")[0] not in OPTIONAL_PACKAGES | {"lit_marl"}:
                        inside.setdefault(str(path.relative_to(ROOT)), set()).add(name)
    assert not inside, inside


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
        if function.__qualname__ != f"{cls.__qualname__}.{name}":
            continue  # not written in this class: a base's own method that a framework re-wraps per subclass
            # (torchrl's LossModule puts a wrapped copy of the base loss's ``forward`` on every subclass)
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


def _lit_marl_classes(cls: type, packages: tuple[str, ...] = ("lit_marl",)) -> list[str]:
    """The classes of ``cls``'s order that ``packages`` define (a user's subclass counts where its package is named)."""
    return [k.__name__ for k in cls.__mro__ if k.__module__.split(".")[0] in packages]


def test_an_algorithm_is_a_run_of_at_most_three_classes_and_holds_its_loop_and_collection():
    """Issue 35: how a run loops, collects and evaluates are objects it holds (``run.loop``, ``run.collection``,
    ``run.evaluation``), the loop named by its learners, not layers of its class (``MarlAlgorithm`` stands on
    ``LightningModule`` alone): at most 3 lit-marl classes in any algorithm's class order (learners apart), and
    the sequential-agents algorithms define no Lightning hook of their own."""
    import lightning.pytorch as pl

    from lit_marl.algorithms.registry import algorithms_by_name

    algorithms = algorithms_by_name()
    assert {"mappo", "qmix", "happo", "hatrpo", "hasac", "ensemble"} <= set(algorithms)
    too_deep = {name: _lit_marl_classes(cls) for name, cls in algorithms.items() if len(_lit_marl_classes(cls)) > 3}
    assert not too_deep, too_deep
    for name in ("happo", "hatrpo", "hasac"):
        hooks = [m for m in vars(algorithms[name]) if m != "__init__" and callable(getattr(pl.LightningModule, m, None))]
        assert not hooks, (name, hooks)
    run_layers = {name: _lit_marl_classes(cls)[1:] for name, cls in algorithms.items()
                  if _lit_marl_classes(cls)[-1] != "MarlAlgorithm"}  # the run's class stands on Lightning's alone
    assert not run_layers, run_layers


def test_the_class_order_check_sees_a_run_layer():
    from lit_marl.algorithms import MAPPO, MarlAlgorithm

    class Layer(MarlAlgorithm):
        pass

    class Deep(Layer, MAPPO):
        pass

    assert _lit_marl_classes(Deep, ("lit_marl", "tests")) == ["Deep", "Layer", "MAPPO", "MarlAlgorithm"]
