"""An upstream release as a commit in vllm/: by git when upstream is reachable, else from its
verified PyPI source release.

Both materialise (the pin, into an empty vllm/) and rebase (a newer release, into the existing
vllm/) turn a source release into the same commit: the release's files (less the sdist-only
ones), a fixed identity, the archive's date, and a message naming the upstream id; that commit
is made to stand in for the upstream commit id through ``refs/replace/<id>``, and an annotated
tag names it. The same release therefore gives the same commit id on every machine.
"""

import re
import shutil
import tarfile
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from vseries import fetch, git
from vseries import pin as pinmod
from vseries.errors import SeriesError

# Files a source release adds that the upstream repository does not track.
SDIST_ONLY = ("PKG-INFO", "setup.cfg", "vllm/_version.py")
IDENT = {
    "GIT_AUTHOR_NAME": "vLLM source release",
    "GIT_AUTHOR_EMAIL": "sdist@vseries.invalid",
    "GIT_COMMITTER_NAME": "vLLM source release",
    "GIT_COMMITTER_EMAIL": "sdist@vseries.invalid",
}
SHA1 = re.compile(r"^[0-9a-f]{40}$")
TAG = re.compile(r"^v\d+(\.\d+)*\S*$")


@dataclass
class Release:
    """A release materialised in vllm/ (what a rebase moves the pin to).

    Attributes:
        base: the id that resolves to the release in vllm/ (the upstream id when it is a
            full one, else the synthetic commit's id).
        synthetic: the commit made from the source release (None on the git route).
        upstream: upstream's id of the tag, full (40 hex) or short (from vllm/_version.py).
        full: whether ``upstream`` is a full id.
        short_in_sdist: the short id the source release names (None on the git route).
        refs: refs this materialising created in vllm/ (removed again by an abort).
        note: where it came from ("sdist <file> sha256=...", "git <url> tag <tag>").
        how: the sentence the rebase report says about it.
        tag, source, wheel, torch, triton: the pin fields of the release; source and wheel
            as (file name, sha256).
        triton_known: False when torch changed and its Triton could not be read.
    """

    base: str
    synthetic: str | None
    upstream: str
    full: bool
    short_in_sdist: str | None = None
    refs: list[str] = field(default_factory=list)
    note: str = ""
    how: str = ""
    tag: str = ""
    source: tuple[str, str] = ("", "")
    wheel: tuple[str, str] = ("", "")
    torch: str = ""
    triton: str = ""
    triton_known: bool = True

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Release":
        return cls(**{**d, "source": tuple(d["source"]), "wheel": tuple(d["wheel"])})


def unpack(tarball: Path, dest: Path) -> int:
    """Unpack a source release into dest (its single top folder stripped), without the files
    only a source release has.

    Returns the mtime (Unix s) of pyproject.toml in the archive, used as the synthetic
    commit's date so that the same release always gives the same commit.

    Raises:
        SeriesError: the archive is not a source release (several top folders).
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


def _short_id(tree: Path) -> str | None:
    """The commit id a source release names in its vllm/_version.py (setuptools-scm's)."""
    ver = tree / "vllm" / "_version.py"
    m = re.search(
        r"__commit_id__\s*=.*?['\"]g?([0-9a-f]{7,40})['\"]",
        ver.read_text() if ver.exists() else "",
    )
    return m.group(1) if m else None


def _commit(repo: Path, tree: Path, tarball: Path, tag: str, upstream: str, date: int) -> str:
    """Commit the unpacked release in ``tree`` as a root commit of ``repo`` (its own index,
    HEAD and branches untouched); returns the commit id."""
    for rel in SDIST_ONLY:
        (tree / rel).unlink(missing_ok=True)
    for info in tree.glob("*.egg-info"):
        shutil.rmtree(info)
    gitdir = Path(git.run(repo, "rev-parse", "--absolute-git-dir"))
    with tempfile.TemporaryDirectory(prefix="vseries-index-") as tmp:
        env = {
            **IDENT,
            "GIT_AUTHOR_DATE": f"{date} +0000",
            "GIT_COMMITTER_DATE": f"{date} +0000",
            "GIT_INDEX_FILE": str(Path(tmp, "index")),
        }
        side = ["--git-dir", str(gitdir), "--work-tree", str(tree)]
        # -f: upstream force-adds a few files its own .gitignore matches (benchmark schemas)
        git.run(repo, *side, "add", "-A", "-f", env=env)
        tree_id = git.run(repo, *side, "write-tree", env=env)
        msg = f"vLLM {tag} from source release {tarball.name}\n\n" + (
            f"Stands in for upstream commit {upstream} through refs/replace/{upstream}."
            if SHA1.match(upstream)
            else f"Stands in for upstream commit {upstream} (short id from "
            "vllm/_version.py; a short id cannot be a refs/replace/ target)."
        )
        return git.run(repo, "commit-tree", tree_id, "-m", msg, env=env)


def repo_from_sdist(tarball: Path, dest: Path, commit: str, tag: str, note: str) -> None:
    """Build a git repository in ``dest`` (empty or absent) from a source release.

    The release is committed once (see the module doc), ``commit`` is made to resolve to it
    with ``refs/replace/<commit>``, an annotated ``tag`` points at ``commit``, HEAD is
    detached at ``commit`` and the route is recorded as ``vseries.source`` = note.

    Raises:
        SeriesError: dest holds files, or the archive is not a source release.
    """
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise SeriesError(f"{dest} is not empty; will not unpack a source release over it")
    git.run(dest, "init", "-q")
    date = unpack(tarball, dest)
    synthetic = _commit(dest, dest, tarball, tag, commit, date)
    git.run(dest, "update-ref", f"refs/replace/{commit}", synthetic)
    env = {**IDENT, "GIT_COMMITTER_DATE": f"{date} +0000"}
    git.run(dest, "tag", "-a", "-f", "-m", f"vLLM {tag}", tag, commit, env=env)
    git.run(dest, "checkout", "-q", "-f", "--detach", commit)
    git.run(dest, "config", "vseries.source", note)
    no_auto_gc(dest)


@dataclass(frozen=True)
class StandIn:
    """A commit made from a source release (``_commit``) that a base resolves to.

    Attributes:
        commit: the id it was asked for (what a branch on it records as its parent).
        synthetic: its own id (a root commit: no upstream history behind it).
        tag: the release tag it was made for, e.g. "v0.34.0".
        upstream: upstream's id of that tag as the release names it (full or short).
    """

    commit: str
    synthetic: str
    tag: str
    upstream: str


MADE = re.compile(
    r"^vLLM (\S+) from source release \S+\n\nStands in for upstream commit ([0-9a-f]+)"
)


def stands_in(repo: Path, commit: str) -> StandIn | None:
    """What ``commit`` is when it resolves in repo to a commit made from a source release
    (itself, or through ``refs/replace/<commit>``); None for a commit of upstream's history."""
    synthetic = git.rev(repo, f"refs/replace/{commit}") or git.rev(repo, commit)
    if not synthetic:
        return None
    head = git.run(repo, "log", "-1", "--format=%P%x00%ae%x00%B", synthetic, check=False)
    parents, _, rest = head.partition("\x00")
    email, _, message = rest.partition("\x00")
    m = MADE.match(message)
    if parents or email != IDENT["GIT_AUTHOR_EMAIL"] or not m:
        return None
    return StandIn(commit, synthetic, m.group(1), m.group(2))


def no_auto_gc(repo: Path) -> None:
    """Turn git's automatic gc off in ``repo``, where a commit stands in for upstream's through
    ``refs/replace/``. gc packs with replacements ignored: HEAD, the release tag and the base
    worktrees name an id no object has, so ``git gc --auto`` (run by commit, am, rebase) fails
    with "fatal: bad object" and leaves gc.log, whose warning every later git command in the
    tree then prints. A manual ``git gc`` fails the same way; nothing in the workspace needs it."""
    git.run(repo, "config", "gc.auto", "0")
    git.run(repo, "config", "maintenance.auto", "false")


def add_release(repo: Path, tarball: Path, tag: str, commit: str | None, note: str) -> Release:
    """Add a source release to an existing repository as one more root commit, leaving the
    work tree, index, HEAD and branches alone.

    The commit is the one repo_from_sdist makes of the same release. A full 40-hex
    ``commit`` is made to resolve to it through ``refs/replace/<commit>``; a short id (what
    the source release's vllm/_version.py holds) cannot be a replace target, so then the
    release is known by the synthetic commit's own id.

    Args:
        repo: a git work tree (vllm/).
        tarball: the verified source release.
        tag: the release tag, e.g. "v0.22.0"; an annotated tag of that name is made.
        commit: the tag's upstream commit id (40 hex), or None to use the short id from the
            source release.
        note: where the release came from.

    Raises:
        SeriesError: the archive is not a source release; ``commit`` contradicts the short id
            the release names; the tag or replace ref exists and names another tree.
    """
    with tempfile.TemporaryDirectory(prefix="vseries-release-") as tmp:
        tree = Path(tmp, "tree")
        tree.mkdir()
        date = unpack(tarball, tree)
        short = _short_id(tree)
        if commit and short and not commit.startswith(short):
            raise SeriesError(
                f"--commit {commit} does not match the id {short} that "
                f"{tarball.name} names in vllm/_version.py"
            )
        upstream = commit or short
        if not upstream:
            raise SeriesError(
                f"{tarball.name} names no commit id (vllm/_version.py), and none was given",
                f"scripts/rebase.sh {tag} --commit <40-hex id>",
            )
        synthetic = _commit(repo, tree, tarball, tag, upstream, date)
    tree_id = git.run(repo, "rev-parse", f"{synthetic}^{{tree}}")
    full = bool(SHA1.match(upstream))
    base, made = (upstream if full else synthetic), []
    if full:
        have = git.rev(repo, upstream)
        if have is None:
            git.run(repo, "update-ref", f"refs/replace/{upstream}", synthetic)
            made.append(f"refs/replace/{upstream}")
            no_auto_gc(repo)
        elif git.run(repo, "rev-parse", f"{have}^{{tree}}") != tree_id:
            raise SeriesError(
                f"{upstream[:12]} already resolves in {repo} to a different tree "
                f"than {tarball.name}",
                f"git -C vllm replace -l {upstream}",
            )
    have_tag = git.rev(repo, f"refs/tags/{tag}")
    if have_tag is None:
        env = {**IDENT, "GIT_COMMITTER_DATE": f"{date} +0000"}
        git.run(repo, "tag", "-a", "-m", f"vLLM {tag}", tag, base, env=env)
        made.append(f"refs/tags/{tag}")
    elif git.run(repo, "rev-parse", f"{have_tag}^{{tree}}") != tree_id:
        raise SeriesError(
            f"vllm/ already has a tag {tag} on another tree than {tarball.name}",
            f"git -C vllm tag -d {tag}   # if it is stale; then run it again",
        )
    return Release(base, synthetic, upstream, full, short, made, note)


def submodule_by_git(top: Path, pin: pinmod.Pin) -> bool:
    """Shallow-fetch the pinned commit as the submodule vllm/ of ``top`` (bounded by
    git.NETWORK_TIMEOUT_S); False when the network says no."""
    limit = git.NETWORK_TIMEOUT_S
    print(f"materialise: trying git ({pin.repo}, only {pin.commit[:12]}, at most {limit} s)")
    r = git.call(top, "submodule", "update", "--init", "--depth", "1", "vllm", timeout=limit)
    if r.code == 124:
        print(f"materialise: git gave no answer in {limit} s")
        return False
    if not r.ok:
        errs = r.err.strip().splitlines() or ["?"]
        last = next((e for e in errs if e.startswith("fatal:")), errs[-1])
        print(f"materialise: git route failed ({last})")
        return False
    vdir = top / "vllm"
    git.run(vdir, "config", "vseries.source", f"git {pin.repo} @ {pin.commit}")
    git.run(vdir, "fetch", "-q", "--depth", "1", "origin", f"tag {pin.tag}", check=False)
    return True


def tag_by_git(vdir: Path, repo_url: str, tag: str) -> Release | None:
    """Fetch ``tag`` from upstream into vdir (bounded by git.NETWORK_TIMEOUT_S); None when
    unreachable."""
    had = git.rev(vdir, f"refs/tags/{tag}")
    limit = git.NETWORK_TIMEOUT_S
    spec = f"refs/tags/{tag}:refs/tags/{tag}"
    r = git.call(vdir, "fetch", "-q", "--depth", "1", repo_url, spec, timeout=limit)
    if r.code == 124:
        print(f"rebase: git gave no answer in {limit} s")
        return None
    if not r.ok:
        print(f"rebase: git route failed ({(r.err.strip().splitlines() or ['?'])[-1]})")
        return None
    commit = git.rev(vdir, f"refs/tags/{tag}")
    refs = [] if had else [f"refs/tags/{tag}"]
    return Release(commit, None, commit, True, None, refs, f"git {repo_url} tag {tag}")


def _torch_of(tarball: Path, package: str, version: str) -> str | None:
    """The torch version a source release's requirements/cuda.txt pins, or None."""
    with tarfile.open(tarball) as tar:
        try:
            f = tar.extractfile(f"{package}-{version}/requirements/cuda.txt")
        except KeyError:
            return None
        reqs = f.read().decode(errors="replace") if f else ""
    m = re.search(r"^torch==([\w.]+)", reqs, re.M)
    return m.group(1) if m else None


def newer(vdir: Path, old: pinmod.Pin, tag: str, commit: str | None, route: str) -> Release:
    """Materialise release ``tag`` into vdir (git when ``route`` allows and upstream answers,
    else its verified source release) and look up its pin fields on the index: the source
    release and wheel with their sha256, the torch its requirements pin and that torch's
    Triton.

    Args:
        old: the current pin (its package, upstream URL, torch and Triton).
        commit: the tag's full upstream id, when known (checked against the source release).
        route: "auto", "git" or "sdist".

    Raises:
        SeriesError: not a release tag; the index lists no source release or wheel of it;
            ``route`` is "git" and git failed; the source release does not verify.
    """
    if not TAG.match(tag):
        raise SeriesError(
            f"{tag!r} is not a release tag (vX.Y.Z): PyPI knows releases by "
            "version, so the offline route needs the tag",
            "scripts/rebase.sh v0.22.0 [--commit <40-hex id of the tag>]",
        )
    version = tag.removeprefix("v")
    sdist, wheel = fetch.release_files(old.package, version)
    if wheel is None:
        raise SeriesError(
            f"the index lists no manylinux x86_64 wheel of {old.package} "
            f"{version}; the pin needs one for its prebuilt kernels"
        )
    offline = route == "sdist" or git.offline()
    rel = None if offline else tag_by_git(vdir, old.repo, tag)
    if rel is None and route == "git":
        raise SeriesError(
            "the git route failed and --source git was asked for",
            f"scripts/rebase.sh {tag}   # without --source, falls back to PyPI",
        )
    tarball = fetch.fetch(old.package, sdist)
    if rel is None:
        rel = add_release(
            vdir, tarball, tag, commit, f"sdist {sdist.filename} sha256={sdist.sha256}"
        )
        rel.how = f"verified source release {sdist.filename} (no git route); commit id " + (
            f"{rel.upstream} given with --commit, checked against the id "
            f"{rel.short_in_sdist} in its vllm/_version.py"
            if commit
            else f"taken from its vllm/_version.py: only the short id "
            f"{rel.upstream} is known, so the pin records the synthetic "
            f"commit {rel.base[:12]}, and so does the gitlink (pass "
            "--commit <the tag's full 40-hex id> to record the real one)"
        )
    else:
        rel.how = rel.note
    torch = _torch_of(tarball, old.package, version) or old.torch
    triton = old.triton if torch == old.torch else (fetch.triton_of(torch) or old.triton)
    rel.tag = tag
    rel.source = (sdist.filename, sdist.sha256)
    rel.wheel = (wheel.filename, wheel.sha256)
    rel.torch, rel.triton = torch, triton
    rel.triton_known = torch == old.torch or triton != old.triton
    return rel
