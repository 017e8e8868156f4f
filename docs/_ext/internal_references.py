"""References to lit-marl's internal objects (a private base class in a class's bases, a helper a docstring names)
are shown as code instead of links: the API reference documents only the public names. Only a name that really
exists in lit-marl is let through; a reference to anything else of lit-marl's (a typo, a renamed or removed object)
stays a warning, which the build (``-W``) turns into an error."""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil

from docutils import nodes


def _exists(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attribute in parts[cut:]:
                obj = getattr(obj, attribute)
        except AttributeError:
            return False
        return True
    return False


@functools.cache
def _names_in_lit_marl() -> frozenset[str]:
    """Every name a lit-marl module defines at its top level, and every attribute of those classes (what an
    unqualified reference in a docstring, such as ``joint_with_ids`` or ``after_step``, may mean)."""
    import lit_marl

    names = set()
    for info in pkgutil.walk_packages(lit_marl.__path__, "lit_marl."):
        try:
            module = importlib.import_module(info.name)
        except Exception:  # an optional task family's simulator is not installed: its names are not needed here
            continue
        for name, value in vars(module).items():
            if getattr(value, "__module__", module.__name__) == module.__name__ or not callable(value):
                names.add(name)
                if inspect.isclass(value):
                    names.update(vars(value))
    return frozenset(names)


def _candidates(target: str, node) -> list[str]:
    if target.startswith("lit_marl."):
        return [target]
    module, cls = node.get("py:module"), node.get("py:class")
    found = []
    if module and module.startswith("lit_marl"):
        if cls:
            found.append(f"{module}.{cls}.{target}")
        found.append(f"{module}.{target}")
    return found


def _known(target: str, node) -> bool:
    if any(_exists(candidate) for candidate in _candidates(target, node)):
        return True
    module = node.get("py:module") or ""
    return module.startswith("lit_marl") and target.split(".")[0] in _names_in_lit_marl()


def _missing_reference(app, env, node, contnode):
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    if _known(target, node):
        return nodes.literal(text=contnode.astext())
    return None


def setup(app):
    app.connect("missing-reference", _missing_reference)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
