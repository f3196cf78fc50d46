"""apply: reset vllm/ to the pin and apply patches/series with ``git am -3``.

One commit per patch on the branch ``series``. Idempotent: when the branch already holds
exactly the series (same patch-ids and commit messages) on the pin and the tree is clean,
nothing is done; a reworded patch (same diff, new message) is applied again.
Atomic: patches are applied on a detached HEAD at the pin; on any failure the am is aborted
and vllm/ returns to the HEAD (and uncommitted work) it had. Uncommitted work, or commits
that are not in the series, are refused unless --force, which first keeps them under
``refs/vseries/backup/<time>`` and in ``git stash``.
"""

import time
from collections.abc import Callable
from pathlib import Path

from vseries import git, materialise, patchfile, series
from vseries import pin as pinmod
from vseries.am import (
    AM_ENV,
    BRANCH,
    am,
    elsewhere,
    explain,
    onto_branch,
    reset_would_lose,
    wanted_ids,
)
from vseries.am import tips as am_tips
from vseries.errors import SeriesError
from vseries.workspace import Workspace


def _edited_patches(
    vdir: Path, pinned: str, tips: list[str], want: list[str], entries: list[series.Entry]
) -> list[str]:
    """Series files whose vllm/ commit (same subject) has another diff: the file was edited."""
    wanted_by_subject = {}
    for e, pid in zip(entries, want, strict=True):
        subject = patchfile.message(e.path.read_text(errors="replace")).split("\n", 1)[0]
        wanted_by_subject[subject] = (e.name, pid)
    edited = []
    for tip in tips:
        for c, pid in git.commit_patch_ids(vdir, pinned, tip):
            name, want_pid = wanted_by_subject.get(
                git.run(vdir, "log", "-1", "--format=%s", c), (None, None)
            )
            if name and pid != want_pid and name not in edited:
                edited.append(name)
    return edited


def holds_series(vdir: Path, pinned: str, want: list[str], entries: list[series.Entry]) -> bool:
    """True when HEAD is the pin + exactly the series: the same patch-ids and commit messages."""
    if not git.ok(vdir, "merge-base", "--is-ancestor", pinned, "HEAD"):
        return False
    held = git.commit_patch_ids(vdir, pinned, "HEAD")
    return [pid for _, pid in held] == want and all(
        git.same_message(
            git.run(vdir, "log", "-1", "--format=%B", c),
            patchfile.message(e.path.read_text(errors="replace")),
        )
        for (c, _), e in zip(held, entries, strict=True)
    )


def refuse(
    at_risk: list[str], dirty: list[str], edited: list[str], onto: str | None = None
) -> None:
    """Raise the SeriesError of work that applying the series would drop, with the command
    that keeps it (refresh, commit) or drops it after a backup (--force); ``onto``: the
    command that first puts a detached HEAD back on the branch (refresh exports a branch)."""
    if edited and not dirty:
        hint = (
            "scripts/apply.sh --force   # apply the edited patch files (vllm/'s commits are "
            "kept under refs/vseries/backup/); or scripts/refresh.sh to overwrite them "
            "with vllm/'s version"
        )
    else:
        hint = (
            "git -C vllm add -A && git -C vllm commit -s && scripts/refresh.sh   # keep "
            "it (untracked files too) as a patch; "
            if dirty
            else f"{onto + ' && ' if onto else ''}scripts/refresh.sh   # export your commits "
            "into patches/ first; "
        ) + "or scripts/apply.sh --force   # keeps a backup ref, then resets"
    raise SeriesError(
        "vllm/ holds work that applying the series would drop:\n"
        + "\n".join(f"  {x}" for x in at_risk)
        + "".join(f"\n  (patches/{n} changed since vllm/ was applied)" for n in edited),
        hint,
    )


def keep_backups(vdir: Path, tips: list[str], dirty: list[str]) -> tuple[str | None, list[str]]:
    """--force: each tip under ``refs/vseries/backup/<time>``, uncommitted work stashed and
    kept under ``...-worktree``. Returns (the stash commit or None, the backup refs)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    backups = []
    for i, tip in enumerate(tips):
        ref = f"refs/vseries/backup/{stamp}" + (f"-{i}" if i else "")
        git.run(vdir, "update-ref", ref, tip)
        backups.append(ref)
        print(f"apply: backup of {tip[:12]} kept as {ref}")
    if not dirty:
        return None, backups
    git.run(
        vdir,
        "stash",
        "push",
        "--include-untracked",
        "-m",
        f"vseries apply --force backup {stamp}",
        env=AM_ENV,
    )
    stash = git.rev(vdir, "stash@{0}")
    git.run(vdir, "update-ref", f"refs/vseries/backup/{stamp}-worktree", stash)
    backups.append(f"refs/vseries/backup/{stamp}-worktree")
    print(
        f"apply: uncommitted work stashed (git -C vllm stash show -p {stash[:12]}) "
        f"and kept as refs/vseries/backup/{stamp}-worktree"
    )
    return stash, backups


class _LeftOpen(SeriesError):
    """A patch stopped with --keep-conflict: the am session stays open, nothing rolls back."""


def _apply_entries(
    vdir: Path,
    pin: pinmod.Pin,
    entries: list[series.Entry],
    keep_conflict: bool,
    force: bool,
    roll_back: Callable[[], str],
) -> list[str]:
    """``git am`` each patch on a detached HEAD at the pin. A patch that does not apply:
    roll_back() (or, with keep_conflict, the am session left open) and SeriesError."""
    git.run(vdir, "checkout", "-q", "--detach", pin.commit)
    applied = []
    for e in entries:
        out = am(vdir, e.path)
        wrong, renamed = ("", False) if git.in_progress(vdir) else elsewhere(vdir, e.path)
        if renamed:  # a file renamed in the pin's history: followed, and said
            print(f"apply: {e.name}:\n{wrong}, renamed in the pin; scripts/refresh.sh updates it")
            wrong = ""
        if not git.in_progress(vdir) and not wrong:
            applied.append(git.rev(vdir, "HEAD"))
            continue
        why = wrong or explain(vdir, e.path, out)
        if keep_conflict and not wrong:
            # One am session for this patch and the ones after it, so that am --continue
            # applies the rest of the series too.
            git.run(vdir, "am", "--abort", check=False)
            rest = [x.path for x in entries[entries.index(e) :]]
            am(vdir, rest)
            raise _LeftOpen(
                f"patch {e.name} does not apply; the am session is left open in vllm/ with it "
                f"and the {len(rest) - 1} patches after it:\n{why}",
                "fix the conflicts in vllm/ (where nothing of the patch applied: git -C vllm am "
                "--show-current-patch=diff | git -C vllm apply --reject, then fix the .rej "
                "hunks and delete the .rej files), git -C vllm add -A (new files of the patch "
                "are untracked until then), git -C vllm am --continue (applies the rest), "
                "then git -C vllm checkout -B series && scripts/refresh.sh "
                f"(or git -C vllm am --abort, then scripts/apply.sh{' --force' if force else ''})",
            )
        back = roll_back()
        if wrong:
            raise SeriesError(
                f"patch {e.name} names files that vllm/ never had; {back}:\n{why}",
                f"fix the diff --git, ---, +++ paths in patches/{e.name} (or git checkout -- "
                f"patches/{e.name}), then scripts/apply.sh",
            )
        raise SeriesError(
            f"patch {e.name} does not apply on {pin.tag} + the patches before it; {back}:\n{why}",
            "scripts/apply.sh --keep-conflict"
            + (" --force" if force else "")
            + "   # stop at the conflict and fix it by hand",
        )
    return applied


def apply(
    force: bool = False, keep_conflict: bool = False, ws: Workspace | None = None
) -> list[str]:
    """Apply the series on the pin. Returns the commit ids of the applied patches.

    Args:
        force: drop uncommitted work and commits outside the series, after backing them up.
        keep_conflict: on a failing patch, leave the ``git am`` session open for a manual fix
            instead of rolling back.
        ws: the workspace (default: the current one).

    Raises:
        SeriesError: a malformed series or patch; an unfinished am/rebase in vllm/; uncommitted
            work or foreign commits without --force; a patch that does not apply (vllm/ is
            back as it was, unless keep_conflict).
    """
    ws = ws or Workspace.current()
    pin = pinmod.load(ws.pin_file)
    vdir = materialise.ensure(quiet=True, ws=ws)
    entries = series.load(ws)
    git.require_checkout(vdir)
    pinned = pin.commit
    want = wanted_ids(vdir, entries)
    dirty = git.dirty(vdir)
    branch, head = git.head_branch(vdir), git.rev(vdir, "HEAD")
    if branch == BRANCH and not dirty and holds_series(vdir, pinned, want, entries):
        held = f"{len(want)} patches on {pin.tag}"
        print(f"apply: {ws.rel(vdir)}/ already holds the series ({held}); nothing changed")
        return git.run(vdir, "rev-list", "--reverse", f"{pinned}..HEAD").split()

    tips = am_tips(vdir)
    at_risk = [f"uncommitted: {d}" for d in dirty[:10]]
    at_risk += [f"commit not in the series: {c}" for c in reset_would_lose(vdir, pinned, want)]
    if at_risk and not force:
        edited = _edited_patches(vdir, pinned, tips, want, entries)
        refuse(at_risk, dirty, edited, None if branch else onto_branch(vdir))
    stash, backups = keep_backups(vdir, tips, dirty) if at_risk else (None, [])

    orig = branch or head
    rolled_back = []

    def roll_back() -> str:
        """vllm/ back to the HEAD and uncommitted work it had; says so."""
        git.run(vdir, "am", "--abort", check=False)
        git.run(vdir, "checkout", "-q", "-f", orig)
        restored = not stash or git.ok(vdir, "stash", "pop", "-q")
        if restored and backups:  # vllm/ is back to what they saved: they would only pile up
            for ref in backups:
                git.run(vdir, "update-ref", "-d", ref, check=False)
            print(f"apply: vllm/ restored, so the backup refs are dropped ({', '.join(backups)})")
        rolled_back.append(orig)
        return f"vllm/ is back as it was ({orig[:12] if orig == head else orig})"

    try:
        applied = _apply_entries(vdir, pin, entries, keep_conflict, force, roll_back)
    except _LeftOpen:
        raise
    except BaseException as stop:  # Ctrl-C, or a git command that died half-way
        if rolled_back:
            raise
        again = "scripts/apply.sh" + (" --force" if force else "")
        try:
            back = roll_back()
        except (KeyboardInterrupt, SeriesError) as e:
            if isinstance(stop, SeriesError):
                raise stop from None  # one cause stops both (a stale lock): its fix first
            raise SeriesError(
                "apply interrupted, and putting vllm/ back failed too: "
                + (e.what if isinstance(e, SeriesError) else "interrupted again"),
                f"git -C vllm am --abort; git -C vllm checkout -f {orig}"
                + ("; git -C vllm stash pop" if stash else "")
                + f"; then {again}",
            ) from None
        if isinstance(stop, KeyboardInterrupt):
            raise SeriesError(f"apply interrupted; {back}", again) from None
        if isinstance(stop, SeriesError):
            raise SeriesError(f"apply stopped: {stop.what}\n{back}", stop.fix or again) from None
        raise  # a bug: its traceback, with vllm/ put back
    git.run(vdir, "checkout", "-q", "-B", BRANCH)
    print(f"apply: {len(applied)} patches applied on {pin.tag} ({pinned[:12]}), branch {BRANCH}:")
    for c in applied:
        print("  " + git.run(vdir, "log", "-1", "--format=%h %s", c))
    return applied


def main(args) -> int:
    ws = Workspace.current()
    ws = ws.kept(args.line, "scripts/apply.sh") if args.line else ws
    git.require_no_rebase_run(ws.rebase_state)
    with ws.hints():
        apply(force=args.force, keep_conflict=args.keep_conflict, ws=ws)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser(
        "apply",
        help="reset vllm/ to the pin and apply patches/series",
        description="Reset vllm/ to the pin and apply patches/series with git am -3, one "
        "commit per patch on the branch series. Atomic (a failing patch rolls vllm/ back), "
        "idempotent, and it refuses to drop uncommitted work or commits outside the series "
        "unless --force (which keeps a backup ref first).",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="drop uncommitted work and commits outside the series, after a backup",
    )
    p.add_argument(
        "--keep-conflict",
        action="store_true",
        help="leave a failing git am open for a manual fix instead of rolling back",
    )
    p.add_argument(
        "--line",
        metavar="TAG",
        help="a kept line (lines/TAG/) instead of the main line: its tree "
        ".vseries/lines/TAG/vllm and its patches lines/TAG/patches",
    )
    p.set_defaults(func=main)
