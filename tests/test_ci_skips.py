"""Under ``CI`` a skip is a failure unless its reason is on the allow-list (tests/helpers/ci_skips.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

TESTS = '''
import pytest

def test_runs():
    pass

def test_needs_an_extra():
    pytest.importorskip("no_such_extra_module")

def test_for_a_gpu_machine():
    pytest.skip("this machine has CUDA")
'''


def _pytest(tmp_path, ci: bool, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_probe.py").write_text(TESTS)
    env = {k: v for k, v in os.environ.items() if k != "CI"} | ({"CI": "true"} if ci else {})
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.helpers.ci_skips", "-q", "-p",
                           "no:cacheprovider", "--rootdir", str(tmp_path), *args, str(tmp_path / "test_probe.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "pytest-xdist"])
def test_a_skip_off_the_allow_list_fails_ci_by_name(tmp_path, workers):
    result = _pytest(tmp_path, True, *workers)
    assert result.returncode == 1, result.stdout
    assert "CI: 1 test(s) skipped for a reason not in" in result.stdout
    assert "test_probe.py::test_needs_an_extra: could not import 'no_such_extra_module'" in result.stdout
    assert "test_for_a_gpu_machine" not in result.stdout.split("CI: 1 test(s)")[1].split("short test summary")[0]


def test_outside_ci_a_skip_is_a_skip(tmp_path):
    result = _pytest(tmp_path, False)
    assert result.returncode == 0 and "1 passed, 2 skipped" in result.stdout, result.stdout
