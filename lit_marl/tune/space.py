"""The search-space file of ``lit-marl tune``: read, checked by name before any trial starts.

::

    space:                                      # dotted keys of the config (as --print_config shows it)
      model.init_args.lr: {type: log_float, low: 1.0e-5, high: 1.0e-3}
      model.init_args.clip_epsilon: {type: float, low: 0.1, high: 0.3}
      model.init_args.n_minibatch_iters: {type: int, low: 1, high: 10, step: 1}
      model.init_args.share_policy_params: {type: categorical, choices: [true, false]}
    objective: val/return      # the last evaluation's val/return, or auc (area under the evaluation curve)
    direction: maximize        # or minimize
    trials: 20                 # the study's trial count (a re-run continues up to it)
    seeds: [0, 1, 2]           # every trial runs each seed; its value is the seeds' interquartile mean
    sampler: tpe               # or {type: tpe, seed: 0, ...TPESampler's arguments}; random
    pruner: median             # none, median, hyperband, or {type: median, n_warmup_steps: 1000}
    heartbeat_timeout: 120     # seconds without a worker's heartbeat before its running trial counts as failed

Everything but ``space`` may also be given on the command line (which wins).
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import Any

from lit_marl.errors import ConfigError, did_you_mean, positive_float, positive_int

DISTRIBUTIONS = ("float", "log_float", "int", "categorical")
OBJECTIVES = ("val/return", "auc")
DIRECTIONS = ("maximize", "minimize")
SAMPLERS = ("tpe", "random")
PRUNERS = ("none", "median", "hyperband")
SETTINGS = ("space", "objective", "direction", "trials", "seeds", "sampler", "pruner", "heartbeat_timeout",
            "launcher", "slurm")  # (the last two: how the workers start, read by lit_marl.tune.command)
#: the arguments each distribution takes (``type`` aside)
_ARGS = {"float": ("low", "high"), "log_float": ("low", "high"), "int": ("low", "high", "step"),
         "categorical": ("choices",)}


def _number(field_name: str, value: Any, integer: bool = False) -> float | int:
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if not ok or isinstance(value, bool) or not math.isfinite(value):
        raise ConfigError(f"{field_name}: must be {'an integer' if integer else 'a finite number'}, got {value!r}")
    return value


def parse_distribution(key: str, spec: Any):
    """An Optuna distribution from one entry of ``space`` (``space.<key>`` names it in every refusal)."""
    import optuna.distributions as d

    field_name = f"space.{key}"
    if not isinstance(spec, dict) or "type" not in spec:
        raise ConfigError(f"{field_name}: must be a mapping with a type ({', '.join(DISTRIBUTIONS)}), got {spec!r}")
    kind = spec["type"]
    if kind not in DISTRIBUTIONS:
        raise ConfigError(f"{field_name}.type: {kind!r} is not a distribution; {did_you_mean(str(kind), DISTRIBUTIONS)}"
                          f"allowed: {', '.join(DISTRIBUTIONS)}")
    unknown = sorted(set(spec) - {"type", *_ARGS[kind]})
    if unknown:
        raise ConfigError(f"{field_name}: {kind} takes {', '.join(_ARGS[kind])}, not {', '.join(unknown)}")
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise ConfigError(f"{field_name}.choices: must be a non-empty list, got {choices!r}")
        if len(set(map(repr, choices))) != len(choices):
            raise ConfigError(f"{field_name}.choices: {choices!r} repeats a choice; allowed: distinct values")
        if not all(c is None or isinstance(c, (bool, int, float, str)) for c in choices):
            raise ConfigError(f"{field_name}.choices: {choices!r}; allowed: null, booleans, numbers and strings "
                              f"(Optuna stores nothing else)")
        return d.CategoricalDistribution(choices)
    for name in ("low", "high"):
        if name not in spec:
            raise ConfigError(f"{field_name}.{name}: missing; {kind} needs {', '.join(_ARGS[kind][:2])}")
    integer = kind == "int"
    low, high = (_number(f"{field_name}.{n}", spec[n], integer) for n in ("low", "high"))
    if low >= high:
        raise ConfigError(f"{field_name}: low {low!r} must be below high {high!r}")
    if kind == "log_float":
        if low <= 0:
            raise ConfigError(f"{field_name}.low: a log_float range must be positive, got {low!r}; allowed: low > 0")
        return d.FloatDistribution(low, high, log=True)
    if kind == "float":
        return d.FloatDistribution(low, high)
    step = spec.get("step", 1)
    if not isinstance(step, int) or isinstance(step, bool) or step <= 0:
        raise ConfigError(f"{field_name}.step: must be a positive integer, got {step!r}")
    if (high - low) % step:
        raise ConfigError(f"{field_name}: high - low ({high - low}) is not a multiple of step {step}")
    return d.IntDistribution(low, high, step=step)


def _named(field_name: str, value: Any, allowed: tuple[str, ...]) -> tuple[str, dict[str, Any]]:
    """``name`` or ``{type: name, **arguments}``."""
    if isinstance(value, dict):
        arguments = dict(value)
        name = arguments.pop("type", None)
    else:
        name, arguments = value, {}
    if name not in allowed:
        raise ConfigError(f"{field_name}: {name!r} is not one of {', '.join(allowed)}; "
                          f"{did_you_mean(str(name), allowed)}".rstrip("; "))
    return name, arguments


def _check_arguments(field_name: str, cls: type, arguments: dict[str, Any]) -> None:
    accepted = [p for p in inspect.signature(cls).parameters if p != "self"]
    for key in arguments:
        if key not in accepted:
            raise ConfigError(f"{field_name}.{key}: {cls.__name__} has no argument {key!r}; "
                              f"{did_you_mean(key, accepted)}allowed: {', '.join(accepted)}")


def make_sampler(spec: Any, seed_offset: int = 0):
    """The Optuna sampler of ``sampler`` (TPE by default), seeded with its ``seed`` (0) + ``seed_offset``."""
    import optuna

    name, arguments = _named("sampler", spec, SAMPLERS)
    arguments = dict(arguments)
    seed = arguments.pop("seed", 0)
    _number("sampler.seed", seed, integer=True)
    cls = {"tpe": optuna.samplers.TPESampler, "random": optuna.samplers.RandomSampler}[name]
    _check_arguments("sampler", cls, arguments)
    if name == "tpe":  # parallel workers: running trials count as their mean value, so workers spread out
        arguments.setdefault("constant_liar", True)
    return cls(seed=seed + seed_offset, **arguments)


def make_pruner(spec: Any):
    """The Optuna pruner of ``pruner``: none, median or hyperband, with its arguments."""
    import optuna

    name, arguments = _named("pruner", spec, PRUNERS)
    cls = {"none": optuna.pruners.NopPruner, "median": optuna.pruners.MedianPruner,
           "hyperband": optuna.pruners.HyperbandPruner}[name]
    _check_arguments("pruner", cls, arguments)
    try:
        return cls(**arguments)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"pruner: {name} refuses {arguments}: {err}") from None


@dataclass
class TuneSettings:
    """A checked search-space file (with the command line's settings applied)."""

    space: dict[str, Any]  # dotted key → Optuna distribution
    space_spec: dict[str, Any]  # as written (kept in the study folder to check a re-run)
    objective: str = "val/return"
    direction: str = "maximize"
    trials: int = 20
    seeds: list[int] = field(default_factory=lambda: [0])
    sampler: Any = "tpe"
    pruner: Any = "median"
    heartbeat_timeout: float = 120.0

    def as_dict(self) -> dict[str, Any]:
        """What the study folder keeps (``tune.yaml``)."""
        return {"space": self.space_spec, "objective": self.objective, "direction": self.direction,
                "trials": self.trials, "seeds": self.seeds, "sampler": self.sampler, "pruner": self.pruner,
                "heartbeat_timeout": self.heartbeat_timeout}


def parse_settings(data: Any, overrides: dict[str, Any] | None = None, config_keys: set[str] | None = None
                   ) -> TuneSettings:
    """Check a search-space file's content (``overrides``: the command line's non-None settings); with
    ``config_keys`` (the config's dotted keys), every key of ``space`` must be one of them."""
    if not isinstance(data, dict):
        raise ConfigError(f"space: the search-space file must be a mapping with a 'space' entry, got {data!r}")
    unknown = sorted(set(data) - set(SETTINGS))
    if unknown:
        raise ConfigError(f"{unknown[0]}: not a search-space file setting; {did_you_mean(unknown[0], SETTINGS)}"
                          f"allowed: {', '.join(SETTINGS)}")
    data = {**data, **{k: v for k, v in (overrides or {}).items() if v is not None}}
    spec = data.get("space")
    if not isinstance(spec, dict) or not spec:
        raise ConfigError(f"space: must be a non-empty mapping of dotted config keys to distributions, got {spec!r}")
    for key in spec:
        if config_keys is not None and key not in config_keys:
            close = did_you_mean(str(key), config_keys, cutoff=0.85)  # dotted keys share long prefixes
            raise ConfigError(f"space.{key}: not a key of the config; {close}allowed: dotted keys as "
                              f"`lit-marl fit --config ... --print_config` shows them")
    space = {str(key): parse_distribution(str(key), value) for key, value in spec.items()}
    settings = TuneSettings(space=space, space_spec=spec)
    objective = data.get("objective", settings.objective)
    if objective not in OBJECTIVES:
        raise ConfigError(f"objective: {objective!r} is not one of {', '.join(OBJECTIVES)} (val/return: the last "
                          f"evaluation's; auc: the area under the evaluation curve)")
    direction = data.get("direction", settings.direction)
    if direction not in DIRECTIONS:
        raise ConfigError(f"direction: {direction!r} is not one of {', '.join(DIRECTIONS)}")
    seeds = data.get("seeds", settings.seeds)
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool)
                                                           for s in seeds) or len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds: must be a non-empty list of distinct integers, got {seeds!r}")
    settings.objective, settings.direction, settings.seeds = objective, direction, seeds
    settings.trials = positive_int("trials", data.get("trials", settings.trials))
    settings.heartbeat_timeout = positive_float("heartbeat_timeout",
                                                data.get("heartbeat_timeout", settings.heartbeat_timeout))
    settings.sampler, settings.pruner = data.get("sampler", settings.sampler), data.get("pruner", settings.pruner)
    make_sampler(settings.sampler)
    make_pruner(settings.pruner)
    return settings


def dotted_keys(config: Any, prefix: str = "") -> set[str]:
    """Every dotted key of a nested config mapping (a list is one value)."""
    keys: set[str] = set()
    if isinstance(config, dict):
        for key, value in config.items():
            dotted = f"{prefix}{key}"
            keys.add(dotted)
            keys |= dotted_keys(value, dotted + ".")
    return keys
