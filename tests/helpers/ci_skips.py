"""A pytest plugin (tests/conftest.py loads it): under ``CI``, a skipped test whose reason is not on
:data:`ALLOWED_SKIPS_IN_CI` fails the run, naming each such test and its reason. Without it an extra that stopped
importing (optuna, av, onnxruntime…) or a missing renderer turned dozens of tests into skips and CI stayed green."""

from __future__ import annotations

import os

import pytest

#: the only skips CI accepts (a reason starting with one of these): tests for a machine CI is not. Any other skip
#: under ``CI`` (an extra that stopped importing, a missing renderer or service) fails the run, so a green CI never
#: means "some tests did not run".
ALLOWED_SKIPS_IN_CI = (
    "needs a machine without a GPU",  # the CUDA-absent refusals (CI has no GPU; a GPU machine skips them)
    "this machine has CUDA",
)
_skipped: list[tuple[str, str]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped:  # the controller sees pytest-xdist workers' reports here too
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _skipped.append((report.nodeid, reason.removeprefix("Skipped: ")))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not os.environ.get("CI") or hasattr(session.config, "workerinput"):
        return
    unexpected = [(test, reason) for test, reason in _skipped if not reason.startswith(ALLOWED_SKIPS_IN_CI)]
    if unexpected:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        lines = [f"CI: {len(unexpected)} test(s) skipped for a reason not in tests/helpers/ci_skips.py's "
                 f"ALLOWED_SKIPS_IN_CI; in CI a skip is a failure:", *(f"  {test}: {reason}" for test, reason
                                                                         in unexpected)]
        if reporter:
            reporter.ensure_newline()
        for line in lines:
            reporter.write_line(line, red=True) if reporter else print(line)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
