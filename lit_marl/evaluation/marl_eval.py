"""marl-eval's JSON (Gorsane et al., NeurIPS 2022) read back: the shape ``lit-marl report`` needs of it.

:class:`lit_marl.callbacks.MarlEvalJson` writes it during training.
"""

from __future__ import annotations

from typing import Any

from lit_marl.reading import json_kind

#: the file name in a run folder
FILE_NAME = "marl_eval.json"
#: what ``lit-marl report`` reads
ALLOWED = ("marl-eval JSON {env: {task: {algorithm: {seed_<s>: {step_<k>: {step_count: <frames>, return: [...]}}}}}} "
           "as lit-marl fit and lit-marl benchmark write it, or folders holding such files or lit-marl fit runs")


def _numbers(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)


def marl_eval_shape(data: Any) -> str | None:
    """What ``lit-marl report`` needs of a marl-eval JSON that ``data`` lacks (None: nothing)."""
    runs = [("", data)]
    for level in ("env", "task", "algorithm", "seed_<s>"):  # the four levels of objects above each run
        nested = []
        for where, node in runs:
            if not isinstance(node, dict):
                return f"{where or 'the top level'} is {json_kind(node)}, not an object of {level}s"
            nested += [(f"{where}/{key}" if where else str(key), value) for key, value in node.items()]
        runs = nested
    for where, run in runs:
        if not where.rpartition("/")[2].removeprefix("seed_").lstrip("-").isdigit():
            return f"{where!r} is not named seed_<integer>"
        if not isinstance(run, dict):
            return f"{where} is {json_kind(run)}, not an object of step_<k> evaluations"
        for key, step in run.items():
            if not key.startswith("step_") and "absolute" not in key:
                continue
            if not isinstance(step, dict) or not _numbers(step.get("return")):
                return f"{where}/{key} has no 'return' list of numbers"
            count = step.get("step_count")
            if key.startswith("step_") and (not isinstance(count, (int, float)) or isinstance(count, bool)):
                return f"{where}/{key} has no number 'step_count'"
    return None
