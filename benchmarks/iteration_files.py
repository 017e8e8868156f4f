"""Which lit-marl files one training iteration runs code from (issue 35's "a reader follows one MAPPO iteration in
≤ 6 files", measured instead of counted by hand).

A MAPPO run on VMAS balance (BenchMARL's network sizes, 600 frames per iteration over 10 envs, 2 minibatches of 300)
trains for three iterations; a profiling hook is on from the second's start to the third's (the first builds envs,
networks and the optimizer), and every lit-marl function it sees called is listed by file, with how many distinct functions of
each file ran. Files are then split by what they are to a reader of the loop: the task and the networks that are
stepped (``envs/``, ``models/``) apart from the loop's own files.

    python benchmarks/iteration_files.py [--algorithm mappo]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import lightning.pytorch as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import lit_marl  # noqa: E402
from lit_marl.algorithms.registry import algorithms_by_name  # noqa: E402
from lit_marl.envs import VmasTask  # noqa: E402

PACKAGE = Path(lit_marl.__file__).parent
#: what a reader of the loop steps through without reading: the task's envs and the networks
STEPPED = ("envs/", "models/")


class CallsOfOneIteration(pl.Callback):
    """Records the lit-marl functions called from the second training epoch's start to the third's."""

    def __init__(self) -> None:
        self.functions: dict[str, set[str]] = defaultdict(set)

    def _hook(self, frame, event, arg) -> None:
        if event == "call":
            path = Path(frame.f_code.co_filename)
            if path.is_relative_to(PACKAGE):
                self.functions[str(path.relative_to(PACKAGE))].add(frame.f_code.co_qualname)

    def on_train_epoch_start(self, trainer, pl_module) -> None:  # on until the next epoch: its end hooks included
        sys.setprofile(self._hook if trainer.current_epoch == 1 else None)

    def on_train_end(self, trainer, pl_module) -> None:
        sys.setprofile(None)


def files_of_one_iteration(algorithm: str) -> dict[str, set[str]]:
    """The lit-marl functions (qualified names) one training iteration of ``algorithm`` calls, by file (relative to
    the package)."""
    cls = algorithms_by_name()[algorithm]
    sizes = ({"minibatch_size": 300, "n_minibatch_iters": 1} if cls.on_policy else
             {"train_batch_size": 128, "n_optimizer_steps": 2})
    model = cls(task=VmasTask("balance", max_steps=20), frames_per_batch=600, num_envs=10, max_frames=1800, **sizes)
    calls = CallsOfOneIteration()
    with tempfile.TemporaryDirectory() as folder:
        try:
            pl.Trainer(max_epochs=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                       enable_model_summary=False, limit_val_batches=0, callbacks=[calls],
                       default_root_dir=folder).fit(model)
        finally:
            sys.setprofile(None)
    return dict(calls.functions)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithm", default="mappo", choices=sorted(algorithms_by_name()))
    args = parser.parse_args(argv)
    functions = files_of_one_iteration(args.algorithm)
    loop = {f: n for f, n in sorted(functions.items()) if not f.startswith(STEPPED)}
    stepped = {f: n for f, n in sorted(functions.items()) if f.startswith(STEPPED)}
    print(f"{args.algorithm}: lit-marl files one training iteration runs code from\n")
    print(f"the loop's ({len(loop)} files, callbacks/ as one room: "
          f"{len({f.split('/')[0] if f.startswith('callbacks/') else f for f in loop})}):")
    for f, names in loop.items():
        print(f"  {f:34s} {len(names):3d}  {', '.join(sorted(names))[:150]}")
    print(f"\nstepped, not read with the loop ({len(stepped)} files):")
    for f, names in stepped.items():
        print(f"  {f:34s} {len(names):3d}")


if __name__ == "__main__":
    main()
