"""The tier check of tests/workspace/conftest.py: a test not marked slow that goes past the
limit (CPU seconds, or six times as many wall seconds) fails the run and is named; a test
marked slow is not held to it; VSERIES_SLOW_AFTER_S=0 turns the check off."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

CASES = """
import time

import pytest


def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_quick():
    pass


def test_busy():
    burn(0.4)


@pytest.mark.slow
def test_busy_but_marked_slow():
    burn(0.4)


def test_sleeps():
    time.sleep(0.8)
"""


def run(tmp_path: Path, limit: str) -> subprocess.CompletedProcess:
    """pytest on CASES with this folder's conftest.py, the limit set to ``limit`` seconds."""
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: slow\n")
    (tmp_path / "test_cases.py").write_text(CASES)
    return subprocess.run(
        [sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_cases.py"],
        cwd=tmp_path,
        # no plugins from entry points (hypothesis alone costs 1.2 s of CPU per run)
        env={**os.environ, "VSERIES_SLOW_AFTER_S": limit, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        capture_output=True,
        text=True,
    )


def test_unmarked_tests_past_the_limit_fail_the_run(tmp_path):
    p = run(tmp_path, "0.2")  # 0.2 s of CPU, 1.2 s of wall time
    assert p.returncode == 1 and "4 passed" in p.stdout, p.stdout + p.stderr
    named = [x.split()[-1] for x in p.stdout.splitlines() if " s CPU " in x]
    assert named == ["test_cases.py::test_busy"], p.stdout
    assert "mark them @pytest.mark.slow" in p.stdout
    p = run(tmp_path, "0.1")  # and 0.6 s of wall time: the sleeper too
    assert sorted(x.split()[-1] for x in p.stdout.splitlines() if " s CPU " in x) == [
        "test_cases.py::test_busy",
        "test_cases.py::test_sleeps",
    ], p.stdout
    p = run(tmp_path, "0")
    assert p.returncode == 0 and "tier check" not in p.stdout, p.stdout + p.stderr
