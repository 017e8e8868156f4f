"""One flat constructor per algorithm, declared once: the run's arguments where the run declares them, the learner's
where the learner does.

``MAPPO(task, clip_epsilon=0.1, frames_per_batch=6000, …)`` takes the arguments of its learner
(:class:`~lit_marl.algorithms.ppo.PPO` and the learner classes above it), of the loop its learner names
(:class:`~lit_marl.algorithms.loops.OnPolicyLoop`: ``n_minibatch_iters``, ``minibatch_size``) and of its run
(:class:`~lit_marl.algorithms.base.MarlAlgorithm`).
Each argument is declared, typed and documented in exactly one of those ``__init__`` signatures and docstrings;
:func:`compose` writes the algorithm's own ``__init__`` whose signature (what ``inspect.signature``, jsonargparse and
so ``lit-marl fit --help`` / ``--print_config`` read) and docstring are theirs put together.
"""

from __future__ import annotations

import importlib
import inspect
import re
import typing
from collections.abc import Iterator
from typing import Any

from lit_marl.algorithms.registry import algorithms_by_name, check_fits, is_algorithm
from lit_marl.errors import ConfigError, check_types, did_you_mean

#: the arguments a learner gets from the run, not from the user
LEARNER_CONTEXT = ("task", "group", "run")
#: the argument a loop gets from the run that holds it
LOOP_CONTEXT = ("run",)


def _own_init(klass: type) -> Any:
    """The ``__init__`` that ``klass`` itself defines (the one :func:`compose` wrapped, where it wrapped one), else None."""
    function = klass.__dict__.get("__init__")
    return getattr(function, "wrapped", None) if getattr(function, "composed", False) else function


def declaring(cls: type, skip: tuple[str, ...] = ()) -> Iterator[tuple[type, Any, list[inspect.Parameter]]]:
    """``(class, __init__, parameters)`` of each class along ``cls``'s MRO whose ``__init__`` declares arguments,
    most derived first, following ``**kwargs`` to the next class up (as jsonargparse does) and stopping at the first
    ``__init__`` without them. ``skip`` names parameters that are not the user's (``self`` always)."""
    for klass in cls.__mro__:
        function = _own_init(klass)
        if function is None:
            continue
        parameters = list(inspect.signature(function).parameters.values())[1:]
        try:  # the annotations as types, not strings: the composed signature is read far from their module
            hints = typing.get_type_hints(function)
        except Exception:
            hints = {}
        named = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in parameters
                 if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in skip]
        yield klass, function, named
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            return


def parameters_of(cls: type, skip: tuple[str, ...] = ()) -> list[inspect.Parameter]:
    """The arguments ``cls`` takes through its ``__init__`` chain (:func:`declaring`), base classes' first."""
    found: dict[str, inspect.Parameter] = {}
    for _, _, named in reversed(list(declaring(cls, skip))):
        for parameter in named:  # a subclass that declares an argument again (another default) is the one used,
            previous = found.get(parameter.name)  # with its base's annotation where it has none (``task``)
            if previous is not None and parameter.annotation is parameter.empty:
                parameter = parameter.replace(annotation=previous.annotation)
            found[parameter.name] = parameter
    return list(found.values())


def check_arguments(cls: type, values: dict[str, Any], prefix: str = "", skip: tuple[str, ...] = ()) -> None:
    """Refuse by name a value that does not fit the annotation of the ``__init__`` (along ``cls``'s chain) that
    declares it (``True`` for an int, ``"0.1"`` for a float…)."""
    for _, function, named in declaring(cls, skip):
        check_types(function, {p.name: values[p.name] for p in named if p.name in values}, prefix)


def _args_section(doc: str | None) -> list[str]:
    """The entries of a Google-style docstring's ``Args:`` section (each with its continuation lines), dedented."""
    lines = inspect.cleandoc(doc or "").splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if re.match(r"Args\b.*:\s*$", line))
    except StopIteration:
        return []
    entries = []
    for line in lines[start + 1:]:
        if line and not line.startswith(" "):
            break
        entries.append(line)
    indent = min((len(line) - len(line.lstrip()) for line in entries if line.strip()), default=0)
    return [line[indent:] for line in entries]


def _documented(owners: list[type]) -> str:
    """The ``Args:`` entries of the classes that declare the composed arguments, in their order."""
    entries: dict[str, list[str]] = {}  # by argument: a subclass's entry replaces its base's, in the base's place
    for owner in owners:
        for line in _args_section(owner.__doc__) + _args_section(_own_init(owner).__doc__):
            if line and not line.startswith(" "):
                name = line.split(":")[0].strip()
                entries[name] = []
            if entries:
                entries[name].append(line)
    return "\n".join("    " + line if line else "" for lines in entries.values() for line in lines)


def learner_skip(algorithm: type) -> tuple[str, ...]:
    """The arguments of ``algorithm``'s learner that are not the user's: what the run passes (task, group, run facts),
    what the algorithm fixes (``learner_settings``), and ``critic_model`` where the family has no critic."""
    learner = algorithm.learner_class
    return LEARNER_CONTEXT + tuple(algorithm.learner_settings) + (() if learner.has_critic else ("critic_model",))


def compose(cls: type, learner: type | None) -> None:
    """Give the concrete algorithm ``cls`` an ``__init__(self, task, **arguments)`` whose signature and ``Args:`` are
    its learner's arguments (``learner``'s chain), its learner's loop's (the loop's sizes) and its run's (``cls``'s own
    ``__init__`` chain), and which refuses an unknown argument by name (with the closest ones) before anything is
    built."""
    skip = learner_skip(cls) if learner is not None else ()
    loop = getattr(learner, "loop", None)
    run_parameters = parameters_of(cls)
    learner_parameters = parameters_of(learner, skip) if learner is not None else []
    loop_parameters = parameters_of(loop, LOOP_CONTEXT) if loop is not None else []
    task, *run_parameters = run_parameters
    declared = {"run": run_parameters, "learner": learner_parameters, "loop": loop_parameters}
    for a, b in (("run", "learner"), ("run", "loop"), ("learner", "loop")):
        clash = {p.name for p in declared[a]} & {p.name for p in declared[b]}
        if clash:
            raise TypeError(f"{cls.__name__}: {', '.join(sorted(clash))} declared by both its {a} and its {b}")
    others = [*learner_parameters, *loop_parameters, *run_parameters]
    parameters = [task, *(p for p in others if p.default is p.empty), *(p for p in others if p.default is not p.empty)]
    signature = inspect.Signature([inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                                   *(p.replace(kind=p.POSITIONAL_OR_KEYWORD) for p in parameters)])
    names = [p.name for p in parameters]
    run_init = next(function for _, function, _ in declaring(cls))  # the most derived __init__ of the run

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        unknown = [name for name in kwargs if name not in names]
        if unknown:
            name = unknown[0]
            raise ConfigError(f"{name}: {cls.__name__} has no such argument; {did_you_mean(name, names)}allowed: "
                              f"{', '.join(names)}")
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError as err:
            raise ConfigError(f"{cls.__name__}: {err}") from None
        values = dict(list(bound.arguments.items())[1:])
        check_arguments(cls, values)  # the run's (the learner's are checked by the run, after the learner's own checks)
        bound.apply_defaults()
        if "_arguments" not in self.__dict__:  # the outermost class's: every argument with its default (hparams)
            self._arguments = dict(list(bound.arguments.items())[1:])
        run_init(self, **values)

    __init__.__signature__ = signature  # type: ignore[attr-defined]
    __init__.__annotations__ = {p.name: p.annotation for p in parameters if p.annotation is not p.empty}
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    __init__.__module__ = cls.__module__
    __init__.composed = True  # type: ignore[attr-defined]
    __init__.wrapped = cls.__dict__.get("__init__") if _own_init(cls) is not None else None  # type: ignore
    cls.__init__ = __init__  # type: ignore[misc]
    owners = [k for k, _, _ in reversed(list(declaring(learner)))] if learner is not None else []
    owners += [k for k, _, _ in reversed(list(declaring(loop)))] if loop is not None else []
    owners += [k for k, _, _ in reversed(list(declaring(cls)))]
    # the docstring jsonargparse and help() read for every argument: the class's own text, then all of them
    own = re.split(r"\n\s*Args\b.*:\s*\n", inspect.cleandoc(cls.__doc__ or ""))[0].rstrip()
    cls.__doc__ = f"{own}\n\nArgs:\n{_documented(owners)}\n"


def build_learner(algorithm: type, task: Any, group: str | None, facts: Any, arguments: dict[str, Any],
                  entry: str | None = None) -> Any:
    """``algorithm``'s learner of ``group``. With ``group=None`` it only checks, before the groups are known (the probe
    env is not built yet): the learner's own checks, its arguments' types, and the task and models against what the
    algorithm can train. A ConfigError is named by ``entry`` where given (an Ensemble's ``algorithms.<group>``)."""
    try:
        learner = algorithm.learner_class(task, group, facts, **algorithm.learner_settings, **arguments)
        if group is None:
            check_arguments(algorithm.learner_class, arguments, skip=learner_skip(algorithm))
            check_fits(algorithm.__name__, algorithm, task, learner.actor_model, learner.critic_model)
        return learner
    except ConfigError as err:
        if entry is None:
            raise
        where = f"{entry} ({algorithm.__name__}): " if str(err).startswith("task") else f"{entry}.init_args."
        raise ConfigError(where + str(err)) from None


def algorithm_entry(field: str, entry: Any) -> tuple[type, dict[str, Any]]:
    """The algorithm class and its learner's arguments that a config entry ``{class_path, init_args}`` names (an
    Ensemble's ``algorithms.<group>``, given as ``field``), refused by name unless it is a lit-marl algorithm whose
    learner takes those arguments."""
    allowed = ", ".join(c.__name__ for c in algorithms_by_name().values() if c.learner_class is not None)
    if not isinstance(entry, dict) or not isinstance(entry.get("class_path"), str) or set(entry) - {"class_path",
                                                                                                    "init_args"}:
        raise ConfigError(f"{field}: expected {{class_path: <algorithm>, init_args: {{…}}}}, got {entry!r}; "
                          f"allowed algorithms: {allowed}")
    module_name, _, name = entry["class_path"].rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name or "lit_marl.algorithms"), name)
    except (ImportError, AttributeError, ValueError):
        cls = None
    if not (is_algorithm(cls) and cls.learner_class):
        raise ConfigError(f"{field}.class_path: {entry['class_path']!r} is not a lit-marl algorithm; "
                          f"allowed: {allowed} (as lit_marl.algorithms.<name>), or a subclass of one")
    init_args = dict(entry.get("init_args") or {})
    own = [p.name for p in parameters_of(cls.learner_class, learner_skip(cls))]
    for name in init_args:
        if name not in own:
            shared = name in inspect.signature(cls).parameters
            raise ConfigError(f"{field}.init_args.{name}: " + (
                f"set once for all groups on the ensemble (model.init_args.{name}), since the groups share one "
                f"collection and training loop; allowed: leave it out of {field}" if shared else
                f"{cls.__name__} has no such argument; allowed: {', '.join(own)}"))
    return cls, init_args
