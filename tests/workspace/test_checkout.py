"""A clone made with core.autocrlf=true (the default of many Windows users, and of CI images
that set it globally): the scripts run, and apply and refresh keep patches/ byte for byte."""

import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, clone_pinned, git, script_env

from vseries import series

pytestmark = pytest.mark.slow


def workspace_repo(dest: Path) -> Path:
    """A repository of this workspace as it is now (tracked and untracked, not ignored files;
    no vllm/), committed with LF as it is stored."""
    dest.mkdir()
    names = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split("\0")
    for name in names:
        src = ROOT / name
        if name and src.is_file():  # the vllm gitlink is a folder; deleted files are gone
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    git(dest, "init", "-q")
    git(dest, "add", "-A")
    git(dest, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "workspace")
    return dest


def test_autocrlf_clone_runs_the_scripts_and_keeps_patches(tmp_path, pristine, pin):
    src = workspace_repo(tmp_path / "src")
    clone = tmp_path / "clone"
    subprocess.run(
        ["git", "-c", "core.autocrlf=true", "clone", "-q", str(src), str(clone)], check=True
    )
    assert b"\r\n" in (clone / "README.md").read_bytes()  # the checkout did convert text files
    scripts = [*clone.glob("**/*.sh"), clone / ".ci/run"]
    assert [s for s in scripts if b"\r" in s.read_bytes()] == []
    clone_pinned(pristine, clone / "vllm", pin.commit)
    env = script_env(clone, tmp_path / "venv")
    patches = {
        str(p.relative_to(src)): p.read_bytes() for p in (src / "patches").rglob("*") if p.is_file()
    }

    p = subprocess.run(["scripts/apply.sh"], cwd=clone, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "installing the workspace requirements" not in p.stdout + p.stderr
    _, entries = series.read(src / "patches" / "series")
    count = git(clone / "vllm", "rev-list", "--count", f"{pin.commit}..series")
    assert int(count) == len(entries)

    p = subprocess.run(
        ["bash", "scripts/refresh.sh"], cwd=clone, env=env, capture_output=True, text=True
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert {
        str(p.relative_to(clone)): p.read_bytes()
        for p in (clone / "patches").rglob("*")
        if p.is_file()
    } == patches
    assert git(clone, "status", "--porcelain", "--", "patches", "scripts", ".ci") == ""
    # _venv.sh found its stamp current: nothing was installed into the shared interpreter
    assert "installing the workspace requirements" not in p.stdout + p.stderr
