"""materialise: make vllm/ a git checkout of the pinned upstream commit.

Two routes, tried in order (vseries.release does the work):
  git   -- a shallow fetch of just that commit from the upstream URL, bounded in time;
  sdist -- the verified PyPI source release of the same tag, committed once and made to stand
           in for the upstream commit id through ``refs/replace/<id>`` (git replace), so that
           ``git submodule status`` in the workspace stays clean and ``format-patch``/``am``
           work as on a real clone. The route used is recorded in the repository's config
           (``vseries.source``) and printed.
"""

import shutil
from pathlib import Path

from vseries import fetch, git, release
from vseries import pin as pinmod
from vseries.errors import SeriesError
from vseries.workspace import Workspace


def source_of(repo: Path) -> str:
    """The route a materialised tree came from (``vseries.source`` in its config)."""
    return git.run(repo, "config", "--get", "vseries.source", check=False) or "unknown"


def _empty(vdir: Path) -> None:
    """vllm/ back to the empty folder it was before a route started filling it."""
    shutil.rmtree(vdir, ignore_errors=True)
    vdir.mkdir(exist_ok=True)


def ensure(route: str = "auto", quiet: bool = False, ws: Workspace | None = None) -> Path:
    """Make sure ``vllm/`` is a git checkout in which the pinned commit resolves.

    Args:
        route: "auto" (git, then the source release), "git" or "sdist".
        quiet: say nothing when vllm/ is already there.
        ws: the workspace (default: the current one).

    Returns:
        The path of the checkout.

    Raises:
        SeriesError: vllm/ holds files that are not a checkout; the chosen route failed; the
            source release could not be fetched or verified.
    """
    ws = ws or Workspace.current()
    pin = pinmod.load(ws.pin_file)
    vdir = ws.vllm
    if git.is_repo(vdir):
        if git.rev(vdir, pin.commit) is None:
            raise SeriesError(
                f"{vdir} is a checkout, but the pinned commit {pin.commit[:12]} is not in it",
                f"mv {vdir} {vdir}.old && scripts/setup.sh   # a new vllm/ from the source "
                f"release; or git -C vllm fetch --depth 1 origin {pin.commit} (needs GitHub)",
            )
        if git.rev(vdir, f"refs/replace/{pin.commit}"):  # set up before gc was turned off
            _gc_off(vdir)
        if not quiet:
            print(f"materialise{ws.label}: {ws.rel(vdir)} present ({source_of(vdir)})")
        return vdir
    if vdir.exists() and any(vdir.iterdir()):
        raise SeriesError(
            f"{vdir} holds files but is not a git checkout; nothing was changed",
            f"mv {vdir} {vdir}.old && scripts/setup.sh",
        )
    if ws.line and git.is_repo(ws.main.vllm) and git.rev(ws.main.vllm, pin.commit):
        return _line_from_main(ws, pin.commit, pin.tag)
    # the pin is the source release's own commit (no remote has it): the git route cannot work
    own = not ws.line and pinmod.synthetic(ws.pin_file)
    if route == "git" and own:
        raise SeriesError(
            f"the pin {pin.commit[:12]} is the commit made from {pin.source.filename} "
            f"({ws.rel(ws.pin_file)}'s rebase-note): no git remote has it",
            "scripts/setup.sh   # without --source git: the verified source release",
        )
    if own and route == "auto":
        print(
            f"materialise: the pin is a commit made from {pin.source.filename} (no upstream "
            "git remote has it), so it is made here, not cloned"
        )
    if route in ("auto", "git") and not git.offline() and not ws.line and not own:
        try:
            by_git = release.submodule_by_git(ws.root, pin)
        except BaseException:  # Ctrl-C: never a half checkout for the next run to find
            _empty(vdir)
            raise
        if by_git:
            print(f"materialise: vllm/ from git at {pin.commit[:12]}")
            return vdir
        _empty(vdir)  # what a failed or timed-out git route wrote
        if route == "git":
            raise SeriesError(
                "the git route failed and --source git was asked for",
                "scripts/setup.sh   # without --source, falls back to PyPI",
            )
    tarball = fetch.fetch(pin.package, pin.source)
    vdir.mkdir(parents=True, exist_ok=True)
    try:
        release.repo_from_sdist(
            tarball,
            vdir,
            pin.commit,
            pin.tag,
            f"sdist {pin.source.filename} sha256={pin.source.sha256}",
        )
    except BaseException:
        _empty(vdir)  # never leave a half-built tree
        raise
    if ws.line:  # a kept line's own repository: not the submodule
        print(
            f"materialise{ws.label}: {ws.rel(vdir)} from the verified source release "
            f"{pin.source.filename}; HEAD {pin.commit[:12]} = tag {pin.tag}, made from its files"
        )
        return vdir
    # Register it as the submodule and move its .git under the superproject's modules/.
    git.run(ws.root, "submodule", "init", "vllm", check=False)
    git.run(ws.root, "submodule", "absorbgitdirs", "vllm", check=False)
    print(
        f"materialise: vllm/ from the verified source release {pin.source.filename} "
        f"(no git route); HEAD {pin.commit[:12]} = tag {pin.tag}, made from its files"
    )
    return vdir


def _line_from_main(ws: Workspace, commit: str, tag: str) -> Path:
    """A kept line's repository from the main line's vllm/, which holds the line's pinned
    commit (right after a rebase, or once both were materialised): a clone sharing its
    objects, with its replace refs and tags, detached at the commit. Nothing is downloaded."""
    vdir, main = ws.vllm, ws.main.vllm
    vdir.parent.mkdir(parents=True, exist_ok=True)
    try:
        git.run(vdir.parent, "clone", "-q", "--shared", "--no-checkout", str(main), vdir.name)
        refs = ["+refs/replace/*:refs/replace/*", "+refs/tags/*:refs/tags/*"]
        git.run(vdir, "fetch", "-q", str(main), *refs)
        git.run(vdir, "checkout", "-q", "--detach", commit)
        release.no_auto_gc(vdir)
        for b in git.run(vdir, "for-each-ref", "--format=%(refname:short)", "refs/heads").split():
            git.run(vdir, "branch", "-q", "-D", b)  # the main line's branches are not this line's
        git.run(vdir, "remote", "remove", "origin")
        git.run(vdir, "config", "vseries.source", f"the main line's vllm/ ({source_of(main)})")
    except BaseException:
        shutil.rmtree(vdir, ignore_errors=True)  # never leave a half-made tree
        raise
    where = ws.rel(vdir)
    print(f"materialise{ws.label}: {where} from the main line's vllm/; HEAD {commit[:12]} = {tag}")
    return vdir


def main(args) -> int:
    ensure(args.source)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser(
        "materialise",
        help="make vllm/ a checkout of the pinned commit",
        description="Make vllm/ a git checkout of the pinned upstream commit: a shallow git "
        "fetch, else the verified PyPI source release committed in its place. Does nothing "
        "when vllm/ is already there.",
    )
    p.add_argument(
        "--source",
        choices=("auto", "git", "sdist"),
        default="auto",
        help="git (shallow fetch), sdist (verified PyPI source release), or auto",
    )
    p.set_defaults(func=main)


def _gc_off(vdir: Path) -> None:
    """release.no_auto_gc for a tree set up before it existed, and its gc.log removed where
    that log is the failure it prevents (git would warn about it on every command)."""
    if git.run(vdir, "config", "--get", "gc.auto", check=False) == "0":
        return
    release.no_auto_gc(vdir)
    log = Path(git.run(vdir, "rev-parse", "--path-format=absolute", "--git-path", "gc.log"))
    if log.exists() and "bad object" in log.read_text(errors="replace"):
        log.unlink()
        print(
            f"materialise: {vdir.name}/ automatic gc turned off (it failed on the stand-in commit)"
        )
