"""Published results beside a report's own (``lit-marl report --references FILE``): a YAML mapping of each task (as
the report names it, ``<env>/<task>``) to the points papers and other libraries published for it::

    mamujoco/HalfCheetah-2x3:
      - {label: HAPPO (HARL), frames: 10000000, return: 7000, source: "Zhong et al. 2024, JMLR, fig. 4 (read off)"}
      - {label: MAPPO (HARL), frames: 10000000, return: 6900, source: "Zhong et al. 2024, JMLR, fig. 4 (read off)"}

Each point is drawn on that task's curve and listed in ``report.md`` with its source and budget; an optional
``note`` says what differs (another simulator version, numbers read off a plot). A task no run of the report is on,
or a point without its source, is refused by name: a reference that is not drawn must not pass unnoticed.
"""

from __future__ import annotations

import math
import os
from typing import Any

from lit_marl.errors import ConfigError
from lit_marl.reading import read_yaml

#: what each point must say, and what it may add
REQUIRED, OPTIONAL = ("label", "frames", "return", "source"), ("note",)
ALLOWED = "a YAML mapping of task (<env>/<task>) to a list of {label, frames, return, source[, note]}"


def read_references(path: str | os.PathLike, tasks: list[str]) -> dict[str, list[dict[str, Any]]]:
    """The points of the file at ``path`` for the report's ``tasks``, checked."""
    data = read_yaml(path, "references:", ALLOWED)
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"references: {str(path)!r} holds no task; allowed: {ALLOWED}")
    checked: dict[str, list[dict[str, Any]]] = {}
    for task, points in data.items():
        if task not in tasks:
            raise ConfigError(f"references.{task}: no run of this report is on task {task!r}, so its points would "
                              f"not be drawn; allowed: {', '.join(tasks)}")
        if not isinstance(points, list) or not points:
            raise ConfigError(f"references.{task}: expected a list of points, got {points!r}; allowed: {ALLOWED}")
        checked[task] = [_point(point, f"references.{task}[{i}]") for i, point in enumerate(points)]
    return checked


def _point(point: Any, where: str) -> dict[str, Any]:
    if not isinstance(point, dict):
        raise ConfigError(f"{where}: expected {{label, frames, return, source}}, got {point!r}")
    missing = [key for key in REQUIRED if key not in point]
    unknown = sorted(set(point) - set(REQUIRED) - set(OPTIONAL))
    if missing or unknown:
        name = (missing or unknown)[0]
        raise ConfigError(f"{where}.{name}: {'missing' if missing else 'unknown key'}; allowed keys: "
                          f"{', '.join(REQUIRED + OPTIONAL)} (the source is required: where the number was published)")
    for key in ("label", "source"):
        if not isinstance(point[key], str) or not point[key].strip():
            raise ConfigError(f"{where}.{key}: must be a non-empty text, got {point[key]!r}")
    for key, positive in (("frames", True), ("return", False)):
        value = point[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or (
                positive and value <= 0):
            allowed = "a number > 0" if positive else "a finite number"
            raise ConfigError(f"{where}.{key}: {value!r}; allowed: {allowed}")
    return {key: point[key] for key in (*REQUIRED, *OPTIONAL) if key in point}


def markdown_lines(references: dict[str, list[dict[str, Any]]]) -> list[str]:
    """``report.md``'s table of the published points."""
    if not references:
        return []
    lines = ["## Published results (drawn on the per-task curves)", "",
             "| task | result | frames | return | source |", "|---|---|---:|---:|---|"]
    for task, points in references.items():
        for p in points:
            note = f" ({p['note']})" if p.get("note") else ""
            lines.append(f"| {task} | {p['label']} | {p['frames']:,} | {p['return']:g} | {p['source']}{note} |")
    return [*lines, ""]
