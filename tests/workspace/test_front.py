"""The front as a newcomer meets it: one test file runs from the root with
``python -m pytest`` and with the venv's ``pytest`` script."""

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT


@pytest.mark.parametrize("how", ["python -m pytest", "pytest"])
def test_one_test_file_runs_from_the_root(how):
    """The root's vllm/ (the submodule) must not shadow the installed vLLM: python -m puts
    the working directory on sys.path, pytest a root conftest's folder."""
    bindir = Path(sys.executable).parent
    if how == "pytest" and not (bindir / "pytest").exists():
        pytest.skip(f"no pytest script beside {sys.executable}")
    cmd = [sys.executable, "-m", "pytest"] if how != "pytest" else [str(bindir / "pytest")]
    p = subprocess.run(
        [*cmd, "-q", "-p", "no:cacheprovider", "tests/workspace/data/root_run.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0 and "1 passed" in p.stdout, p.stdout[-3000:] + p.stderr[-2000:]
