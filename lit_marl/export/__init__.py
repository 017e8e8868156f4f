"""Policy export: each group's deterministic policy as a file that runs without lit-marl, torchrl or tensordict.

::

    lit-marl export --ckpt_path runs/<run>/checkpoints/last.ckpt --format onnx
    lit-marl export --ckpt_path ... --format torchscript --out deploy/ --group agents

writes a new folder (``<run>/exports/<format>-<timestamp>/`` by default; an existing one is never written into)::

    agents.onnx            one file per group: observation (and action mask…) in, action out
    manifest.json          each file's inputs and outputs in call order: names, shapes, dtypes, action bounds

The exported function is what the policy computes under ``set_exploration_type(DETERMINISTIC)`` (the mode of a
stochastic policy, the greedy action of a Q-policy, a DDPG actor as it is), batched over a leading ``batch``
dimension: inputs ``[batch, n_agents, *feature_shape]`` in the manifest's order, output ``[batch, n_agents,
action_dim]`` (continuous, within the manifest's ``low``/``high``) or ``[batch, n_agents]`` action indices
(discrete). Where the task marks legal actions, the mask is an input and an illegal action is never chosen.
Recurrent policies take and return their hidden state (and ``is_init``, True on an episode's first step).

Formats, each loadable with PyTorch or ONNX Runtime alone:

- ``exported``: :func:`torch.export.save` (``.pt2``); ``torch.export.load(path).module()(*inputs)``;
- ``torchscript``: ``torch.jit.load(path)(*inputs)`` (``.pt``, also from C++ libtorch; torch 2.13 deprecates
  ``torch.jit`` in favour of ``torch.export``);
- ``onnx``: ``onnxruntime.InferenceSession(path).run(None, {name: array})`` (``.onnx``; needs
  ``pip install -e ".[export]"`` to export).

The folder is built beside its target under a temporary name and renamed into place at the end, after each file
was loaded back and its actions compared with the policy's on the same random observations (the largest
difference is recorded in the manifest): a folder that exists is complete and checked.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib.util
import io
import os
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from lit_marl.algorithms.registry import algorithm_class
from lit_marl.atomic import atomic_target
from lit_marl.checkpoint import read_checkpoint
from lit_marl.errors import ConfigError
from lit_marl.evaluation.io import package_version, provenance, write_json
from lit_marl.export.signature import (
    DeterministicPolicy,
    TensorInfo,
    action_bounds,
    example_inputs,
    policy_signature,
)
from lit_marl.reading import read_json

#: format -> file suffix
FORMATS: dict[str, str] = {"torchscript": ".pt", "onnx": ".onnx", "exported": ".pt2"}
MANIFEST = "manifest.json"
#: what the exported files are checked on: random observations of this many envs
VERIFY_BATCH = 7
#: actions of an ONNX Runtime session may differ from PyTorch's in the last float bits (other kernels)
ONNX_TOLERANCE = 1e-5


# ------------------------------------------------------------------------------------------ export
def _check_format(format: str) -> str:
    if format not in FORMATS:
        raise ConfigError(f"export.format: {format!r} is not one of {', '.join(map(repr, FORMATS))}")
    if format == "onnx":
        missing = [name for name in ("onnx", "onnxscript") if importlib.util.find_spec(name) is None]
        if missing:
            raise ConfigError(f"export.format: 'onnx' needs {' and '.join(missing)} (torch.onnx's exporter); "
                              f"install them with pip install -e \".[export]\"; allowed without them: 'torchscript', "
                              f"'exported'")
    return format


def _check_groups(groups: list[str] | None, available: list[str]) -> list[str]:
    if groups is None:
        return list(available)
    unknown = [g for g in groups if g not in available]
    if unknown or not groups:
        raise ConfigError(f"export.group: {unknown or groups!r} not among the checkpoint's agent groups; allowed: "
                          f"{', '.join(map(repr, available))}")
    return list(dict.fromkeys(groups))


def _check_target(folder: Path) -> None:
    if folder.exists():
        raise ConfigError(f"export.out: {str(folder)!r} already exists and is not overwritten; allowed: a new folder")


def _batch_arg(batch_size: int | None) -> int | None:
    if batch_size is not None and (not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0):
        raise ConfigError(f"export.batch_size: must be a positive integer or None (any batch), got {batch_size!r}")
    return batch_size


def _tracing_batch(inputs: list[TensorInfo]) -> int:
    """The batch size the policy is traced with: not 0 or 1 (torch.export never makes those symbolic) and no size of
    another dimension (a batch of 4 beside 4 agents would be taken for the same size and frozen)."""
    taken = {size for info in inputs for size in info.shape}
    return next(b for b in range(3, 10_000) if b not in taken)


def _torch_export(policy: DeterministicPolicy, example: list[torch.Tensor], dynamic: bool, group: str):
    dims = None
    if dynamic:
        batch = torch.export.Dim("batch")
        dims = (tuple({0: batch} for _ in example),)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # a copy: tracing leaves torchrl's shared-parameter MultiAgentMLP unusable in eager mode afterwards
            return torch.export.export(copy.deepcopy(policy), tuple(example), dynamic_shapes=dims)
    except Exception as err:  # torch.export's errors are long reports: keep their first line
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
        if not dynamic:  # not something a setting can change
            raise RuntimeError(f"export: the policy of group {group!r} could not be traced ({type(err).__name__}: "
                               f"{reason})") from err
        raise ConfigError(f"export: the policy of group {group!r} could not be traced with any batch size "
                          f"({type(err).__name__}: {reason}); allowed: a fixed batch (--batch_size N, Python: "
                          f"batch_size=N)") from err


def _write_file(program, policy_inputs: list[torch.Tensor], format: str, path: Path,
                inputs: list[TensorInfo], outputs: list[TensorInfo], dynamic: bool) -> None:
    if format == "exported":
        torch.export.save(program, str(path))
    elif format == "torchscript":
        with warnings.catch_warnings():  # torch 2.13 deprecates torch.jit; the format is offered for C++/libtorch
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.jit.save(_scripted(program), str(path))
    else:
        dims = None
        if dynamic:
            batch = torch.export.Dim("batch")
            dims = (tuple({0: batch} for _ in policy_inputs),)
        # the exporter reports its progress on stdout; the export command prints its own summary
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(program, tuple(policy_inputs), str(path), dynamo=True, external_data=False,
                              input_names=[i.name for i in inputs], output_names=[o.name for o in outputs],
                              dynamic_shapes=dims)


def _scripted(program) -> torch.jit.ScriptModule:
    """The exported graph as TorchScript, compiled by ``torch.jit.script`` (not traced: a trace would freeze the
    batch size wherever the graph computes a shape from it, as a Cnn's reshape over batch and agents does).

    TorchScript reads a plain FX graph of ATen ops once four things of ``torch.export``'s graph are undone: its
    vmap calls are lowered to batched ops; its symbolic sizes (``aten.sym_size.int``) become ``tensor.size(d)``; ops
    are called by name (``aten.linear``) and TorchScript picks the overload from the arguments, as it knows no
    overload names (``aten.linear.default``);
    and the input/output flattening, shape guards and metadata asserts that only ``torch.export`` runs are dropped.
    """
    # post-dispatch ATen (no decompositions): vmap (MultiAgentMLP without shared parameters) becomes batched ops
    graph_module = program.run_decompositions({}).module()
    graph = graph_module.graph
    for node in list(graph.nodes):
        if node.op == "call_module" and node.target == "_guards_fn" or (
                node.op == "call_function" and node.target is torch.ops.aten._assert_tensor_metadata.default):
            graph.erase_node(node)
        elif node.op == "call_function" and node.target is torch.ops.aten.sym_size.int:
            with graph.inserting_before(node):
                size = graph.call_method("size", node.args)
            node.replace_all_uses_with(size)
            graph.erase_node(node)
        elif node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            node.target = node.target.overloadpacket
        elif node.op == "output" and isinstance(node.args[0], (tuple, list)) and len(node.args[0]) == 1:
            node.args = (node.args[0][0],)  # one output: the action itself, as the other formats return it
    graph._codegen = torch.fx.graph.CodeGen()  # positional tensors in and out, no pytree specs
    # a fresh GraphModule: the unlifted module's forward hooks (torch.export's input checks) cannot be scripted
    plain = torch.fx.GraphModule(graph_module, graph)
    plain.recompile()
    with warnings.catch_warnings():  # TorchScript's notes on the GraphModule's own attributes
        warnings.simplefilter("ignore")
        return torch.jit.script(plain)


def load_exported(path: str | os.PathLike, format: str | None = None):
    """A callable ``f(*inputs) -> action | (action, *states)`` over torch tensors for an exported file (ONNX files
    run in ONNX Runtime, where installed); the inputs, in order, are those the folder's ``manifest.json`` lists.

    Args:
        path: a file :func:`export_policy` wrote (``<group>.pt2``, ``.pt`` or ``.onnx``).
        format: ``"exported"``, ``"torchscript"`` or ``"onnx"`` (default: read from the suffix).
    """
    path = Path(path)
    format = format or {suffix: name for name, suffix in FORMATS.items()}.get(path.suffix)
    if format == "exported":
        return torch.export.load(str(path)).module()
    if format == "torchscript":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return torch.jit.load(str(path))
    if format == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]

        def run(*inputs: torch.Tensor):
            results = session.run(None, {n: x.detach().cpu().numpy() for n, x in zip(names, inputs)})
            tensors = tuple(torch.from_numpy(r) for r in results)
            return tensors[0] if len(tensors) == 1 else tensors

        return run
    raise ConfigError(f"export: cannot tell the format of {str(path)!r}; allowed suffixes: "
                      f"{', '.join(FORMATS.values())}")


def _as_tuple(value) -> tuple[torch.Tensor, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _verify(policy: DeterministicPolicy, path: Path, format: str, module, group: str, inputs: list[TensorInfo],
            batch: int) -> dict[str, Any]:
    """Load the written file back and compare its outputs with the policy's on random observations."""
    if format == "onnx" and importlib.util.find_spec("onnxruntime") is None:
        return {"checked": False, "reason": "onnxruntime is not installed"}
    example = example_inputs(module, group, inputs, batch, seed=1)
    with torch.no_grad():
        expected = _as_tuple(policy(*example))
        got = _as_tuple(load_exported(path, format)(*example))
    diff = 0.0
    for e, g in zip(expected, got):
        if e.shape != g.shape:
            raise RuntimeError(f"export: {path.name} returned shape {tuple(g.shape)}, the policy {tuple(e.shape)}")
        if e.is_floating_point():
            diff = max(diff, float((e.double() - g.double()).abs().max()))
        elif not torch.equal(e, g.to(e.dtype)):
            raise RuntimeError(f"export: {path.name} chose other actions than the policy on the same observations")
    tolerance = ONNX_TOLERANCE if format == "onnx" else 0.0
    if diff > tolerance:
        raise RuntimeError(f"export: {path.name}'s outputs differ from the policy's by {diff:.3g} (> {tolerance})")
    runtime = f"onnxruntime {package_version('onnxruntime')}" if format == "onnx" else f"torch {torch.__version__}"
    return {"checked": True, "batch": batch, "max_abs_diff": diff, "runtime": runtime}


def export_policy(module, folder: str | os.PathLike, format: str = "exported", groups: list[str] | None = None,
                  batch_size: int | None = None, checkpoint: str | os.PathLike | None = None) -> Path:
    """Write every group's (or ``groups``') deterministic policy of ``module`` (a :class:`MarlAlgorithm`) and a
    ``manifest.json`` into the new folder ``folder``; returns it.

    ``batch_size`` None exports a batch dimension of any size; an int fixes it (for policies whose graph depends
    on the batch size). Bad input (format, groups, an existing ``folder``) is refused before anything is traced.

    Examples:
        >>> folder = export_policy(MAPPO.load_from_checkpoint("last.ckpt"), "deploy", format="onnx")
        >>> act = load_exported(folder / "agents.onnx")
        >>> act(observation_batch)  # [batch, n_agents, action_dim]
    """
    format = _check_format(format)
    batch_size = _batch_arg(batch_size)
    groups = _check_groups(groups, list(module.groups))
    folder = Path(folder)
    _check_target(folder)
    with atomic_target(folder, overwrite=False) as tmp:  # renamed into place once complete; removed on error
        tmp.mkdir()
        manifest_groups = {}
        for group in groups:
            inputs, outputs = policy_signature(module, group)
            policy = DeterministicPolicy(module.policies[group], [i.key for i in inputs], [o.key for o in outputs])
            example = example_inputs(module, group, inputs, batch_size or _tracing_batch(inputs))
            program = _torch_export(policy, example, dynamic=batch_size is None, group=group)
            path = tmp / f"{group}{FORMATS[format]}"
            _write_file(program, example, format, path, inputs, outputs, dynamic=batch_size is None)
            verified = _verify(policy, path, format, module, group, inputs, batch_size or VERIFY_BATCH)
            manifest_groups[group] = {
                "file": path.name,
                "agents": list(module.task.group_map[group]),
                "inputs": [i.to_json() for i in inputs],
                "outputs": [o.to_json() for o in outputs],
                "action": action_bounds(module, group),
                "batch": batch_size if batch_size is not None else "any",
                "verified": verified,
            }
            if batch_size is not None:
                for entry in (*manifest_groups[group]["inputs"], *manifest_groups[group]["outputs"]):
                    entry["shape"][0] = batch_size
        config = {"model": {"class_path": f"{type(module).__module__}.{type(module).__qualname__}"}}
        manifest = {
            "format": format,
            "algorithm": module.algorithm_name,
            "task": module.task.name,
            "deterministic": True,
            "groups": manifest_groups,
            "usage": _USAGE[format],
            "provenance": provenance(module.task.name.split("/")[0], checkpoint, config),
        }
        write_json(tmp / MANIFEST, manifest)
    return folder


_USAGE = {
    "exported": "torch.export.load('<group>.pt2').module()(*inputs)  # inputs in manifest order, [batch, ...]",
    "torchscript": "torch.jit.load('<group>.pt')(*inputs)  # inputs in manifest order, [batch, ...]",
    "onnx": "onnxruntime.InferenceSession('<group>.onnx').run(None, {name: array for each input})",
}


def default_folder(ckpt_path: str | os.PathLike, format: str) -> Path:
    """``<run>/exports/<format>-<timestamp>`` for a checkpoint in ``<run>/checkpoints/``, else beside the checkpoint;
    ``-1``, ``-2``… appended when taken."""
    ckpt = Path(ckpt_path).resolve()
    parent = (ckpt.parent.parent if ckpt.parent.name == "checkpoints" else ckpt.parent) / "exports"
    base = f"{format}-{time.strftime('%Y%m%d-%H%M%S')}"
    for n in range(10_000):
        candidate = parent / (base if n == 0 else f"{base}-{n}")
        if not candidate.exists():
            return candidate
    raise ConfigError(f"export.out: no free folder name {base!r} under {str(parent)!r}")


def export_checkpoint(ckpt_path: str | os.PathLike, format: str = "exported", out: str | os.PathLike | None = None,
                      groups: list[str] | None = None, batch_size: int | None = None) -> Path:
    """Load a lit-marl checkpoint and :func:`export_policy` it; returns the new folder.

    Args:
        ckpt_path: a checkpoint of any lit-marl algorithm.
        format: ``"exported"`` (``torch.export``, ``.pt2``), ``"torchscript"`` (``.pt``) or ``"onnx"``.
        out: the new folder (default ``<run>/exports/<format>-<timestamp>``).
        groups: the groups whose policies to export (default: every group).
        batch_size: None exports a batch dimension of any size; an int fixes it.
    """
    format = _check_format(format)
    batch_size = _batch_arg(batch_size)
    if out is not None:
        _check_target(Path(out))
    meta = read_checkpoint(ckpt_path)["lit_marl"]
    cls = algorithm_class(meta.get("algorithm"))
    if "group_map" in meta:  # named before the (slow) model build
        _check_groups(groups, list(meta["group_map"]))
    module = cls.load_from_checkpoint(str(ckpt_path), map_location="cpu", weights_only=True)
    folder = Path(out) if out is not None else default_folder(ckpt_path, format)
    return export_policy(module, folder, format, groups, batch_size, checkpoint=ckpt_path)


def main(argv: list[str]) -> int:
    """``lit-marl export --ckpt_path CKPT --format torchscript|onnx|exported [--out DIR] [--group G]…``."""
    parser = argparse.ArgumentParser(prog="lit-marl export",
                                     description="Write each group's deterministic policy of a checkpoint as a "
                                                 "deployable file, with a manifest of its inputs and outputs.")
    parser.add_argument("--ckpt_path", required=True, help="a checkpoint written by lit-marl fit")
    parser.add_argument("--format", required=True, help=f"one of {', '.join(FORMATS)}")
    parser.add_argument("--out", default=None,
                        help="the new folder to write (default: <run>/exports/<format>-<timestamp>)")
    parser.add_argument("--group", action="append", default=None, help="export this group only (repeatable)")
    parser.add_argument("--batch_size", type=int, default=None,
                        help="fix the batch dimension (default: any batch size)")
    args = parser.parse_args(argv)
    folder = export_checkpoint(args.ckpt_path, args.format, args.out, args.group, args.batch_size)
    manifest = read_json(folder / MANIFEST, "export: manifest", "the manifest.json that export_policy writes")
    for group, entry in manifest["groups"].items():
        ins = ", ".join(f"{i['name']} {i['shape']}" for i in entry["inputs"])
        check = entry["verified"]
        checked = (f"same actions as the policy (max diff {check['max_abs_diff']:.2g})" if check["checked"]
                   else f"not checked: {check['reason']}")
        print(f"{group}: {folder / entry['file']}  ({ins} -> action {entry['outputs'][0]['shape']}; {checked})")
    print(f"manifest: {folder / MANIFEST}")
    return 0
