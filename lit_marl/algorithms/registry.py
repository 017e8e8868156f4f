"""The one registry of lit-marl's algorithms: the concrete :class:`MarlAlgorithm` subclasses lit-marl ships
(those with an ``algorithm_name``), found by walking the class tree, so a new algorithm file registers itself."""

from __future__ import annotations

from lit_marl.errors import ConfigError


def algorithms_by_name() -> dict[str, type]:
    """``{algorithm_name: class}`` of lit-marl's algorithms (a research subclass outside ``lit_marl`` is not
    listed, and never shadows the class it extends)."""
    import lit_marl.algorithms  # noqa: F401  (imports every algorithm family, so every class is registered)
    from lit_marl.algorithms.base import MarlAlgorithm

    found: dict[str, type] = {}
    pending = list(MarlAlgorithm.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls.algorithm_name and cls.__module__.startswith("lit_marl."):
            found.setdefault(cls.algorithm_name, cls)
    return dict(sorted(found.items()))


def algorithm_class(name: str) -> type:
    """The lit-marl algorithm class whose ``algorithm_name`` is ``name``."""
    found = algorithms_by_name()
    if name not in found:
        raise ConfigError(f"algorithm: {name!r} is not a lit-marl algorithm; allowed: {', '.join(found)}")
    return found[name]


def algorithm_names(**flags: bool) -> list[str]:
    """Class names of the algorithms whose capability flags have the given values, e.g.
    ``algorithm_names(supports_recurrent=True)`` (an :class:`~lit_marl.algorithms.Ensemble` is never listed)."""
    return sorted(cls.__name__ for cls in algorithms_by_name().values()
                  if all(getattr(cls, flag) == value for flag, value in flags.items())
                  and not getattr(cls, "per_group_algorithms", False))  # an Ensemble's flags are its groups' to say
