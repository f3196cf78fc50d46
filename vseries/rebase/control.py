"""--continue and --skip: take a stopped (or killed) rebase up again."""

import re
from pathlib import Path

from vseries import am, git, patchfile
from vseries.errors import SeriesError
from vseries.rebase import engine, twice, undo
from vseries.rebase.decide import decide
from vseries.rebase.evidence import Evidence
from vseries.rebase.state import (
    CONFLICT,
    REPLAYING,
    STARTING,
    TWICE,
    State,
    Store,
    next_step,
)
from vseries.workspace import Workspace


def _continue_am(ws: Workspace, store: Store, st: State) -> None:
    """``git am --continue`` after a hand fix, committing as the engine does; a fix the
    person committed themselves while the session was open (git commit) is taken back into
    the index first, so that am makes the patch's one commit from it.

    Raises:
        SeriesError: unmerged files remain; am stops again (nothing left to add: --skip).
    """
    vdir, name = ws.vllm, st.row.name
    unmerged = git.run(vdir, "diff", "--name-only", "--diff-filter=U").split()
    if unmerged:
        raise SeriesError(
            f"still unmerged in vllm/: {', '.join(unmerged)}",
            "fix them, git -C vllm add <files>, scripts/rebase.sh --continue",
        )
    if git.rev(vdir, "HEAD") != st.head and git.ok(
        vdir, "merge-base", "--is-ancestor", st.head, "HEAD"
    ):
        git.run(vdir, "reset", "-q", "--soft", st.head)
        print("rebase: the commit(s) made during the stop are the patch's resolution")
    # am does not keep --committer-date-is-author-date across --continue: pass the date
    text = (store.backup / "patches" / name).read_text(errors="replace")
    m = re.search(r"^Date: (.+)$", text, re.M)
    env = {**am.AM_ENV, **({"GIT_COMMITTER_DATE": m.group(1)} if m else {})}
    out = git.run(vdir, "am", "--continue", check=False, env=env)
    if git.in_progress(vdir):
        raise SeriesError(
            f"git am --continue did not finish:\n{out.strip()[-600:]}",
            "scripts/rebase.sh --skip   # when the fix leaves nothing to add",
        )


def _port(ws: Workspace, st, port: Path) -> None:
    """--continue --port FILE: the stopped patch is replaced by FILE, a port of it written
    against the new release (a ``git format-patch`` e-mail, its own message and all): the open
    am session is dropped (HEAD goes back to the last decision) and FILE is applied in its
    place as every verb commits (``git am -3 -k``, fixed committer).

    Raises:
        SeriesError: FILE is missing or not a patch, or it does not apply there, or names
            files the new release does not have (vllm/ is back at the last decision, the
            rebase still stopped).
    """
    port = port.resolve()
    if not port.is_file():
        raise SeriesError(
            f"--port {port}: no such file", "scripts/rebase.sh --continue --port <patch file>"
        )
    patchfile.check(port, ws.root, None)
    vdir = ws.vllm
    if git.in_progress(vdir):
        git.run(vdir, "am", "--abort", check=False)
    git.run(vdir, "checkout", "-q", "-f", "--detach", st.head)
    out = am.am(vdir, port)
    wrong = "" if git.in_progress(vdir) else am.elsewhere(vdir, port)[0]
    if wrong:  # a port is written against the new release: it names that release's files
        git.run(vdir, "checkout", "-q", "-f", "--detach", st.head)
        raise SeriesError(
            f"the port {port.name} names files that {st.new.tag} does not have (vllm/ is back "
            f"at the last decision; the rebase is still stopped):\n{wrong}",
            f"fix the port's diff --git, ---, +++ paths, then scripts/rebase.sh --continue "
            f"--port {port}   # or fix vllm/ by hand and --continue",
        )
    if git.in_progress(vdir):
        why = am.explain(vdir, port, out)
        git.run(vdir, "am", "--abort", check=False)
        git.run(vdir, "checkout", "-q", "-f", "--detach", st.head)
        raise SeriesError(
            f"the port {port.name} does not apply on {st.new.tag} + the patches before it "
            f"(vllm/ is back at the last decision; the rebase is still stopped):\n{why}",
            "fix the port against that state, then scripts/rebase.sh --continue --port "
            f"{port}   # or fix vllm/ by hand and --continue",
        )


def resume(ws: Workspace, port: Path | None = None, drop_repeats: bool = False) -> int:
    """--continue: after a hand fix of a conflict, after a stop on lines added twice (the
    commit as it is now on HEAD is kept), or after a run that was killed midway. With
    ``port``, the stopped patch is replaced by that patch file (a port of it to the new
    release); with ``drop_repeats``, a stop on lines twice goes on without them (twice.py).

    Raises:
        SeriesError: no rebase in progress; unmerged files remain; the fix changes nothing
            (use --skip); --port while no patch is stopped, or a port that does not apply.
    """
    store = Store(ws)
    st = undo.need_state(store)
    vdir = ws.vllm
    if port is not None:
        if st.status not in (CONFLICT, TWICE):
            raise SeriesError(
                "--port replaces a stopped patch, and none is waiting", next_step(st.status)
            )
        _port(ws, st, port)
    elif drop_repeats and st.status != TWICE:
        raise SeriesError(
            "--drop-repeats goes on from a stop on lines added twice", next_step(st.status)
        )
    elif st.status == TWICE:
        return twice.resume(ws, st, store, drop_repeats)
    if st.status == STARTING:  # killed before the replay began: begin once more
        undo.abort(ws, quiet=True)
        print(f"rebase: the last run stopped before replaying; starting again on {st.target}")
        report = Path(st.report) if st.report else None
        return engine.start(ws, st.target, st.commit, st.route, st.contracts, st.check, report)
    row = st.row
    if st.status == CONFLICT and git.in_progress(vdir):
        _continue_am(ws, store, st)
    head = git.rev(vdir, "HEAD")
    if st.status in (CONFLICT, TWICE) and head != st.head:
        text = (store.backup / "patches" / row.name).read_text(errors="replace")
        ev = Evidence(st.new.tag, st.old.tag, row.options.get("contract"), am="applied")
        if port is not None:
            prefix = [f"replaced by a port to {st.new.tag} ({port.name}, --continue --port)"]
            ev.threeway = ev.resolved = ev.ported = True
        else:  # a conflict fixed by hand
            files = next(
                (m.group(1) for e in row.evidence if (m := re.search(r"unmerged files: (.*)", e))),
                "",
            )
            prefix = [
                "conflicted on the 3-way merge"
                + (f" in {files}" if files else "")
                + "; fixed by hand and continued"
            ]
            ev.threeway = ev.resolved = True
        row.cls, row.evidence = "", []
        engine.carried(ws, st, store, row, text, ev, prefix)
    elif st.status in (REPLAYING, CONFLICT):
        # Killed midway (or the am session was ended by hand): go back to the last decision
        # and redo the patch after it, so that none is lost or applied twice.
        if git.in_progress(vdir):
            git.run(vdir, "am", "--abort", check=False)
        git.run(vdir, "checkout", "-q", "-f", "--detach", st.head)
        print(
            f"rebase: resuming at patch {st.next + 1} of {len(st.rows)}"
            if st.row is not None
            else f"rebase: resuming at the finish (all {len(st.rows)} patches decided)"
        )
    return engine.run(ws, st, store)


def skip(ws: Workspace) -> int:
    """--skip: drop the patch that stopped the rebase (recorded in the report) and go on.

    Raises:
        SeriesError: no rebase in progress, or none is waiting for a decision.
    """
    store = Store(ws)
    st = undo.need_state(store)
    if st.status not in (CONFLICT, TWICE):
        raise SeriesError("--skip drops a stopped patch, and none is waiting", next_step(st.status))
    vdir = ws.vllm
    if git.in_progress(vdir):
        git.run(vdir, "am", "--abort", check=False)
    git.run(vdir, "checkout", "-q", "-f", "--detach", st.head)
    row = st.row
    ev = Evidence(st.new.tag, st.old.tag, skipped=True)
    ev.am = "conflict" if st.status == CONFLICT else "applied"
    d = decide(ev)
    d.evidence += row.evidence
    row.new = ""
    engine.decided(ws, st, store, row, d)
    return engine.run(ws, st, store)
