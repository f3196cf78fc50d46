"""Materialise an upstream vLLM tree as a git repository at a given commit id.

Two routes, tried in order:
  git   -- a shallow fetch of just that commit from the upstream URL, bounded in time;
  sdist -- the verified PyPI source release of the same tag, committed once and made to stand
           in for the upstream commit id through ``refs/replace/<id>`` (git replace), so that
           ``git submodule status`` in the workspace stays clean and ``format-patch``/``am``
           work as on a real clone. The route used is recorded in the repository's config
           (``vseries.source``) and printed.
"""

import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from vseries import fetch, git, paths
from vseries import pin as pinmod
from vseries.errors import SeriesError

GIT_TIMEOUT_S = int(os.environ.get("VSERIES_GIT_TIMEOUT", "300"))
# Files a source release adds that the upstream repository does not track.
SDIST_ONLY = ("PKG-INFO", "setup.cfg", "vllm/_version.py")
IDENT = {
    "GIT_AUTHOR_NAME": "vLLM source release",
    "GIT_AUTHOR_EMAIL": "sdist@vseries.invalid",
    "GIT_COMMITTER_NAME": "vLLM source release",
    "GIT_COMMITTER_EMAIL": "sdist@vseries.invalid",
}


def source_of(repo: Path) -> str:
    """The route a materialised tree came from (``vseries.source`` in its config)."""
    return git.run(repo, "config", "--get", "vseries.source", check=False) or "unknown"


def _extract(tarball: Path, dest: Path) -> int:
    """Unpack a source release into dest (its single top folder stripped).

    Returns the mtime (Unix s) of pyproject.toml in the archive, used as the synthetic
    commit's date so that the same release always gives the same commit.
    """
    with tarfile.open(tarball) as tar:
        members = tar.getmembers()
        tops = {m.name.split("/", 1)[0] for m in members}
        if len(tops) != 1:
            raise SeriesError(f"{tarball} is not a source release (several top folders)")
        top = tops.pop()
        date = next((m.mtime for m in members if m.name == f"{top}/pyproject.toml"), 0)
        with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
            # filter="data": no absolute paths, no links out, files owned by the caller
            # (extracting as root with the archive's owner makes git refuse the repo).
            tar.extractall(tmp, filter="data")
            for item in Path(tmp, top).iterdir():
                shutil.move(str(item), dest / item.name)
    return int(date)


def repo_from_sdist(tarball: Path, dest: Path, commit: str, tag: str, note: str) -> None:
    """Build a git repository in ``dest`` (empty or absent) from a source release.

    The release is committed once (fixed identity, date from the archive), ``commit`` is made
    to resolve to that commit with ``refs/replace/<commit>``, an annotated ``tag`` points at
    ``commit``, and HEAD is detached at ``commit``.

    Raises:
        SeriesError: dest holds files, or the archive is not a source release.
    """
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise SeriesError(f"{dest} is not empty; will not unpack a source release over it")
    date = _extract(tarball, dest)
    for rel in SDIST_ONLY:
        (dest / rel).unlink(missing_ok=True)
    for info in dest.glob("*.egg-info"):
        shutil.rmtree(info)
    env = {**IDENT, "GIT_AUTHOR_DATE": f"{date} +0000", "GIT_COMMITTER_DATE": f"{date} +0000"}
    git.run(dest, "init", "-q")
    # -f: upstream force-adds a few files its own .gitignore matches (e.g. benchmark schemas).
    git.run(dest, "add", "-A", "-f")
    git.run(
        dest,
        "commit",
        "-q",
        "--no-verify",
        "-m",
        f"vLLM {tag} from source release {tarball.name}\n\n"
        f"Stands in for upstream commit {commit} through refs/replace/{commit}.",
        env=env,
    )
    synthetic = git.rev(dest, "HEAD")
    git.run(dest, "update-ref", f"refs/replace/{commit}", synthetic)
    git.run(dest, "tag", "-a", "-f", "-m", f"vLLM {tag}", tag, commit, env=env)
    git.run(dest, "checkout", "-q", "--detach", commit)
    git.run(dest, "branch", "-q", "-D", git.head_branch(dest) or "master", check=False)
    git.run(dest, "config", "vseries.source", note)


def _try_git(top: Path, pin: pinmod.Pin) -> bool:
    """Shallow-fetch the pinned commit as the submodule; False when the network says no."""
    print(
        f"materialise: trying git ({pin.repo}, only {pin.commit[:12]}, at most {GIT_TIMEOUT_S} s)"
    )
    try:
        p = subprocess.run(
            ["git", "-C", str(top), "submodule", "update", "--init", "--depth", "1", "vllm"],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
        )
    except subprocess.TimeoutExpired:
        print(f"materialise: git gave no answer in {GIT_TIMEOUT_S} s")
        return False
    if p.returncode != 0:
        errs = p.stderr.strip().splitlines() or ["?"]
        last = next((e for e in errs if e.startswith("fatal:")), errs[-1])
        print(f"materialise: git route failed ({last})")
        return False
    vdir = top / "vllm"
    git.run(vdir, "config", "vseries.source", f"git {pin.repo} @ {pin.commit}")
    git.run(vdir, "fetch", "-q", "--depth", "1", "origin", f"tag {pin.tag}", check=False)
    return True


def ensure(route: str = "auto", quiet: bool = False) -> Path:
    """Make sure ``vllm/`` is a git checkout in which the pinned commit resolves.

    Args:
        route: "auto" (git, then the source release), "git" or "sdist".
        quiet: say nothing when vllm/ is already there.

    Returns:
        The path of the checkout.

    Raises:
        SeriesError: vllm/ holds files that are not a checkout; the chosen route failed; the
            source release could not be fetched or verified.
    """
    pin = pinmod.load()
    top, vdir = paths.root(), paths.vllm_dir()
    if git.is_repo(vdir):
        if git.rev(vdir, pin.commit) is None:
            raise SeriesError(
                f"{vdir} is a checkout, but the pinned commit {pin.commit[:12]} is not in it",
                f"git -C vllm fetch --depth 1 origin {pin.commit}   # or move vllm/ away and "
                "run scripts/setup.sh",
            )
        if not quiet:
            print(f"materialise: vllm/ present ({source_of(vdir)})")
        return vdir
    if vdir.exists() and any(vdir.iterdir()):
        raise SeriesError(
            f"{vdir} holds files but is not a git checkout; nothing was changed",
            f"mv {vdir} {vdir}.old && scripts/setup.sh",
        )
    if route in ("auto", "git") and os.environ.get("VSERIES_OFFLINE") != "1":
        if _try_git(top, pin):
            print(f"materialise: vllm/ from git at {pin.commit[:12]}")
            return vdir
        if route == "git":
            raise SeriesError(
                "the git route failed and --source git was asked for",
                "scripts/setup.sh   # without --source, falls back to PyPI",
            )
    tarball = fetch.fetch(pin.package, pin.source)
    vdir.mkdir(exist_ok=True)
    try:
        repo_from_sdist(
            tarball,
            vdir,
            pin.commit,
            pin.tag,
            f"sdist {pin.source.filename} sha256={pin.source.sha256}",
        )
    except BaseException:
        shutil.rmtree(vdir, ignore_errors=True)  # never leave a half-built tree
        vdir.mkdir(exist_ok=True)
        raise
    # Register it as the submodule and move its .git under the superproject's modules/.
    git.run(top, "submodule", "init", "vllm", check=False)
    git.run(top, "submodule", "absorbgitdirs", "vllm", check=False)
    print(
        f"materialise: vllm/ from the verified source release {pin.source.filename} "
        f"(no git route); HEAD {pin.commit[:12]} = {pin.tag} via git replace"
    )
    return vdir
