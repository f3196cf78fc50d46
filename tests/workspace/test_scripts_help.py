"""``scripts/<each>.sh --help`` prints its usage without creating or installing anything
(issue 33, item 5): in a fresh copy of the workspace tool without .venv, each script exits 0,
prints a usage, and the copy holds the same files as before (no .venv, no __pycache__)."""

import os
import shutil
import subprocess
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


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_creates_and_installs_nothing(fresh, script):
    venv_bin = str(Path(os.environ.get("VIRTUAL_ENV", "/nonexistent")) / "bin")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "VSERIES_VENV")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != venv_bin)
    before = files(fresh)
    r = subprocess.run(
        ["bash", f"scripts/{script}", "--help"],
        cwd=fresh,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "usage" in r.stdout.lower(), r.stdout
    assert f"scripts/{script}" in r.stdout, r.stdout  # the verb's own usage (issue 35)
    assert not (fresh / ".venv").exists()
    assert files(fresh) == before
