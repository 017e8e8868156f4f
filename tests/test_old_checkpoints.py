"""Checkpoints written by earlier lit-marl still load and resume: lit-marl as it was on 2026-12-04 (commit 5f9fc39,
before algorithms were split into learners; taken from this repository's git history) writes checkpoints of MAPPO,
MADDPG, MASAC, QMIX and an ensemble and the weights one more iteration gives (``tests/fixtures/make_checkpoints.py``);
today's code must load each and continue it to the same weights, bitwise."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

from lit_marl.checkpoint import migrate_state_dict
from tests.helpers.tiny import ROOT
from tests.fixtures.make_checkpoints import NAMES, build, fit

#: the last commit before the learner split
OLD = "5f9fc39"
#: runs whose next iteration today's code computes with sums in another order, so its weights match the old code's to
#: float rounding, not bitwise: PPO's GAE values come from one critic call over the steps and the next steps that
#: differ (``ppo.state_values_in_one_call``, 2026-12-06; 1.5e-8 at most measured), where the old code made two calls
#: vmapped over a stack of the parameters. A resume that lost the optimizer's or the random state would differ by the
#: order of one Adam step (MAPPO's lr 5e-5), hundreds of times the tolerance.
SUMMED_DIFFERENTLY = {"mappo"}


@pytest.fixture(scope="module")
def old_runs(tmp_path_factory) -> Path:
    """The old code's checkpoints and weights, written by that code (from ``git archive``) into a temporary folder."""
    work = tmp_path_factory.mktemp("old")
    archive = subprocess.run(["git", "archive", "--format=tar", OLD, "lit_marl"], cwd=ROOT, capture_output=True)
    assert archive.returncode == 0, f"commit {OLD} is needed from git history: {archive.stderr.decode()}"
    (work / "code.tar").write_bytes(archive.stdout)
    with tarfile.open(work / "code.tar") as tar:
        tar.extractall(work / "code", filter="data")
    env = {**os.environ, "PYTHONPATH": str(work / "code")}
    made = subprocess.run([sys.executable, str(ROOT / "tests" / "fixtures" / "make_checkpoints.py"), str(work / "out")],
                          env=env, capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr[-3000:]
    return work / "out"


def _copy(old_runs: Path, name: str, to: Path) -> Path:
    for path in old_runs.glob(f"{name}.ckpt*"):
        shutil.copy(path, to / path.name)
    return to / f"{name}.ckpt"


def test_the_checkpoints_were_made_by_the_old_code(old_runs):
    made_by = json.loads((old_runs / "made_by.json").read_text())
    assert made_by["lit_marl"].startswith(str(old_runs.parent / "code"))
    assert set(made_by["runs"]) == set(NAMES)
    assert torch.load(old_runs / "mappo.ckpt", weights_only=True)["lit_marl"]["format_version"] == 1


@pytest.mark.parametrize("name", NAMES)
def test_old_checkpoint_resumes_to_the_same_weights(old_runs, tmp_path, name):
    ckpt = _copy(old_runs, name, tmp_path)
    expected = torch.load(old_runs / f"{name}.after_one_more.pt", weights_only=True)
    model, trainer = fit(name, tmp_path / "resumed", max_epochs=3, ckpt_path=ckpt)
    assert (model.frames, model.iteration, trainer.global_step) == \
        (expected["frames"], expected["iteration"], expected["global_step"])
    state = model.state_dict()
    renamed = {"lit_marl": {"format_version": 1}, "state_dict": expected["state_dict"]}
    migrate_state_dict(renamed)  # the names weights had before learners, as today's code reads them
    old = renamed["state_dict"]
    assert sorted(state) == sorted(old)
    for key, value in old.items():
        if name in SUMMED_DIFFERENTLY:
            torch.testing.assert_close(state[key], value, rtol=0, atol=1e-7, msg=key)
        else:
            assert torch.equal(state[key], value), key


@pytest.mark.parametrize("name", NAMES)
def test_old_checkpoint_loads_for_inference(old_runs, name):
    model = type(build(name)).load_from_checkpoint(old_runs / f"{name}.ckpt", weights_only=True)
    assert model.iteration == 2 and model.frames == 80
    batch = model.task.make_env(num_envs=2, seed=0, device="cpu").reset()
    out = model.policy(batch)
    for group in model.groups:
        assert torch.isfinite(out.get((group, "action")).float()).all()
