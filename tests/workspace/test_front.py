"""The front as a newcomer meets it: one test file runs from the root with
``python -m pytest`` and with the venv's ``pytest`` script; every verb script answers a bad
option with its own usage and error and points to its own --help."""

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, script_env

from vseries import cli

VERBS = ["apply", "refresh", "build", "rebase", "prs", "test", "wheel"]


@pytest.mark.parametrize("verb", VERBS)
def test_a_bad_option_answers_with_the_scripts_own_usage(verb, tmp_path):
    script = f"scripts/{verb}.sh"
    env = script_env(ROOT, tmp_path / "venv")
    p = subprocess.run(
        [script, "--dry-run-x"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.startswith(f"usage: {script} "), p.stderr
    assert f"\n{verb}.sh: error: unrecognized arguments: --dry-run-x\n" in p.stderr
    assert p.stderr.endswith(f"  next: {script} --help\n")
    assert "vseries" not in p.stderr.split("\n")[0]


def test_python_m_vseries_names_itself(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["prs", "--dry-run-x"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("usage: python -m vseries prs ")
    assert "\nprs: error: unrecognized arguments: --dry-run-x\n" in err
    assert err.endswith("  next: python -m vseries prs --help\n")


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
        timeout=600,
    )
    assert p.returncode == 0 and "1 passed" in p.stdout, p.stdout[-3000:] + p.stderr[-2000:]
