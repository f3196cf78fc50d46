"""refresh: export the commits on top of the pin in vllm/ back into patches/ and the series.

Uses ``git format-patch`` with options that make the output depend only on the commits'
content (no commit ids, no git version signature, full blob ids, fixed diff settings), and
writes a file only when its bytes change: refreshing an unchanged series changes no file.
"""

import filecmp
import tempfile
from pathlib import Path

from vseries import am, git, series
from vseries import pin as pinmod
from vseries.errors import SeriesError
from vseries.workspace import Workspace

FORMAT = [
    "format-patch",
    "-k",
    "--zero-commit",
    "--no-signature",
    "--full-index",
    "--no-numbered",
    "--no-cover-letter",
    "--stat=80",
]


def export(vdir: Path, base: str, tip: str, out: Path) -> list[Path]:
    """format-patch ``base..tip`` into folder ``out``; returns the files, in order."""
    names = git.run(vdir, *FORMAT, "-o", str(out), f"{base}..{tip}")
    return [Path(n) for n in names.splitlines() if n]


# what a hand-resolved conflict leaves behind (git apply --reject, patch, merge tools)
LEFTOVERS = (".rej", ".orig")


def _refuse_conflict_leftovers(vdir: Path, base: str) -> None:
    """Refuse commits on ``base..HEAD`` that add a conflict's leftover file (``*.rej``,
    ``*.orig``): exported, it would go into a patch and upstream with it."""
    added = git.run(vdir, "diff", "--name-only", "--diff-filter=A", base, "HEAD").splitlines()
    left = [f for f in added if f.endswith(LEFTOVERS)]
    if not left:
        return
    first = git.run(
        vdir, "log", "-1", "--format=%h", "--diff-filter=A", f"{base}..HEAD", "--", left[0]
    )
    files = " ".join(left)
    raise SeriesError(
        "vllm/'s commits add files a resolved conflict leaves behind, which refresh would "
        "export into the patches:\n" + "\n".join(f"  {f}" for f in left),
        f"git -C vllm rm -q {files} && git -C vllm commit -q --fixup={first} && "
        f"GIT_SEQUENCE_EDITOR=true git -C vllm rebase -q -i --autosquash {base[:12]} && "
        "scripts/refresh.sh   # folds their removal into the commit that added them",
    )


def refresh(prune: bool = False, ws: Workspace | None = None) -> dict[str, list[str]]:
    """Rewrite patches/ and patches/series from vllm/'s commits on top of the pin.

    Options of series lines (contract=...) follow their patch by patch-id, else by name.

    Args:
        prune: allow dropping series entries whose commit is not on HEAD (without it such a
            refresh is refused: it usually means the wrong branch is checked out).
        ws: the workspace (default: the current one).

    Returns:
        {"added": [...], "changed": [...], "unchanged": [...], "removed": [...]} file names.

    Raises:
        SeriesError: vllm/ is missing, mid-am, dirty, on a detached HEAD, or its HEAD does not
            descend from the pin; a commit adds a conflict's leftover (*.rej, *.orig); a patch
            would be removed without ``prune``.
    """
    ws = ws or Workspace.current()
    pin = pinmod.load(ws.pin_file)
    vdir = ws.vllm
    git.require_checkout(vdir)
    git.require_clean(
        vdir,
        "refresh would not export (it exports commits only)",
        "git -C vllm add -A && git -C vllm commit -s   # a new patch; or "
        "git -C vllm commit --fixup=<commit> and git -C vllm rebase -i --autosquash to fold "
        "it into a patch; then scripts/refresh.sh",
    )
    if git.head_branch(vdir) is None:
        # e.g. right after `git am --continue` on apply's detached HEAD: exporting from there
        # would drop every patch that is not (yet) on it
        raise SeriesError(
            f"vllm/ HEAD is detached; refresh exports the branch {am.BRANCH}",
            f"{am.onto_branch(vdir)} && scripts/refresh.sh",
        )
    if not git.ok(vdir, "merge-base", "--is-ancestor", pin.commit, "HEAD"):
        raise SeriesError(
            f"vllm/ HEAD does not descend from the pin {pin.tag}",
            "scripts/apply.sh   # or scripts/rebase.sh for a new upstream",
        )
    _refuse_conflict_leftovers(vdir, pin.commit)
    fresh = not ws.series_file.exists()
    kept = sorted(p.name for p in ws.patches.glob("*.patch"))
    if fresh and kept:  # a lost series: a new one would lose its order's options
        raise SeriesError(
            f"patches/series is missing, but patches/ holds {kept}",
            "git checkout -- patches/series   # restore it",
        )
    # A series or patch file refresh cannot read is refused, not overwritten: it may be a
    # hand edit gone wrong. A listed file that is missing is what refresh writes.
    header, old = (
        ([], [])
        if fresh
        else (series.read(ws.series_file, ws)[0], series.load(ws, missing_ok=True))
    )
    by_name = {e.name: e for e in old}
    by_id = {}
    for e in old:
        if e.path.exists():
            by_id[git.patch_id(vdir, e.path.read_text(errors="replace"))] = e
    report = {"added": [], "changed": [], "unchanged": [], "removed": []}
    new_entries = []
    with tempfile.TemporaryDirectory() as tmp:
        exported = [
            (f, by_id.get(git.patch_id(vdir, f.read_text(errors="replace"))) or by_name.get(f.name))
            for f in export(vdir, pin.commit, "HEAD", Path(tmp))
        ]
        matched = {prev.name for _, prev in exported if prev}
        gone = [e for e in old if e.name not in matched]
        if gone and not prune:
            raise _would_drop(ws, gone)
        for f, prev in exported:
            new_entries.append(prev.moved(f.name) if prev else series.Entry(f.name))
            dest = ws.patches / f.name
            if dest.exists() and filecmp.cmp(f, dest, shallow=False):
                report["unchanged"].append(f.name)
            else:
                report["changed" if dest.exists() else "added"].append(f.name)
                dest.write_bytes(f.read_bytes())
    keep = {e.name for e in new_entries}
    for e in old:
        if e.name not in keep and e.path.exists():
            e.path.unlink()
            report["removed"].append(e.name)
    if fresh:
        header = series.HEADER
    series_changed = series.write(header, new_entries, ws.series_file)
    print(
        f"refresh: {len(new_entries)} patches; added {len(report['added'])}, "
        f"changed {len(report['changed'])}, unchanged "
        f"{len(report['unchanged'])}, removed {len(report['removed'])}"
        + ("; series rewritten" if series_changed else "; series unchanged")
    )
    for k in ("added", "changed", "removed"):
        for n in report[k]:
            print(f"  {k}: {n}")
    return report


def _would_drop(ws: Workspace, gone: list[series.Entry]) -> SeriesError:
    """The refusal to drop series entries that vllm/ HEAD has no commit for, with the
    command that fits: restore a missing file, apply a series that vllm/ is behind, or check
    out the branch that holds it."""
    missing = [e.name for e in gone if not e.path.exists()]
    held = [e.name for e in gone if e.path.exists()]
    branch = git.head_branch(ws.vllm)
    what = []
    if held:
        what.append(
            f"vllm/ HEAD ({branch}) has no commit for {', '.join(held)}; refresh would "
            "delete them from patches/"
        )
    if missing:
        what.append(
            f"patches/series names {', '.join(missing)}, which neither patches/ nor vllm/ "
            "HEAD holds; refresh would drop their lines"
        )
    restore = missing and series.restore_cmd(ws, ws.patches / missing[0])
    prune = "scripts/refresh.sh --prune to drop them on purpose"
    if restore:
        fix = f"{restore}   # restore it; or {prune}"
    elif missing:
        fix = "scripts/refresh.sh --prune   # drops their lines from patches/series"
    elif branch == am.BRANCH:
        fix = f"scripts/apply.sh   # put the series' patches into vllm/ first; or {prune}"
    else:
        fix = f"git -C vllm checkout {am.BRANCH}   # the branch that holds the series; or {prune}"
    return SeriesError("; ".join(what), fix)


def main(args) -> int:
    ws = Workspace.current()
    ws = ws.kept(args.line, "scripts/refresh.sh") if args.line else ws
    git.require_no_rebase_run(ws.rebase_state)
    with ws.hints():
        refresh(prune=args.prune, ws=ws)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser(
        "refresh",
        help="export vllm/'s commits on the pin into patches/",
        description="Export the commits on top of the pin in vllm/ (the branch you work on) "
        "into patches/ and patches/series, byte-stable: an unchanged series rewrites no "
        "file. Series options follow their patch.",
    )
    p.add_argument(
        "--prune",
        action="store_true",
        help="drop series entries that have no commit on vllm/'s HEAD (refused without it)",
    )
    p.add_argument(
        "--line",
        metavar="TAG",
        help="a kept line (lines/TAG/) instead of the main line: its tree "
        ".vseries/lines/TAG/vllm and its patches lines/TAG/patches",
    )
    p.set_defaults(func=main)
