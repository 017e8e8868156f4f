"""The Results pages' data and generator (issue 49): every recorded file in ``benchmarks/results/`` loads and is
well formed, every table generates and is included by a page, the recorded numbers agree with each other (means
with their seeds, differences with their means, CIs with their differences, ratios with their times), and
``benchmarks/README.md``'s "Current results" block is what the data gives."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "results"
RESULTS_PAGES = ROOT / "docs" / "results"
GENERATOR = runpy.run_path(str(ROOT / "scripts" / "docs_results.py"), run_name="docs_results_test")
DATE = re.compile(r"^2\d{3}-\d\d-\d\d(/\d\d)?$")
NUMBER_AS_TEXT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


def _data(name: str):
    return yaml.safe_load((DATA / f"{name}.yaml").read_text())


def _walk(node, path=""):
    """(path, key, value) of every mapping entry, recursively."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield path, key, value
            yield from _walk(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, f"{path}[{i}]")


def _learning_rows():
    for name, entry in _data("learning_vs_benchmarl")["algorithms"].items():
        for m in [entry["current"], *entry.get("earlier", [])]:
            for row in m["rows"]:
                yield f"{name} {m['date']} {row['point']}", row


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("generated")
    GENERATOR["write_all"](out)
    return out


@pytest.mark.parametrize("path", sorted(DATA.glob("*.yaml")), ids=lambda p: p.name)
def test_every_data_file_loads_with_dates_machines_and_numbers_as_numbers(path):
    data = yaml.safe_load(path.read_text())
    assert data, path
    machines = _data("machines")
    for where, key, value in _walk(data):
        if key == "date":
            assert isinstance(value, str) and DATE.match(value), f"{path.name}{where}: date {value!r} (quote it)"
        if key == "machine":
            assert value in machines, f"{path.name}{where}: machine {value!r} is not in machines.yaml"
        # a number YAML read as text (6e-8 without a dot) would be formatted as text, or fail in the generator
        assert not (isinstance(value, str) and NUMBER_AS_TEXT.match(value)), f"{path.name}{where}/{key}: {value!r}"


def test_every_measurement_names_its_log_section():
    headings = {line.lstrip("#").strip() for line in (RESULTS_PAGES / "history.md").read_text().splitlines()
                if line.startswith("#")}
    for path in sorted(DATA.glob("*.yaml")):
        for where, key, value in _walk(yaml.safe_load(path.read_text())):
            if key == "log":
                assert value in headings or value.startswith("project README"), \
                    f"{path.name}{where}: {value!r} is not a heading of docs/results/history.md"


def test_every_table_generates_and_every_page_include_exists(generated):
    names = set(GENERATOR["tables"](generated))
    written = {p.stem for p in generated.glob("results_*.md")}
    assert written == names
    for name in names:
        text = (generated / f"{name}.md").read_text()
        assert text.startswith("---\norphan: true\n---\n") and "|---|" in text, name
        for image in re.findall(r"\]\(/_generated/([\w.]+\.png)\)", text):
            assert (generated / image).stat().st_size > 1000, image
    included = {m for page in RESULTS_PAGES.glob("*.md")
                for m in re.findall(r"\{include\} \.\./_generated/(results_\w+)\.md", page.read_text())}
    assert included == names, {"included, not generated": included - names, "generated, not included": names - included}


def test_the_learning_rows_agree_with_their_seeds_and_their_cis():
    from lit_marl.evaluation.statistics import independent_difference

    for label, row in _learning_rows():
        b, lit = row["benchmarl"], row["lit_marl"]
        assert len(b) == len(lit), label
        # per-seed values are recorded to one decimal, so their mean is within 0.05 of the recorded one
        assert abs(np.mean(b) - row["benchmarl_mean"]) <= 0.0501, label
        assert abs(np.mean(lit) - row["lit_marl_mean"]) <= 0.0501, label
        assert abs(row["lit_marl_mean"] - row["benchmarl_mean"] - row["difference"]) <= 0.011, label
        low, high = row["ci"]
        assert low <= row["difference"] <= high, f"{label}: the CI {row['ci']} does not hold its difference"
        # the bootstrap again on the rounded values: the transcription is the table's, up to the rounding
        again = independent_difference(lit, b)["mean_difference"]
        assert abs(again["ci_low"] - low) < 0.15 and abs(again["ci_high"] - high) < 0.15, (label, again)


def test_the_reset_modes_rows_agree_with_their_seeds_and_the_learning_table():
    """The per-environment-resets arm: its means, difference and CI follow from its seeds, and its batched side is
    the learning table's current IDDPG row, seed for seed."""
    from lit_marl.evaluation.statistics import independent_difference

    table = {r["point"]: r for r in _data("learning_vs_benchmarl")["algorithms"]["iddpg"]["current"]["rows"]}
    for row in _data("reset_modes")["iddpg"]["rows"]:
        assert row["batched"] == table[row["point"]]["lit_marl"], row["point"]
        assert abs(np.mean(row["batched"]) - row["batched_mean"]) <= 0.0051, row["point"]
        assert abs(np.mean(row["per_env"]) - row["per_env_mean"]) <= 0.0051, row["point"]
        again = independent_difference(row["per_env"], row["batched"])
        assert abs(again["mean_difference"]["value"] - row["difference"]) <= 0.0051, row["point"]
        assert [round(again["mean_difference"]["ci_low"], 2), round(again["mean_difference"]["ci_high"], 2)] == \
            row["ci"], row["point"]
        assert abs(again["probability_a_better"] - row["p_better"]) <= 0.0051, row["point"]


def test_every_current_learning_row_meets_the_rule_as_the_learning_page_says():
    """docs/results/learning.md says every algorithm meets the rule at every evaluation: a new measurement that does
    not must change that page's words."""
    for name, entry in _data("learning_vs_benchmarl")["algorithms"].items():
        for row in entry["current"]["rows"]:
            assert row["ci"][1] >= 0, f"{name} {row['point']}: update docs/results/learning.md"


def test_the_recorded_means_ratios_and_tests_follow_from_their_values():
    from scipy import stats

    epymarl, harl = _data("epymarl"), _data("harl")
    runs = {**epymarl["lbf_qmix"]["runs"], **{f"rware_{k}": v for k, v in epymarl["rware"]["ppo"]["runs"].items()},
            **{f"lbf_{k}": v for k, v in epymarl["lbf_ppo"]["runs"].items()}, **harl["runs"]}
    for key, run in runs.items():
        if "mean" in run:
            means = np.mean(list(run["seeds"].values()), axis=0)
            assert np.allclose(means, run["mean"], atol=0.006, rtol=0.001), key
    lbf = epymarl["lbf_qmix"]["runs"]
    for test in epymarl["lbf_qmix"]["tests"]:
        a, b = lbf[test["a"]], lbf[test["b"]]
        at = lambda run: [v[run["points_m"].index(test["at_m"])] for v in run["seeds"].values()]  # noqa: E731
        welch = stats.ttest_ind(at(a), at(b), equal_var=False)
        assert abs(welch.pvalue - test["p"]) < 0.006 and abs(welch.statistic - test.get("t", welch.statistic)) < 0.06, test
    collection = _data("speed_collection")
    for row in collection["against_raw_step"]["rows"]:
        assert abs(row["collection_fps"] / row["raw_fps"] - row["ratio"]) < 0.006, row
    for row in collection["ceiling"]["rows"]:
        assert abs(row["raw_s"] / row["collection_s"] - row["ratio"]) < 0.006, row
        assert GENERATOR["ceiling"](row) > row["ratio"], row  # nothing beats its ceiling
    for row in _data("speed_iteration")["against_bare_torchrl"]["runs"][0]["rows"]:
        assert abs(row["lit_marl_fps"] / row["bare_fps"] - row["ratio_whole"]) < 0.01, row


def test_spot_checks_of_generated_figures(generated):
    def page(name):
        return (generated / f"{name}.md").read_text()

    assert "| QMIX | 16 | 120k | 8.89 / 7.07 | -1.82 [-7.63, +4.06] | 0.43 | yes |" in page("results_learning_summary")
    assert "| MADDPG | 3 | 120k | -0.57 / 12.13 | +12.70 [+2.30, +22.60] |" in page("results_learning_summary")
    assert "| QMIX | 97/97 | 1.5e-8 |" in page("results_differential_update")
    assert "| lit-marl, batched resets (the default) | 2.82 | 5.99 | 8.81 | 1.33× |" in page("results_iteration")
    assert "1.47× / 1.42×" in page("results_iteration")
    assert "| 600 (100) | 0.54 | 0.34 | 1.32 | 0.41× | 0.61× |" in page("results_collection")
    assert "| MADDPG | 3 | 0.6M | 5,821 | ≈ 8,200 at 10M | 71% | 6% |" in page("results_harl")
    assert "**0.442**" in page("results_lbf_qmix") and "**0.432**" in page("results_lbf_qmix")
    assert "9 of 9 algorithms" in page("results_headlines")


def test_the_readme_block_is_what_the_data_gives():
    text = (ROOT / "benchmarks" / "README.md").read_text()
    begin, end = GENERATOR["BEGIN"], GENERATOR["END"]
    block = text[text.index(begin):text.index(end) + len(end)]
    assert block == GENERATOR["current_results"](), "run: python scripts/docs_results.py --readme"


def test_the_measurement_log_kept_its_sections():
    log = (RESULTS_PAGES / "history.md").read_text()
    for heading in ("## Against BenchMARL 1.5.2 itself (`vs_benchmarl/`, issue 21, 2026-12-04)",
                    "## Issue 33: batched VMAS resets, measured", "## On one H200: `compile` measured",
                    "### One longer learning run per family (issue 25 item 4, 2026-12-05)",
                    "## Data-parallel processes (`ddp.py`)"):
        assert heading in log, heading
    # the documentation's example runner leaves the log's recorded commands alone
    fences = re.findall(r"(?m)^(.*)\n *```bash$", log)
    assert fences and all("docs-test: skip" in previous for previous in fences)
