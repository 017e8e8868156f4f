"""lit-marl computes what BenchMARL 1.5.2 computes (issue 21): the differential harness of benchmarks/vs_benchmarl/.

The ``benchmarl`` tests run BenchMARL itself in a venv of its own (``setup.sh`` makes it on first use: torchrl 0.11
cannot share lit-marl's environment) and compare, for every algorithm on vmas/balance at BenchMARL's defaults, the
networks, process_batch, loss terms and outputs, clipped gradients, weights after the step and target update,
exploration and the environment itself (``compare.py``'s docstring). ``pytest -m benchmarl``; CI runs them. The
others check the harness's own logic and run in the default suite."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from lit_marl import algorithms

ROOT = Path(__file__).resolve().parents[2]


def _harness(script: str = "compare"):
    """A script of benchmarks/vs_benchmarl/ as a module (``compare``: one update; ``run_compare``: whole runs)."""
    spec = importlib.util.spec_from_file_location(f"vs_benchmarl_{script}",
                                                  ROOT / "benchmarks" / "vs_benchmarl" / f"{script}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


harness = _harness()


def test_the_harness_covers_every_algorithm_and_both_action_kinds_of_sac():
    names = {cls.algorithm_name for cls in (algorithms.MAPPO, algorithms.IPPO, algorithms.MADDPG, algorithms.IDDPG,
                                            algorithms.MASAC, algorithms.ISAC, algorithms.QMIX, algorithms.VDN,
                                            algorithms.IQL)}
    assert names <= set(harness.LIT_MARL)
    assert {"masac_discrete", "isac_discrete"} <= set(harness.LIT_MARL)
    for config, _ in harness.LIT_MARL.values():
        assert (ROOT / "configs" / config).is_file(), config


def test_a_check_fails_beyond_float_tolerance_and_names_shape_changes():
    checks = harness.Checks()
    checks.close("same", torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0 + 1e-7]))
    checks.close("off", torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.001]))
    checks.close("shape", torch.zeros(3), torch.zeros(4))
    checks.equal("names", ["a"], ["b"])
    checks.note("diagnostic", "not trained on")
    assert [r["check"] for r in checks.failed] == ["off", "shape", "names"]
    assert checks.failed[0]["max_abs_diff"] == pytest.approx(1e-3, rel=1e-3)


def test_unflatten_keeps_the_agent_dimension_of_the_group():
    """Exploration draws per agent from the group's batch shape: a group entry without the agent dimension drew
    one decision per environment."""
    flat = {"agents/observation": torch.zeros(5, 4, 16), "agents/action": torch.zeros(5, 4, dtype=torch.long),
            "next/agents/observation": torch.zeros(5, 4, 16), "done": torch.zeros(5, 1, dtype=torch.bool)}
    td = harness.unflatten(flat, batch_dims=1)
    assert td.batch_size == (5,) and td.get("agents").batch_size == (5, 4)
    assert td.get(("next", "agents")).batch_size == (5, 4)


@pytest.mark.benchmarl
@pytest.mark.parametrize("algorithm", sorted(harness.LIT_MARL))
def test_lit_marl_computes_what_benchmarl_computes(algorithm):
    checks = harness.compare(algorithm, 120_000)
    assert len(checks.rows) > 20
    assert not checks.failed, checks.failed


@pytest.mark.benchmarl
def test_the_harness_finds_the_qmix_clipping_that_differed(monkeypatch):
    """Before lit-marl clipped QMIX's Q-network and mixer by their joint norm, each part was clipped alone: the
    harness must see that in the gradients and the weights."""
    from lit_marl.algorithms.learner import GroupLearner
    from lit_marl.algorithms.q_learning import QLearning

    monkeypatch.setattr(QLearning, "clip_group", GroupLearner.clip_group)
    failed = {row["check"] for row in harness.compare("qmix", 120_000).failed}
    assert any(name.startswith("grad local_value_network_params") for name in failed), failed
    assert any(name.startswith("weights after: mixer_network_params") for name in failed), failed
    assert not any(name.startswith(("loss term", "process_batch", "networks")) for name in failed), failed


@pytest.mark.benchmarl
def test_the_harness_finds_an_environment_that_differs(monkeypatch):
    """A task configured otherwise than BenchMARL's (a lighter package here) steps other physics: the harness's
    environment rollout must see it, and nothing that is not the environment must."""
    from lit_marl.envs.vmas import VmasTask

    make_env = VmasTask._make_env

    def lighter_package(self, *args, **kwargs):
        self.scenario_kwargs = {**self.scenario_kwargs, "package_mass": 4}
        return make_env(self, *args, **kwargs)

    monkeypatch.setattr(VmasTask, "_make_env", lighter_package)
    failed = {row["check"] for row in harness.compare("iql", 120_000).failed}
    assert any(name.startswith("env: next/agents/observation") for name in failed), failed
    assert all(name.startswith("env: ") for name in failed), failed


#: whole iterations on BenchMARL's own collected batches: ITERATIONS iterations of UPDATES optimizer steps (off-policy)
#: or epochs (on-policy) each, both sides alike (BenchMARL's defaults take minutes an iteration)
ITERATIONS, UPDATES = 2, {"iddpg": 100, "qmix": 100, "mappo": 2}


def _trained_checks(checks) -> list[dict]:
    return [r for r in checks.rows if any(part in r["check"] for part in ("weights", "loss_", "exploration"))]


@pytest.mark.benchmarl
@pytest.mark.parametrize("algorithm", sorted(UPDATES))
def test_whole_iterations_train_as_benchmarl_on_the_same_draws(algorithm):
    """Issue 32: lit-marl's run through Lightning's Trainer and BenchMARL's own loop, fed the same random draws and
    BenchMARL's collected batches, end every iteration with the same weights and targets (every loss term of every
    step, exploration); lit-marl's own collections end their episodes where BenchMARL's do."""
    run_harness = _harness("run_compare")
    checks, summary = run_harness.run(algorithm, ITERATIONS, 120_000, forced=True, updates=UPDATES[algorithm])
    trained = _trained_checks(checks)
    assert len(trained) > 10 * ITERATIONS
    assert all(r["ok"] for r in trained), [r for r in trained if not r["ok"]]
    assert all(row["next/done"] == 0 for row in summary), summary
    assert all(row["episode starts"] == 0 for row in summary), summary  # the same per-environment reset draws
    assert all(all(v is None for k, v in row.items() if k.startswith("first step apart")) for row in summary)


@pytest.mark.benchmarl
def test_whole_iterations_with_the_default_batched_resets_run_as_benchmarl_given_the_same_resets():
    """Issue 48: lit-marl's default batched VMAS resets, and BenchMARL's side given the same whole-batch resets
    (``run_reference.py --batched_resets``, the harness's own patch of torchrl 0.11's ``VmasEnv._reset``): lit-marl's
    own collections end their episodes where BenchMARL's do and start the new ones at the same observations (drawn by
    the resets alone), and the training on BenchMARL's batches ends every iteration with the same weights."""
    checks, summary = _harness("run_compare").run("iddpg", ITERATIONS, 120_000, forced=True, updates=UPDATES["iddpg"],
                                                  batched_resets=True)
    trained = _trained_checks(checks)
    assert len(trained) > 10 * ITERATIONS
    assert all(r["ok"] for r in trained), [r for r in trained if not r["ok"]]
    assert all(row["next/done"] == 0 for row in summary), summary
    starts = [r for r in checks.rows if "where an episode starts" in r["check"]]
    assert len(starts) == ITERATIONS and all(r["ok"] for r in starts), starts
    assert all(row["episode starts"] == 0 for row in summary), summary  # the same draws: bitwise


@pytest.mark.benchmarl
def test_the_run_harness_sees_resets_made_another_way(monkeypatch):
    """lit-marl's batched resets against BenchMARL's per-environment ones draw other starts: the harness must see it
    in the episodes' starts and their ends, and nowhere in the training on BenchMARL's batches."""
    run_harness = _harness("run_compare")
    reference_run = run_harness.reference_run
    monkeypatch.setattr(run_harness, "reference_run",
                        lambda *args, batched_resets=False, **kwargs: reference_run(*args, **kwargs))
    checks, summary = run_harness.run("iddpg", ITERATIONS, 120_000, forced=True, updates=UPDATES["iddpg"],
                                      batched_resets=True)
    failed = {r["check"] for r in checks.failed}
    assert any("where an episode starts" in name for name in failed), failed
    assert any("next/done" in name for name in failed), failed
    assert all(r["ok"] for r in _trained_checks(checks)), [r for r in _trained_checks(checks) if not r["ok"]]


@pytest.mark.benchmarl
def test_the_run_harness_sees_a_target_network_that_moves_half_as_often(monkeypatch):
    """A loop defect one update cannot show: target networks moved after every other optimizer step."""
    from lit_marl.algorithms.off_policy import OffPolicyLearner

    step = OffPolicyLearner.after_step
    calls = {"n": 0}

    def every_other(self, batch):
        calls["n"] += 1
        if calls["n"] % 2:
            return step(self, batch)
        return None

    monkeypatch.setattr(OffPolicyLearner, "after_step", every_other)
    checks, _ = _harness("run_compare").run("iddpg", ITERATIONS, 120_000, forced=True, updates=UPDATES["iddpg"])
    failed = {r["check"] for r in _trained_checks(checks) if not r["ok"]}
    assert any("target_value_network_params" in name for name in failed), failed
