"""The same config and seed give the same metrics, value for value, over 3 iterations on CPU (timers excepted);
another seed gives other values (so the comparison can fail)."""

from __future__ import annotations

import yaml

from lit_marl.cli import main
from tests.reliability.helpers import QUIET, rows, run_dirs, tiny_config


def _metrics(config, *extra) -> list[dict[str, str]]:
    before = set(run_dirs())
    main(["fit", "--config", str(config), *QUIET, *extra])
    (run,) = set(run_dirs()) - before
    return [{k: v for k, v in r.items() if not k.startswith("timers/")} for r in rows(run)]


def test_same_config_and_seed_give_identical_metrics(tmp_path):
    config = yaml.safe_load(tiny_config(tmp_path / "tiny.yaml").read_text())
    config["model"]["init_args"]["max_frames"] = 120  # 3 iterations, each evaluated
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(config))
    first, second = _metrics(tmp_path / "tiny.yaml"), _metrics(tmp_path / "tiny.yaml")
    assert len([r for r in first if r.get("counters/iteration")]) == 3
    assert first == second
    other = _metrics(tmp_path / "tiny.yaml", "--seed_everything", "1")
    assert [r.get("train/agents/loss_objective") for r in other] != [r.get("train/agents/loss_objective")
                                                                       for r in first]
