"""Settings that would train silently wrong are refused by name, or mean what Lightning means (issue 22).

Gradient clipping: lit-marl clips each parameter group itself (``configure_gradient_clipping``), so it must read
``gradient_clip_val`` as Lightning does — ``None`` or ``0`` is no clipping — and refuse a negative value, which
``clip_grads_with_norm_`` would turn into a sign flip of every gradient (gradient ascent)."""

from __future__ import annotations

import pytest
import torch

from lit_marl.algorithms import MAPPO
from lit_marl.errors import ConfigError
from tests.conftest import tiny_kwargs, tiny_task, tiny_trainer
from tests.reliability.helpers import QUIET, expect_exit, tiny_config


def _trained(tmp_path, **trainer_overrides) -> tuple[dict, dict]:
    torch.manual_seed(0)
    model = MAPPO(tiny_task(), **tiny_kwargs(max_frames=40))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    tiny_trainer(tmp_path, max_epochs=1, limit_val_batches=0, **trainer_overrides).fit(model)
    return before, {k: v.clone() for k, v in model.state_dict().items()}


def test_clip_value_zero_means_no_clipping(tmp_path):
    """Before the fix, 0 zeroed every gradient: the weights did not move in a whole iteration."""
    before, zero = _trained(tmp_path / "zero", gradient_clip_val=0)
    _, none = _trained(tmp_path / "none", gradient_clip_val=None)
    assert any(not torch.equal(before[k], zero[k]) for k in before), "clip 0 froze the weights"
    for key in none:  # the same run as with no clipping at all
        torch.testing.assert_close(zero[key], none[key], rtol=0, atol=0, msg=key)


def test_a_negative_clip_value_is_refused_before_training(tmp_path):
    """Before the fix, -1 trained by gradient ascent without a word."""
    model = MAPPO(tiny_task(), **tiny_kwargs(max_frames=40))
    with pytest.raises(ConfigError, match=r"gradient_clip_val: .*got -1\.0.*flip"):
        tiny_trainer(tmp_path, max_epochs=1, gradient_clip_val=-1.0).fit(model)
    assert model.frames == 0  # nothing was collected


@pytest.mark.parametrize("flags, fragment", [
    (["--trainer.gradient_clip_val", "-1"], "trainer.gradient_clip_val: must be a finite number >= 0, got -1"),
    (["--trainer.gradient_clip_algorithm", "foo"], "trainer.gradient_clip_algorithm: 'foo' is not supported"),
])
def test_bad_clipping_exits_2_naming_the_field(tmp_path, capsys, flags, fragment):
    config = tiny_config(tmp_path / "c.yaml")
    err = expect_exit(capsys, ["fit", "--config", str(config), *QUIET, *flags], 2, fragment)
    assert "Traceback" not in err
    assert not (tmp_path / "runs").exists()  # refused before any run folder
