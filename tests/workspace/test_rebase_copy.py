"""A rebase is a main job of this workspace, so the tests must survive one: rebase a copy of
the workspace onto a newer release, then run the fast tier in the copy. It must pass.

The newer release is made here, offline: the pin's own source tree with one upstream change
that no patch touches, published as the next patch release on the local package index. So
the series carries clean, the patch files stay byte-identical, and everything that differs
in the copy is the pin (tag, commit id, source release, wheel, gitlink): a test that holds a
literal of the old pin fails here.
"""

import argparse
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile

import pytest
from conftest import ROOT, clone_pinned, git
from packaging.version import Version

from vseries import apply, patchfile, series
from vseries import pin as pinmod
from vseries import rebase as rebasemod

FULL = "feed" + "0" * 36  # the synthetic release's upstream commit id


def copy_workspace(dest) -> None:
    """The workspace's tracked and untracked (not ignored) files, less vllm/, as a git
    repository whose index records vllm/ at the pin (the gitlink)."""
    names = git(ROOT, "ls-files", "-co", "--exclude-standard").splitlines()
    for name in names:
        src = ROOT / name
        if name == "vllm" or name.startswith("vllm/") or not src.is_file():
            continue
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / name)
    git(dest, "init", "-q")
    pin = pinmod.load(dest / "upstream.toml")
    git(dest, "update-index", "--add", "--cacheinfo", f"160000,{pin.commit},vllm")


def next_release(pristine, version: str) -> bytes:
    """The pin's tree with one upstream change no patch touches, as source release
    ``vllm-<version>.tar.gz`` (with the vllm/_version.py a source release has)."""
    top = f"vllm-{version}"
    archive = subprocess.run(
        ["git", "-C", str(pristine), "archive", "--format=tar", f"--prefix={top}/", "HEAD"],
        capture_output=True,
        check=True,
    ).stdout
    buf = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(archive)) as src,
        tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as out,
    ):
        for m in src.getmembers():
            out.addfile(m, src.extractfile(m) if m.isfile() else None)
        for name, text in {
            "vllm/_version.py": f"__version__ = '{version}'\n__commit_id__ = 'g{FULL[:9]}'\n",
            "docs/upstream-change.md": "An upstream change that no patch touches.\n",
        }.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mtime = len(data), 1_800_000_000
            out.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.slow
def test_rebased_copy_passes_the_fast_tier(tmp_path, pristine, pin, index, monkeypatch):
    """Copy, rebase onto the next patch release, fast tier in the copy. About 2-4 minutes
    on a 2-core host (the fast tier once more)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    copy_workspace(ws)
    clone_pinned(pristine, ws / "vllm", pin.commit)
    cache = tmp_path / "cache"
    for k, v in {
        "VSERIES_ROOT": str(ws),
        "VSERIES_OFFLINE": "1",
        "VSERIES_CACHE": str(cache),
    }.items():
        monkeypatch.setenv(k, v)
    apply.apply()
    before = {e.name: e.path.read_bytes() for e in series.load()}
    v = Version(pin.version)
    version = f"{v.major}.{v.minor}.{v.micro + 1}"
    index.files[f"vllm-{version}.tar.gz"] = next_release(pristine, version)
    index.files[f"vllm-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"] = b"not a wheel"
    ap = argparse.ArgumentParser()
    rebasemod.add_parser(ap.add_subparsers(dest="verb"))
    args = ap.parse_args(["rebase", f"v{version}", "--commit", FULL, "--no-contracts"])
    assert rebasemod.main(args) == 0
    moved = pinmod.load(ws / "upstream.toml")
    assert (moved.tag, moved.commit) == (f"v{version}", FULL)
    assert git(ws, "ls-files", "-s", "vllm").split()[1] == FULL  # the gitlink followed
    assert {e.name: e.path.read_bytes() for e in series.load()} == before  # carried as they were
    assert [patchfile.subject(e.path) for e in series.load()] == [
        patchfile.subject(ws / "patches" / n) for n in before
    ]
    env = {
        **os.environ,
        "PYTHONPATH": str(ws),  # the copy's own vseries
        "VSERIES_ROOT": str(ws),
        "VSERIES_CACHE": str(cache),  # holds the new pin's source release, verified
        "VSERIES_OFFLINE": "1",
    }
    p = subprocess.run(
        [sys.executable, "-P", "-m", "vseries", "test", "--fast"],
        cwd=ws,
        env=env,
        capture_output=True,
        text=True,
    )
    tail = (p.stdout + p.stderr)[-4000:]
    assert p.returncode == 0, f"the fast tier fails on the rebased copy:\n{tail}"
    assert "workspace  passed" in p.stdout, tail
    left = re.search(r"fast: (\d+) tests marked slow left out", p.stdout)
    assert left and int(left.group(1)) > 0, "the fast tier leaves the slow tests out"
