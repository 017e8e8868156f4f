"""Run-level differential (issue 32): does a whole lit-marl run do what BenchMARL 1.5.2's does, iteration by
iteration, when both are fed the same random draws?

``run_reference.py`` runs BenchMARL's own training loop for a few iterations in its venv with every draw injected
(see its docstring: the global generator seeded before each collection and before each iteration's updates, the
environments re-seeded by lit-marl's rule); this script runs ``lit-marl``'s shipped config through Lightning's
``Trainer`` from BenchMARL's initial weights, with a callback that seeds the same generator at the same points, and
compares each iteration:

- the collected batch: observations, actions, rewards, next observations, done and terminated;
- the exploration value the collection used (noise scale or epsilon);
- the mean of every loss term over the iteration's optimizer steps, and the first step's;
- every parameter tensor of the loss (online and target networks) at the iteration's end;
- the observations where an episode starts (the step after one both sides end): drawn by the partial resets alone,
  equal until the runs' done flags part, whatever rounding did to the episodes before.

Partial resets: lit-marl with per-environment resets (``task.batched_resets: false``) against torchrl 0.11's, or with
``--batched_resets`` lit-marl's shipped default (one batched VMAS reset, unfinished environments put back) against
BenchMARL's side given the same whole-batch resets (``run_reference.py --batched_resets``, the harness's own patch of
torchrl 0.11's ``VmasEnv._reset``).

Tolerance: float32 closeness ``rtol=1e-4, atol=1e-5`` (one update agrees to 1e-6, see ``compare.py``; a whole
iteration is a thousand updates and a collection stepped by them), done flags and actions of discrete spaces exactly.
Where two runs part, the report names the first iteration and quantity and how far apart they are; the runs are
chaotic, so a difference that starts at rounding level and grows is noise, one that starts large is a defect.

    python benchmarks/vs_benchmarl/run_compare.py --algorithms iddpg --iterations 5
    python benchmarks/vs_benchmarl/run_compare.py --algorithms iddpg --iterations 10 --batched_resets
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare import GROUP, LIT_MARL, OUT, RAW_KEY_MAP, ROOT, VENV, Checks, lit_marl_model, live_params  # noqa: E402,E501

COLLECT_SEED, TRAIN_SEED = 100_000, 200_000  # run_reference.py's
RTOL, ATOL = 1e-4, 1e-5
#: the collected entries compared, by BenchMARL's name (lit-marl's is the same)
BATCH_KEYS = ["agents/observation", "agents/action", "next/agents/reward", "next/agents/observation", "next/done",
              "next/terminated"]
EXACT = ("next/done", "next/terminated")


def reset_seeds(seed: int, iterations: int) -> list[int]:
    """The seeds lit-marl's ``Sampler`` re-seeds its environments with at each iteration (where it re-seeds)."""
    from lit_marl.utils import derived_seed

    return [derived_seed(seed, 0, i) for i in range(iterations)]


def reference_run(algorithm: str, iterations: int, max_frames: int, updates: int | None = None,
                  batched_resets: bool = False) -> dict[str, Any]:
    """BenchMARL's recorded run (``run_reference.py`` in its venv), cached per version of the two reference scripts;
    ``batched_resets``: its partial resets made lit-marl's default way (``run_reference.py --batched_resets``)."""
    here = ROOT / "benchmarks" / "vs_benchmarl"
    version = hashlib.sha256(b"".join((here / n).read_bytes() for n in ("run_reference.py", "reference.py")))
    resets = "_batched" if batched_resets else ""
    path = OUT / (f"run_{algorithm}_{iterations}_{max_frames}_{updates or 'default'}{resets}_"
                  f"{version.hexdigest()[:10]}.pt")
    if not path.is_file():
        subprocess.run(["bash", str(here / "setup.sh")], check=True)
        OUT.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(VENV / "bin" / "python"), str(here / "run_reference.py"), "--algorithm", algorithm,
                        "--iterations", str(iterations), "--max_frames", str(max_frames), "--reset_seeds",
                        *map(str, reset_seeds(0, iterations)), *(["--updates", str(updates)] if updates else []),
                        *(["--batched_resets"] if batched_resets else []), "--out", str(path)], check=True, cwd=here,
                       env=dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1")))
    return torch.load(path, weights_only=True)


class InjectedDraws(pl.Callback):
    """Seeds the global generator where ``run_reference.py`` seeds BenchMARL's, and records each iteration. With
    ``forced`` batches (BenchMARL's, one per iteration), each collected batch is overwritten with BenchMARL's before
    lit-marl processes and stores it: the training side of the two runs compared on the same data every iteration,
    whatever the collections' rounding did."""

    def __init__(self, forced: list[dict[str, torch.Tensor]] | None = None) -> None:
        self.records: list[dict[str, Any]] = []
        self.forced = forced

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._finish(pl_module)  # the previous iteration's logged means exist once its epoch has ended
        torch.manual_seed(COLLECT_SEED + trainer.current_epoch)
        self.records.append({"exploration": exploration_value(pl_module)})

    def on_batch_collected(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch) -> None:
        self.records[-1]["batch"] = {k: batch.get(tuple(k.split("/"))).detach().clone() for k in BATCH_KEYS}
        if self.forced is not None:
            for key, value in self.forced[trainer.current_epoch].items():
                batch.get(tuple(RAW_KEY_MAP.get(key, key).split("/"))).copy_(value)
        self.records[-1]["steps"] = 0
        torch.manual_seed(TRAIN_SEED + trainer.current_epoch)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if batch_idx == 0:
            self.records[-1]["loss_first"] = {k.rpartition("/")[2]: float(v[-1]) for k, v in
                                              pl_module._epoch_metrics.items() if k.startswith(f"train/{GROUP}/loss")}

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # every optimizer step's loss terms (the run's per-iteration record of them, before it logs their means)
        self.records[-1]["loss_steps"] = {k.rpartition("/")[2]: torch.stack(v) for k, v in
                                          pl_module._epoch_metrics.items() if k.startswith(f"train/{GROUP}/loss")}
        self.records[-1]["params"] = {k: [t.detach().clone() for t in v]
                                      for k, v in live_params(pl_module.losses[GROUP]).items()}

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._finish(pl_module)

    def _finish(self, pl_module: pl.LightningModule) -> None:
        if self.records and "loss_mean" not in self.records[-1]:
            metrics = pl_module.iteration_row["metrics"]
            self.records[-1]["loss_mean"] = {k.rpartition("/")[2]: v for k, v in metrics.items()
                                             if k.startswith(f"train/{GROUP}/loss")}


def exploration_value(model) -> float | None:
    module = getattr(model.learners[GROUP], "exploration", None)
    for attr in ("sigma", "eps"):
        if module is not None and hasattr(module, attr) and hasattr(module, "step"):
            return float(getattr(module, attr))
    return None


def run(algorithm: str, iterations: int, max_frames: int, forced: bool = False,
        updates: int | None = None, batched_resets: bool = False) -> tuple[Checks, list[dict[str, Any]]]:
    """Both runs, compared; returns the checks and a per-iteration summary (largest differences). ``forced``: lit-marl
    trains on BenchMARL's collected batches (:class:`InjectedDraws`); its own collections are still compared.
    ``updates``: optimizer steps per iteration (off-policy) or epochs (on-policy) on both sides, for a shorter run.
    ``batched_resets``: lit-marl's shipped batched VMAS resets, and BenchMARL's side given the same."""
    ref = reference_run(algorithm, iterations, max_frames, updates, batched_resets=batched_resets)
    torch.manual_seed(0)
    more = []
    if updates:
        field = "n_minibatch_iters" if algorithm in ("mappo", "ippo") else "n_optimizer_steps"
        more = [f"--model.init_args.{field}", str(updates)]
    with tempfile.TemporaryDirectory() as folder:
        model, trainer = lit_marl_model(algorithm, max_frames, [
            "--trainer.max_epochs", str(iterations), "--trainer.check_val_every_n_epoch", "1000000",
            "--trainer.enable_progress_bar", "false", "--checkpoint.every_n_epochs", "1000000",
            "--trainer.default_root_dir", folder, *more], batched_resets=batched_resets)
        params = live_params(model.losses[GROUP])
        with torch.no_grad():
            for attr, tensors in ref["params"].items():
                for mine, theirs in zip(params[attr], tensors):
                    mine.copy_(theirs)
        harness = InjectedDraws([{**r["batch"], **r.get("policy", {})} for r in ref["iterations"]] if forced else None)
        trainer.callbacks.append(harness)
        trainer.fit(model)
    # beside BenchMARL's, to study
    torch.save({"iterations": harness.records},
               OUT / f"run_{algorithm}{'_forced' if forced else ''}{'_batched' if batched_resets else ''}_lit-marl.pt")
    checks, summary = Checks(), []
    for i, (mine, theirs) in enumerate(zip(harness.records, ref["iterations"])):
        row: dict[str, Any] = {"iteration": i}
        if theirs["exploration"] is not None:
            checks.close(f"iteration {i}: exploration", torch.tensor(mine["exploration"]),
                         torch.tensor(theirs["exploration"]))
        for key in BATCH_KEYS:
            a, b = mine["batch"][key], theirs["batch"][key]
            name = f"iteration {i}: batch {key}"
            if key in EXACT:
                checks.equal(name + " (exact)", a.tolist(), b.tolist())
                row[key] = int((a != b).sum())
            else:
                checks.close(name, a, b, RTOL, ATOL)
                row[key] = (a.double() - b.double()).abs().max().item()
        starts = episode_starts(mine["batch"]) & episode_starts(theirs["batch"])
        a, b = mine["batch"]["agents/observation"][starts], theirs["batch"]["agents/observation"][starts]
        checks.close(f"iteration {i}: observations where an episode starts ({int(starts.sum())})", a, b, RTOL, ATOL)
        row["episode starts"] = (a.double() - b.double()).abs().max().item() if a.numel() else 0.0
        for kind in ("loss_first", "loss_mean"):
            for term, value in theirs[kind].items():
                if term in mine[kind]:
                    checks.close(f"iteration {i}: {kind} {term}", torch.tensor(mine[kind][term]), torch.tensor(value),
                                 RTOL, ATOL)
                    row[f"{kind}/{term}"] = abs(mine[kind][term] - value)
        for term, theirs_steps in theirs.get("loss_steps", {}).items():
            mine_steps = mine.get("loss_steps", {}).get(term)
            if mine_steps is not None and mine_steps.shape == theirs_steps.shape:
                far = ~torch.isclose(mine_steps, theirs_steps, rtol=RTOL, atol=ATOL)
                row[f"first step apart/{term}"] = int(far.nonzero()[0]) if far.any() else None
        worst = 0.0
        for attr, tensors in theirs["params"].items():
            for j, (a, b) in enumerate(zip(mine["params"][attr], tensors)):
                checks.close(f"iteration {i}: weights {attr}[{j}]", a, b, RTOL, ATOL)
                worst = max(worst, (a.double() - b.double()).abs().max().item())
        row["weights"] = worst
        summary.append(row)
    return checks, summary


def episode_starts(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Where a batch's step is the first of an episode that a partial reset started in the batch ([envs, steps])."""
    done = batch["next/done"].reshape(batch["next/done"].shape[:2])
    starts = torch.zeros_like(done)
    starts[:, 1:] = done[:, :-1]
    return starts


def first_parting(checks: Checks) -> str | None:
    failed = checks.failed
    if not failed:
        return None
    row = failed[0]
    return f"{row['check']}: {row.get('detail') or row.get('max_abs_diff')}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algorithms", nargs="+", choices=sorted(LIT_MARL), required=True)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--max_frames", type=int, default=120_000, help="the budget (sets the exploration anneal)")
    parser.add_argument("--forced", action="store_true",
                        help="lit-marl trains on BenchMARL's collected batches (its own are still compared)")
    parser.add_argument("--updates", type=int, default=None,
                        help="optimizer steps per iteration (off-policy) or epochs (on-policy) on both sides "
                             "(default: BenchMARL's)")
    parser.add_argument("--batched_resets", action="store_true",
                        help="lit-marl's default batched VMAS resets, BenchMARL's side given the same "
                             "(default: per-environment resets on both sides)")
    args = parser.parse_args()
    failures = 0
    for algorithm in args.algorithms:
        checks, summary = run(algorithm, args.iterations, args.max_frames, args.forced, args.updates,
                              args.batched_resets)
        OUT.mkdir(parents=True, exist_ok=True)
        name = f"run_{algorithm}{'_forced' if args.forced else ''}{'_batched' if args.batched_resets else ''}.json"
        (OUT / name).write_text(json.dumps({"checks": checks.rows, "summary": summary}, indent=1))
        print(f"{algorithm}{' (forced batches)' if args.forced else ''}"
              f"{' (batched resets)' if args.batched_resets else ''}: {len(checks.rows) - len(checks.failed)}/"
              f"{len(checks.rows)} checks agree over {args.iterations} iterations")
        for row in summary:
            print("  " + ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()))
        parting = first_parting(checks)
        if parting:
            print(f"  first parting: {parting}")
        failures += bool(checks.failed)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
