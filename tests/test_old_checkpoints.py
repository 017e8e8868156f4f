"""Checkpoints written by earlier lit-marl still load and resume: ``tests/fixtures/checkpoints`` holds runs made by
the code of 2026-12-04 (``made_by.json`` names the commit) and the weights one more iteration gave then; today's code
must continue each of them to the same weights."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from lit_marl.checkpoint import migrate_state_dict
from tests.fixtures.make_checkpoints import NAMES, build, fit

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "checkpoints"


def _copy(name: str, to: Path) -> Path:
    for path in FIXTURES.glob(f"{name}.ckpt*"):
        shutil.copy(path, to / path.name)
    return to / f"{name}.ckpt"


def test_fixtures_were_made_by_the_old_code():
    made_by = json.loads((FIXTURES / "made_by.json").read_text())
    assert made_by["commit"].startswith("5f9fc39")
    assert set(made_by["runs"]) == set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_old_checkpoint_resumes_to_the_same_weights(tmp_path, name):
    ckpt = _copy(name, tmp_path)
    expected = torch.load(FIXTURES / f"{name}.after_one_more.pt", weights_only=True)
    model, trainer = fit(name, tmp_path / "resumed", max_epochs=3, ckpt_path=ckpt)
    assert (model.frames, model.iteration, trainer.global_step) == \
        (expected["frames"], expected["iteration"], expected["global_step"])
    state = model.state_dict()
    renamed = {"lit_marl": {"format_version": 1}, "state_dict": expected["state_dict"]}
    migrate_state_dict(renamed)  # the names weights had before learners, as today's code reads them
    old = renamed["state_dict"]
    assert sorted(state) == sorted(old)
    for key, value in old.items():
        assert torch.equal(state[key], value), key


@pytest.mark.parametrize("name", NAMES)
def test_old_checkpoint_loads_for_inference(name):
    model = type(build(name)).load_from_checkpoint(FIXTURES / f"{name}.ckpt", weights_only=True)
    assert model.iteration == 2 and model.frames == 80
    batch = model.task.make_env(num_envs=2, seed=0, device="cpu").reset()
    out = model.policy(batch)
    for group in model.groups:
        assert torch.isfinite(out.get((group, "action")).float()).all()
