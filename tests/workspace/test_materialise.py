"""Materialising vllm/ from the verified source release as the workspace's submodule."""

import shutil
import subprocess

import pytest
from conftest import ROOT, git

from vseries import materialise
from vseries.errors import SeriesError


@pytest.fixture
def superproject(tmp_path, pin, monkeypatch):
    """An empty workspace clone: .gitmodules and the gitlink at the pin, vllm/ empty."""
    root = tmp_path / "super"
    root.mkdir()
    git(root, "init", "-q")
    shutil.copy(ROOT / ".gitmodules", root)
    shutil.copy(ROOT / "upstream.toml", root)
    git(root, "update-index", "--add", "--cacheinfo", f"160000,{pin.commit},vllm")
    git(root, "add", ".gitmodules", "upstream.toml")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "workspace")
    (root / "vllm").mkdir()
    monkeypatch.setenv("VSERIES_ROOT", str(root))
    monkeypatch.setenv("VSERIES_OFFLINE", "1")
    return root


@pytest.mark.slow
def test_source_release_route_gives_a_clean_submodule(superproject, pin, capsys):
    vdir = materialise.ensure()
    assert "verified source release" in capsys.readouterr().out
    status = subprocess.run(
        ["git", "-C", str(superproject), "submodule", "status"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert status == f" {pin.commit} vllm ({pin.tag})\n"  # leading space: clean, at the gitlink
    assert git(vdir, "describe") == pin.tag
    assert materialise.source_of(vdir).startswith(f"sdist {pin.source.filename}")
    assert (vdir / "vllm" / "model_executor" / "layers" / "fused_moe" / "fused_moe.py").exists()
    assert not (vdir / "PKG-INFO").exists() and not (vdir / "setup.cfg").exists()
    # a second call finds it and does nothing
    materialise.ensure()
    assert "present" in capsys.readouterr().out


def test_files_in_vllm_that_are_no_checkout_are_kept(superproject):
    (superproject / "vllm" / "notes.txt").write_text("mine\n")
    with pytest.raises(SeriesError, match="not a git checkout"):
        materialise.ensure()
    assert (superproject / "vllm" / "notes.txt").read_text() == "mine\n"


def test_git_route_without_network_falls_back(superproject, monkeypatch, capsys):
    monkeypatch.delenv("VSERIES_OFFLINE")
    git(
        superproject,
        "config",
        "-f",
        ".gitmodules",
        "submodule.vllm.url",
        "http://127.0.0.1:9/vllm.git",
    )  # refused at once, like a host with no route
    with pytest.raises(SeriesError, match="git route failed"):
        materialise.ensure("git")
    assert "git route failed" in capsys.readouterr().out
    assert not any((superproject / "vllm").iterdir())


def test_real_workspace_submodule_is_registered(pin):
    """The committed gitlink is the pin (what `git submodule status` compares against)."""
    out = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-s", "vllm"], capture_output=True, text=True
    ).stdout
    assert out.startswith(f"160000 {pin.commit}")
