"""Materialising vllm/ from the verified source release as the workspace's submodule."""

import hashlib
import shutil
import subprocess
import tarfile
import zlib

import pytest
from conftest import ROOT, git

from vseries import materialise, release
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


def as_upstream_commit(root) -> None:
    """The pin file without its rebase-note: its commit reads as one upstream's git has."""
    pin_file = root / "upstream.toml"
    lines = pin_file.read_text().splitlines(keepends=True)
    pin_file.write_text("".join(ln for ln in lines if not ln.startswith("# rebase-note:")))


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
    as_upstream_commit(superproject)
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


def test_auto_gc_never_fails_on_the_stand_in_commit(tmp_path):
    """A tree made from a source release: ``git gc --auto`` (which commit, am and rebase run)
    packed with the replace ref ignored, failed with "fatal: bad object HEAD" and left gc.log,
    whose warning every later git command in vllm/ printed. Automatic gc is off there."""
    top = tmp_path / "src" / "pkg-1.0"
    top.mkdir(parents=True)
    (top / "pyproject.toml").write_text("[project]\n")
    (top / "a.py").write_text("x = 1\n")
    tarball = tmp_path / "pkg-1.0.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(top, arcname="pkg-1.0")
    repo = tmp_path / "repo"
    release.repo_from_sdist(tarball, repo, "1" * 40, "v9.9.9", "sdist (test)")
    # gc --auto estimates the loose objects from objects/17/ alone: past 6700 / 256 there
    objects, n, made = repo / ".git" / "objects", 0, 0
    while made < 30:
        data = f"blob {len(str(n))}\0{n}".encode()
        sha = hashlib.sha1(data).hexdigest()
        if sha.startswith("17"):
            (objects / "17").mkdir(exist_ok=True)
            (objects / "17" / sha[2:]).write_bytes(zlib.compress(data))
            made += 1
        n += 1
    r = subprocess.run(
        ["git", "-C", str(repo), "-c", "gc.autoDetach=false", "gc", "--auto"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0 and "bad object" not in r.stderr, r.stderr
    assert not (repo / ".git" / "gc.log").exists()
    assert git(repo, "rev-parse", "HEAD") == "1" * 40  # still the stand-in


def test_what_a_timed_out_git_route_left_goes_before_the_source_release(superproject, monkeypatch):
    """A git route killed half-way (its timeout) leaves files in vllm/; the fallback to the
    source release starts from an empty folder instead of refusing a folder it never had."""
    monkeypatch.delenv("VSERIES_OFFLINE")
    as_upstream_commit(superproject)

    def half_checkout(top, pin):
        (top / "vllm" / "setup.py").write_text("half\n")
        return False  # "git gave no answer"

    seen = []

    def fetch_source_release(package, artefact):  # what vllm/ holds when the fallback starts
        seen.append(list((superproject / "vllm").iterdir()))
        raise SeriesError("stop here")

    monkeypatch.setattr(release, "submodule_by_git", half_checkout)
    monkeypatch.setattr(materialise.fetch, "fetch", fetch_source_release)
    with pytest.raises(SeriesError, match="stop here"):
        materialise.ensure()
    assert seen == [[]]


def test_an_interrupted_git_route_leaves_vllm_empty(superproject, monkeypatch):
    """Ctrl-C while the git route checks vllm/ out: the next run finds an empty folder, not a
    half checkout whose missing files apply would take for the user's uncommitted work."""
    monkeypatch.delenv("VSERIES_OFFLINE")
    as_upstream_commit(superproject)

    def interrupted(top, pin):
        (top / "vllm" / "setup.py").write_text("half\n")
        raise KeyboardInterrupt

    monkeypatch.setattr(release, "submodule_by_git", interrupted)
    with pytest.raises(KeyboardInterrupt):
        materialise.ensure()
    assert list((superproject / "vllm").iterdir()) == []


def test_a_pin_made_from_the_source_release_tries_no_git_route(superproject, monkeypatch, capsys):
    """upstream.toml's rebase-note says the pin is the source release's own commit, which no
    git remote has: set-up goes to the source release without trying GitHub (up to 300 s on a
    host whose connections hang), and --source git says why it cannot work."""
    from vseries import pin as pinmod

    pin_file = superproject / "upstream.toml"
    if not pinmod.synthetic(pin_file):  # the pin of the day may be upstream's own commit
        text = pin_file.read_text().replace(
            "\ncommit = ", f"\n{pinmod.NOTE}commit is the synthetic commit made from x\ncommit = "
        )
        pin_file.write_text(text)
    assert pinmod.synthetic(pin_file)
    monkeypatch.delenv("VSERIES_OFFLINE")
    monkeypatch.setattr(release, "submodule_by_git", lambda *a: pytest.fail("git route tried"))

    def fetch_source_release(package, artefact):
        raise SeriesError("stop here")

    monkeypatch.setattr(materialise.fetch, "fetch", fetch_source_release)
    with pytest.raises(SeriesError, match="stop here"):
        materialise.ensure()
    assert "so it is made here, not cloned" in capsys.readouterr().out
    with pytest.raises(SeriesError, match="no git remote has it") as e:
        materialise.ensure("git")
    assert e.value.fix.startswith("scripts/setup.sh")
