"""The one registry of lit-marl's algorithms: every concrete algorithm class (one with an ``algorithm_name``) is
registered as it is defined (``MarlAlgorithm.__init_subclass__`` calls :func:`register`), so a new algorithm file
registers itself. This module imports nothing of the algorithms' (no import circle with ``base.py``)."""

from __future__ import annotations

from typing import Any

from lit_marl.errors import ConfigError

#: every concrete algorithm class defined so far, lit-marl's and research subclasses, in definition order
_REGISTERED: list[type] = []


def register(cls: type) -> None:
    """Record a concrete algorithm class (called for each as it is defined)."""
    _REGISTERED.append(cls)


def is_algorithm(cls: Any) -> bool:
    """Whether ``cls`` is a concrete lit-marl algorithm class (lit-marl's or a subclass of one)."""
    return isinstance(cls, type) and cls in _REGISTERED


def algorithms_by_name() -> dict[str, type]:
    """``{algorithm_name: class}`` of lit-marl's algorithms (a research subclass outside ``lit_marl`` is not
    listed, and never shadows the class it extends). Complete whenever this module is: importing it loads
    ``lit_marl.algorithms`` first, which imports every algorithm family."""
    found: dict[str, type] = {}
    for cls in _REGISTERED:
        if cls.__module__.startswith("lit_marl."):
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



def check_fits(name: str, cls: type, task: Any, actor_model: Any, critic_model: Any) -> None:
    """Refuse, by name and before any env is built, a task whose action space or models the algorithm ``name``
    (whose learner is ``cls``, with its capability flags) cannot train, naming the algorithms that could."""
    for field, model in (("actor_model", actor_model), ("critic_model", critic_model)):
        if model.is_recurrent and not cls.supports_recurrent:
            raise ConfigError(
                f"{field}: {type(model).__name__} is recurrent, and {name} cannot train recurrent networks "
                f"yet; allowed: a feed-forward model (Mlp, Cnn, DeepSets, Gnn), or an algorithm that trains on "
                f"sequences: {', '.join(algorithm_names(supports_recurrent=True))}"
            )
    continuous = task.continuous_actions
    if cls.supports_continuous_actions if continuous else cls.supports_discrete_actions:
        return
    kind, other = ("continuous", "discrete") if continuous else ("discrete", "continuous")
    flag = "supports_continuous_actions" if continuous else "supports_discrete_actions"
    raise ConfigError(
        f"task.continuous_actions: {name} needs {other} actions, but the task {task.name} has {kind} "
        f"actions; allowed: continuous_actions={str(not continuous).lower()}, or an algorithm for {kind} actions: "
        f"{', '.join(algorithm_names(**{flag: True})) or 'none yet'}"
    )
