"""Do two versions of lit-marl compute the same thing? Train MAPPO, MADDPG, MASAC and QMIX briefly, save the weights,
and compare two such files tensor by tensor.

    PYTHONPATH=. python benchmarks/weights.py --save /tmp/head.pt
    git worktree add --detach /tmp/old 0e45cf5
    (cd /tmp/old && PYTHONPATH=. python /path/to/benchmarks/weights.py --save /tmp/old.pt)
    python benchmarks/weights.py --compare /tmp/head.pt /tmp/old.pt

Each algorithm: vmas/balance (4 agents), seed 0, 10 envs, 1200 frames per iteration, 3 iterations; MAPPO 3 epochs of
400-frame minibatches, the off-policy ones 30 steps of 128 transitions; gradient clipping at 5.
``--per-tensor-adam`` builds every Adam without the fused kernel (what lit-marl did before issue 13), to tell
the kernel's rounding from any other difference.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch


def train(out: Path) -> None:
    import lightning.pytorch as pl

    from lit_marl.algorithms import MADDPG, MAPPO, MASAC, QMIX
    from lit_marl.envs import VmasTask

    weights = {}
    for name, cls in {"mappo": MAPPO, "maddpg": MADDPG, "masac": MASAC, "qmix": QMIX}.items():
        pl.seed_everything(0)
        task = VmasTask("balance", max_steps=100, continuous_actions=name != "qmix",
                        scenario_kwargs={"n_agents": 4, "package_mass": 5, "random_package_pos_on_line": True})
        common = dict(frames_per_batch=1200, num_envs=10, max_frames=3600, seed=0)
        if name == "mappo":
            model = cls(task, n_minibatch_iters=3, minibatch_size=400, **common)
        else:
            model = cls(task, n_optimizer_steps=30, train_batch_size=128, **common)
        pl.Trainer(max_epochs=-1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                   enable_model_summary=False, limit_val_batches=0, gradient_clip_val=5.0).fit(model)
        weights[name] = {k: v.detach().clone() for k, v in model.state_dict().items() if torch.is_tensor(v)}
        print(f"{name}: {model.frames} frames", flush=True)
    torch.save(weights, out)


def compare(a: Path, b: Path) -> bool:
    first, second = torch.load(a), torch.load(b)
    same = True
    for name in sorted(set(first) | set(second)):
        x, y = first.get(name, {}), second.get(name, {})
        keys = set(x) & set(y)
        differ = [k for k in sorted(keys) if not torch.equal(x[k], y[k])]
        largest = max(((x[k].double() - y[k].double()).abs().max().item() for k in differ), default=0.0)
        only = sorted(set(x) ^ set(y))
        same = same and not differ and not only
        print(f"{name}: {len(keys)} tensors in both, {len(differ)} differ (largest difference {largest:.3g})"
              + (f", {len(only)} in one file only: {only[:4]}" if only else ""))
    return same


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--save", type=Path, help="train and save the weights here")
    action.add_argument("--compare", type=Path, nargs=2, metavar=("A", "B"), help="compare two saved files")
    parser.add_argument("--per-tensor-adam", action="store_true", help="Adam without the fused kernel")
    args = parser.parse_args(argv)
    if args.compare:
        return 0 if compare(*args.compare) else 1
    if args.per_tensor_adam:
        adam = torch.optim.Adam

        class PerTensorAdam(adam):
            def __init__(self, params, *a, fused=None, **kwargs):
                super().__init__(params, *a, **kwargs)

        torch.optim.Adam = PerTensorAdam
    train(args.save)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path.cwd()))  # the lit-marl of the checkout it runs in (an older worktree, say)
    sys.exit(main())
