"""``scripts/<each>.sh --help`` prints its usage without creating or installing anything
(issue 33, item 5): in a fresh copy of the workspace tool without .venv, each script exits 0,
prints a usage, and the copy holds the same files as before (no .venv, no __pycache__). And a
bad option is refused the same way, before anything is created or installed (issue 40)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

SCRIPTS = sorted(p.name for p in (ROOT / "scripts").glob("*.sh") if not p.name.startswith("_"))


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fresh") / "ws"
    root.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for d in ("scripts", "vseries", "requirements"):
        shutil.copytree(ROOT / d, root / d, ignore=skip)
    shutil.copy(ROOT / "pyproject.toml", root)
    return root


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def run_fresh(fresh: Path, script: str, *args: str) -> subprocess.CompletedProcess:
    """scripts/<script> in the fresh copy as a user without an active venv runs it."""
    venv_bin = str(Path(os.environ.get("VIRTUAL_ENV", "/nonexistent")) / "bin")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "VSERIES_VENV")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != venv_bin)
    return subprocess.run(
        ["bash", f"scripts/{script}", *args], cwd=fresh, env=env, capture_output=True, text=True
    )


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_creates_and_installs_nothing(fresh, script):
    before = files(fresh)
    r = run_fresh(fresh, script, "--help")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "usage" in r.stdout.lower(), r.stdout
    assert f"scripts/{script}" in r.stdout, r.stdout  # the verb's own usage (issue 35)
    assert not (fresh / ".venv").exists()
    assert files(fresh) == before


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_bad_option_is_refused_before_anything_is_installed(fresh, script):
    before = files(fresh)
    r = run_fresh(fresh, script, "--no-such-option")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "--no-such-option" in r.stderr and f"scripts/{script} --help" in r.stderr, r.stderr
    assert "setup:" not in r.stdout, r.stdout  # neither "creating .venv" nor "installing"
    assert files(fresh) == before  # no .venv, no build/, no __pycache__


def test_options_that_conflict_are_refused_before_anything_is_installed(fresh):
    before = files(fresh)
    r = run_fresh(fresh, "test.sh", "--line", "v0.1.0", "--fast")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "test.sh: error: the workspace tier tests the tool, not a line" in r.stderr, r.stderr
    assert files(fresh) == before


def test_the_command_line_needs_only_the_standard_library(fresh):
    """What the two tests above stand on where the host's python3 has no package of
    requirements/: vseries' command line imports, prints each script's verb's help and parses
    its options with the standard library alone (python -S: no site-packages at all)."""
    verbs = [s.removesuffix(".sh") for s in SCRIPTS if s != "setup.sh"]
    code = f"""
import contextlib, io, os, sys
sys.path.insert(0, os.getcwd())
os.environ["VSERIES_ARGS_ONLY"] = "1"
from vseries import cli
for verb in {verbs!r}:
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):
        cli.main([verb, "--help"])
    assert out.getvalue().startswith("usage: python -m vseries " + verb), out.getvalue()
assert cli.main(["test", "--fast"]) == 0
print(sorted({{m.split(".")[0] for m in sys.modules}} - sys.stdlib_module_names - {{"__main__"}}))
"""
    r = subprocess.run(
        [sys.executable, "-S", "-P", "-B", "-c", code], cwd=fresh, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == "['vseries']\n", r.stdout
