"""Small shared helpers: serialisable configuration objects and isolated random state."""

from __future__ import annotations

import contextlib
import copy
import ctypes
import importlib
import inspect
import random
import signal
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

import numpy as np
import torch
from tensordict.nn import TensorDictParams

from lit_marl.errors import ConfigError

T = TypeVar("T")


class Configurable:
    """Base for objects configured by their constructor (tasks, model configs).

    Convention: every ``__init__`` argument is stored on ``self`` under the same name, so
    :meth:`to_config` can write the object back as ``{"class_path", "init_args"}``: the same shape
    jsonargparse reads from YAML, and plain data that ``torch.load(weights_only=True)`` accepts.
    """

    def to_config(self) -> dict[str, Any]:
        """This object as ``{"class_path", "init_args"}``, the shape jsonargparse reads from YAML: how a run's
        hyper-parameters store its task and models, and how a checkpoint names the task it was trained on."""
        cls = _user_class(type(self))
        init_args = {}
        for name, param in inspect.signature(cls.__init__).parameters.items():
            if name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            init_args[name] = _plain(getattr(self, name))
        return {"class_path": f"{cls.__module__}.{cls.__qualname__}", "init_args": init_args}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.to_config()["init_args"].items())
        return f"{_user_class(type(self)).__name__}({args})"


def _user_class(cls: type) -> type:
    # jsonargparse's lazy_instance wraps a class in a generated subclass; report the user's class.
    for klass in cls.__mro__:
        if not klass.__module__.startswith("jsonargparse"):
            return klass
    return cls


def _plain(value: Any) -> Any:
    if isinstance(value, Configurable):
        return value.to_config()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def instantiate(value: Any, base: type[T], field: str) -> T:
    """Return ``value`` as an instance of ``base``; a ``{"class_path", "init_args"}`` dict is built.

    That is how hyper-parameters saved in a checkpoint become objects again in ``load_from_checkpoint``.
    """
    if isinstance(value, base):
        return value
    if isinstance(value, Mapping) and "class_path" in value:
        module_name, _, cls_name = str(value["class_path"]).rpartition(".")
        try:
            cls = getattr(importlib.import_module(module_name), cls_name)
        except (ImportError, AttributeError, ValueError) as err:
            raise ConfigError(f"{field}: cannot import class_path {value['class_path']!r} ({err})") from None
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise ConfigError(f"{field}: {value['class_path']!r} is not a subclass of {base.__name__}")
        return cls(**dict(value.get("init_args") or {}))
    raise TypeError(
        f"{field}: expected a {base.__name__} or a {{'class_path', 'init_args'}} mapping, got {value!r}"
    )


def deepcopy_keeping_shared_tensors(self: torch.nn.Module, memo: dict[int, Any]) -> torch.nn.Module:
    """``__deepcopy__`` of a module whose torchrl losses wrap its networks' parameters.

    tensordict's ``TensorDictParams`` deep-copies by ``clone()``, ignoring the copy's memo (checked, tensordict
    0.14): each loss of a copy would hold parameters of its own, apart from the policy and critic parameters the
    copy's optimizer updates, and a copy trained (e.g. by an averaging callback) would silently learn nothing. Here
    the copy is the default one, except that each ``TensorDictParams`` copies its leaves through the memo, so a
    parameter shared by a network and a loss is copied once and stays shared."""
    copied = type(self).__new__(type(self))
    memo[id(self)] = copied
    default = TensorDictParams.__dict__.get("__deepcopy__")
    TensorDictParams.__deepcopy__ = _params_through_memo
    try:
        state = copy.deepcopy(self.__getstate__(), memo)
    finally:
        if default is None:
            del TensorDictParams.__deepcopy__
        else:
            TensorDictParams.__deepcopy__ = default
    copied.__setstate__(state)
    return copied


def _params_through_memo(self: TensorDictParams, memo: dict[int, Any]) -> TensorDictParams:
    if id(self) not in memo:
        leaves = self._param_td.apply(lambda t: copy.deepcopy(t, memo), filter_empty=False)
        memo[id(self)] = TensorDictParams(leaves, no_convert=True)
    return memo[id(self)]


def pack_numpy_rng(state: tuple) -> dict[str, Any]:
    """``np.random.get_state()`` as tensors and numbers (no numpy objects in checkpoints)."""
    kind, keys, pos, has_gauss, cached = state
    return {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
            "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}


def unpack_numpy_rng(state: Mapping[str, Any]) -> tuple:
    return (state["kind"], state["keys"].numpy().astype(np.uint32), state["pos"], state["has_gauss"],
            state["cached_gaussian"])


def rng_state() -> dict[str, Any]:
    """Global RNG state of torch, numpy and random as plain data (loads with ``weights_only=True``)."""
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": pack_numpy_rng(np.random.get_state()),
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(unpack_numpy_rng(state["numpy"]))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@contextlib.contextmanager
def isolated_rng(seed: int | None = None) -> Iterator[None]:
    """Run a block without touching the caller's torch/numpy/random state, optionally seeded.

    Simulators such as VMAS seed the *global* generators when they are seeded; evaluation and
    seeded resets run inside this so training randomness does not depend on them.
    """
    saved = rng_state()
    try:
        if seed is not None:
            torch.manual_seed(seed)
            np.random.seed(seed % 2**32)
            random.seed(seed)
        yield
    finally:
        set_rng_state(saved)


def derived_seed(*parts: int) -> int:
    """A 32-bit seed from several integers (base seed, rank, iteration…); 32 bits because simulators
    pass it on to ``numpy.random.seed``."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1, dtype=np.uint32)[0])


def die_with_parent() -> None:
    """In a child process, before it runs (``preexec_fn``): SIGTERM when its parent dies (Linux; elsewhere nothing),
    so a killed worker or SLURM task leaves no run training on."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
