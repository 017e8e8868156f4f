"""Errors lit-marl raises for bad input, and the checks that raise them.

The CLI prints a :class:`ConfigError` without a traceback and exits with code 2. Every message names
the field, the value and what is allowed.
"""

from __future__ import annotations

import math
from typing import Any


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


class NumericalError(RuntimeError):
    """Training stopped at a NaN/Inf loss term, gradient or weight; the message names where (group, term,
    iteration). The CLI prints it without a traceback and exits with code 3."""
