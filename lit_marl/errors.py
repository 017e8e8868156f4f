"""Errors lit-marl raises for bad input, and the checks that raise them.

The CLI prints a :class:`ConfigError` without a traceback and exits with code 2. Every message names
the field, the value and what is allowed.
"""

from __future__ import annotations

import collections.abc
import contextlib
import contextvars
import difflib
import math
import types
import typing
from typing import Any

import torch


class ConfigError(ValueError):
    """A configuration value that is not allowed; the message names the field, the value and what is allowed."""


class CheckpointError(ConfigError):
    """A checkpoint that cannot be used (missing, truncated, or from another algorithm or task)."""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def positive_int(field: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{field}: must be a positive integer, got {value!r}")
    return value


def non_negative_int(field: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"{field}: must be an integer >= 0, got {value!r}")
    return value


#: numpy's seed range: every environment, and numpy itself, is seeded from a run's seeds
MAX_SEED = 2 ** 32 - 1


def seed_value(field: str, value: Any) -> int:
    """A seed: an integer in numpy's range 0..2**32-1 (a negative one fails inside the first environment's seeding)."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_SEED:
        raise ConfigError(f"{field}: must be an integer in 0..{MAX_SEED} (numpy's seed range), got {value!r}")
    return value


def positive_float(field: str, value: Any) -> float:
    if not _is_number(value) or value <= 0:
        raise ConfigError(f"{field}: must be a positive finite number, got {value!r}")
    return float(value)


def non_negative_float(field: str, value: Any) -> float:
    if not _is_number(value) or value < 0:
        raise ConfigError(f"{field}: must be a finite number >= 0, got {value!r}")
    return float(value)


def unit_interval(field: str, value: Any) -> float:
    if not _is_number(value) or not 0 <= value <= 1:
        raise ConfigError(f"{field}: must be a number in [0, 1], got {value!r}")
    return float(value)


def one_of(field: str, value: Any, allowed: tuple) -> Any:
    if value not in allowed:
        raise ConfigError(f"{field}: {value!r} is not one of {', '.join(map(repr, allowed))}")
    return value


def check_gradient_clipping(gradient_clip_val: Any, gradient_clip_algorithm: Any,
                            prefix: str = "trainer.") -> None:
    """The Trainer's clipping settings as lit-marl's per-group clipping reads them: ``None`` or ``0`` is no clipping
    (Lightning's meaning); a negative value would flip the sign of every gradient (``clip_grads_with_norm_`` scales by
    ``max_norm / norm``), so it is refused, as is an algorithm other than ``norm`` or ``value``."""
    if gradient_clip_val is not None and (not _is_number(gradient_clip_val) or gradient_clip_val < 0):
        raise ConfigError(f"{prefix}gradient_clip_val: must be a finite number >= 0, got {gradient_clip_val!r} (a "
                          f"negative value would flip every gradient's sign); allowed: a positive number, or 0 or "
                          f"null for no clipping")
    if gradient_clip_algorithm is not None and str(getattr(gradient_clip_algorithm, "value", gradient_clip_algorithm)
                                                   ).lower() not in ("norm", "value"):
        raise ConfigError(f"{prefix}gradient_clip_algorithm: {gradient_clip_algorithm!r} is not supported; allowed: "
                          f"'norm' (each parameter group's gradient norm, BenchMARL's clipping; the default), 'value'")


class NumericalError(RuntimeError):
    """Training stopped at a NaN/Inf loss term, gradient or weight; the message names where (group, term,
    iteration). The CLI prints it without a traceback and exits with code 3."""


def _describe(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return f"one of {', '.join(map(repr, args))}"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    if annotation is type(None):
        return "None"
    if origin in (list, tuple, collections.abc.Sequence):
        return f"a list of {_describe(args[0])}" if args else "a list"
    if origin in (dict, collections.abc.Mapping) or annotation is dict:
        return "a mapping"
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _matches(value: Any, annotation: Any) -> bool:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any or isinstance(annotation, typing.TypeVar):
        return True
    if origin is typing.Literal:
        return value in args
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, a) for a in args)
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if origin in (list, tuple, collections.abc.Sequence):
        return (isinstance(value, (list, tuple)) and
                (not args or args[-1] is Ellipsis and _all(value, args[0]) or args[-1] is not Ellipsis and
                 (origin is not tuple or len(args) == len(value)) and _all(value, args[0])))
    if origin in (dict, collections.abc.Mapping) or annotation in (dict, collections.abc.Mapping):
        return isinstance(value, collections.abc.Mapping)
    if isinstance(annotation, type):
        # configurable objects (Task, ModelConfig) are also given as {"class_path", "init_args"} or a name
        return isinstance(value, (annotation, collections.abc.Mapping, str))
    return True


def _all(values, annotation) -> bool:
    return all(_matches(v, annotation) for v in values)


def check_types(function: Any, values: dict[str, Any], prefix: str = "") -> None:
    """Raise :class:`ConfigError` for the first argument in ``values`` whose value does not fit ``function``'s type
    annotation (``True`` for an ``int``, ``"0.1"`` for a ``float``, ``3`` for a ``bool``…), naming it, the value and
    the allowed type. Python converts such values silently (``bool("no")`` is True); the CLI's parser does not."""
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # annotations that do not resolve at run time (TYPE_CHECKING imports): nothing to check
        return
    for name, value in values.items():
        if name in hints and name != "return" and not _matches(value, hints[name]):
            raise ConfigError(f"{prefix}{name}: must be {_describe(hints[name])}, got {value!r}")


def did_you_mean(name: str, choices, cutoff: float = 0.5, prefix: str = "") -> str:
    """``"did you mean 'a', 'b'? "`` for the up to three ``choices`` closest to a mistyped ``name`` (each shown with
    ``prefix``), or ``""`` when none is close."""
    close = difflib.get_close_matches(name, list(choices), n=3, cutoff=cutoff)
    return f"did you mean {', '.join(repr(prefix + c) for c in close)}? " if close else ""


#: set while a config for another machine is checked (:func:`devices_elsewhere`)
_DEVICES_ELSEWHERE = contextvars.ContextVar("devices_elsewhere", default=False)


@contextlib.contextmanager
def devices_elsewhere():
    """While in the block, :func:`device_name` checks a device name's form only: the config is checked here for
    another machine (a SLURM grid's runs, built on compute nodes whose devices a login node may lack)."""
    token = _DEVICES_ELSEWHERE.set(True)
    try:
        yield
    finally:
        _DEVICES_ELSEWHERE.reset(token)


def device_name(field: str, value: str | None) -> str | None:
    """A device name, refused by name where it does not exist on this machine (or, in :func:`devices_elsewhere`,
    where it is no device name)."""
    if value is None:
        return None
    try:
        device = torch.device(value)
    except (RuntimeError, TypeError):
        raise ConfigError(f"{field}: {value!r} is not a device; allowed: cpu, cuda, cuda:<index>, mps") from None
    if _DEVICES_ELSEWHERE.get():
        return str(device)
    if device.type == "cuda" and (not torch.cuda.is_available() or (device.index or 0) >= torch.cuda.device_count()):
        raise ConfigError(f"{field}: {value!r} but this machine has {torch.cuda.device_count()} CUDA device(s); "
                          f"allowed: cpu{', cuda' if torch.cuda.is_available() else ''}")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"{field}: 'mps' is not available on this machine; allowed: cpu")
    return str(device)
