"""The stop on lines a patch would add twice, taken up again: ``--continue`` (the commit
as it is on vllm/ HEAD, changed by hand or not, emptied or taken off HEAD) and ``--continue
--drop-repeats`` (the repeated lines and statements taken out of the commit for you).

Every way out of the stop ends in a decision: carried (as it is, changed by hand, or
without its repeats), upstreamed (nothing of the patch is left once the lines the new
release already has are out), or dropped (the commit was taken out by hand with more in it).
"""

from pathlib import Path

from vseries import git
from vseries.am import AM_ENV
from vseries.errors import SeriesError
from vseries.rebase import diffs, engine, evidence
from vseries.rebase.decide import decide
from vseries.rebase.evidence import Evidence
from vseries.rebase.state import Row, State, Store
from vseries.workspace import Workspace


def _show(vdir: Path, rev: str, path: str) -> str | None:
    r = git.call(vdir, "show", f"{rev}:{path}")
    return r.out if r.ok else None


def _spans(found: list[diffs.Repeat]) -> dict[str, list[tuple[int, int]]]:
    out: dict[str, list[tuple[int, int]]] = {}
    for r in found:
        out.setdefault(r.path, []).append((r.first, r.last))
    return out


def stopped_repeats(vdir: Path, st: State, row: Row, text: str) -> list[diffs.Repeat]:
    """The repeats of the commit the stop left (``row.new``, still in vllm/'s objects)."""
    replayed = git.run(vdir, "show", "--format=", "--full-index", "-M", row.new)
    return evidence.repeats(vdir, text, replayed, row.old, row.new, (st.old.commit, st.new.base))


def nothing_left(vdir: Path, base: str, commit: str, found: list[diffs.Repeat]) -> bool:
    """True when ``commit`` without its repeats changes nothing on ``base``."""
    spans = _spans(found)
    for path in git.run(vdir, "diff", "--name-only", "--no-renames", base, commit).split():
        text = _show(vdir, commit, path)
        if (
            path not in spans
            or text is None
            or diffs.without(text, spans[path]) != (_show(vdir, base, path) or "")
        ):
            return False
    return True


def drop(vdir: Path, st: State, row: Row, found: list[diffs.Repeat]) -> None:
    """Take the repeated lines and statements out of the stopped commit: amend it, or, when
    nothing is left, take it off HEAD (HEAD back at the last decision).

    Raises:
        SeriesError: HEAD is not the commit the stop left, or vllm/ has uncommitted changes.
    """
    if git.rev(vdir, "HEAD") != row.new or git.dirty(vdir):
        raise SeriesError(
            "--drop-repeats takes the repeated lines out of the commit the stop left on vllm/ "
            "HEAD, and vllm/ has changed since (a new commit or uncommitted changes)",
            "scripts/rebase.sh --continue   # with vllm/ as it is now; or git -C vllm reset "
            f"-q --hard {row.new[:12]} and --continue --drop-repeats again",
        )
    for path, spans in _spans(found).items():
        f = vdir / path
        with f.open(newline="") as fh:
            text = fh.read()
        with f.open("w", newline="") as fh:
            fh.write(diffs.without(text, spans))
    if git.ok(vdir, "diff", "--quiet", st.head):
        git.run(vdir, "checkout", "-q", "-f", "--detach", st.head)
        return
    git.run(vdir, "commit", "-q", "-a", "--amend", "--no-edit", "--no-verify", env=AM_ENV)


def settle(vdir: Path, st: State, row: Row) -> None:
    """A --continue with uncommitted changes in vllm/ (an amend that git refused because it
    would empty the commit, or edits not yet committed): changes that leave nothing of the
    patch take its commit off HEAD; any other changes are folded into the commit.

    Raises:
        SeriesError: uncommitted changes while the patch's commit is no longer on HEAD.
    """
    if not git.run(vdir, "status", "--porcelain", "--untracked-files=no").strip():
        return
    if git.ok(vdir, "diff", "--quiet", st.head):
        git.run(vdir, "checkout", "-q", "-f", "--detach", st.head)
    elif git.rev(vdir, "HEAD") == st.head:
        raise SeriesError(
            f"vllm/ has uncommitted changes and the commit of {row.name} is no longer on HEAD",
            "git -C vllm commit -a -s (the patch as it should be), then scripts/rebase.sh "
            "--continue   # or git -C vllm checkout -f HEAD and --continue (drops the patch)",
        )
    else:
        git.run(vdir, "commit", "-q", "-a", "--amend", "--no-edit", "--no-verify", env=AM_ENV)
        print("rebase: the uncommitted changes in vllm/ were folded into the patch's commit")


def resume(ws: Workspace, st: State, store: Store, drop_repeats: bool = False) -> int:
    """--continue [--drop-repeats] from a stop on lines twice, to the next decision and on."""
    vdir, row = ws.vllm, st.row
    text = (store.backup / "patches" / row.name).read_text(errors="replace")
    found = stopped_repeats(vdir, st, row, text) if row.new else []
    if drop_repeats:
        drop(vdir, st, row, found)
    else:
        settle(vdir, st, row)
        engine.fold(vdir, st)  # a fix committed on top: one commit per patch
    ev = Evidence(st.new.tag, st.old.tag, row.options.get("contract"), am="applied")
    head = git.rev(vdir, "HEAD")
    if head == st.head or git.ok(vdir, "diff", "--quiet", st.head, "HEAD"):
        git.run(vdir, "checkout", "-q", "-f", "--detach", st.head)  # an empty commit too
        if row.new and nothing_left(vdir, st.head, row.new, found):
            ev.emptied = "--drop-repeats" if drop_repeats else "the commit emptied by hand"
            ev.repeated = [r.sentence() for r in found]
        else:
            ev.skipped = ev.resolved = True
        d = decide(ev)
        if ev.skipped:
            d.evidence += row.evidence
        row.new = ""
        engine.decided(ws, st, store, row, d)
        return engine.run(ws, st, store)
    if drop_repeats:
        prefix = ["stopped on lines it would add twice; they were taken out (--drop-repeats)"]
        ev.repeats_dropped = True
    elif head != row.new:  # the user amended the commit (e.g. took a repeated line out)
        prefix = ["stopped on lines it would add twice; changed by hand and continued"]
        ev.resolved = True
    else:
        prefix, ev.repeats_kept = [], True
    # a conflict fixed by hand before this stop stays said (the class too: not "clean")
    earlier = [e for e in row.evidence if e.startswith("conflicted on the 3-way merge")]
    ev.resolved = ev.resolved or bool(earlier)
    prefix = earlier + prefix
    row.cls, row.evidence = "", []
    engine.carried(ws, st, store, row, text, ev, prefix)
    return engine.run(ws, st, store)
