"""The rebase engine: start a rebase, replay the patches one by one, and hand each one's
evidence to decide().

    start() -> replay() -> finish.finish()        (control.py: --continue, --skip, --abort)

Every decision is saved in the state before the next patch is touched, so a run killed at any
point resumes at the last decision without applying a patch twice.
"""

import re
import shutil
from pathlib import Path

from vseries import am, git, patchfile, release, series
from vseries import pin as pinmod
from vseries.errors import SeriesError
from vseries.rebase import diffs, evidence, finish, undo
from vseries.rebase.contracts import Contracts
from vseries.rebase.decide import DROP, STOP, UPSTREAMED, Decision, decide
from vseries.rebase.evidence import Evidence
from vseries.rebase.state import (
    CONFLICT,
    REFS,
    REPLAYING,
    TWICE,
    OldPin,
    Row,
    State,
    Store,
    next_step,
)
from vseries.workspace import Workspace


def _older(target: str, pinned: str) -> bool:
    """True when release tag ``target`` is an older version than ``pinned`` (tags that are
    no version compare as not older: the tag lookup says what is wrong with them)."""
    # imported here: the command line (--help) needs only the standard library
    from packaging.version import InvalidVersion, Version

    try:
        return Version(target.lstrip("v")) < Version(pinned.lstrip("v"))
    except InvalidVersion:
        return False


def preflight(ws: Workspace, pin: pinmod.Pin, entries: list[series.Entry]) -> None:
    """What a real rebase needs of vllm/: a checkout, idle, clean, and no commits outside
    the series (the rebase replays patches/, so they would be lost).

    Raises:
        SeriesError: naming what is in the way, with the command that clears it.
    """
    vdir = ws.vllm
    git.require_checkout(vdir)
    git.require_clean(
        vdir, "a rebase could lose", "git -C vllm stash   # or commit them and scripts/refresh.sh"
    )
    foreign = am.reset_would_lose(vdir, pin.commit, am.wanted_ids(vdir, entries))
    if foreign:
        raise SeriesError(
            "vllm/ holds commits that patches/ does not (the rebase replays "
            "patches/):\n" + "\n".join(f"  {c}" for c in foreign),
            "scripts/refresh.sh   # export them first",
        )


def start(
    ws: Workspace,
    target: str,
    commit: str | None = None,
    route: str = "auto",
    contracts: bool = True,
    check: bool = False,
    report: Path | None = None,
) -> int:
    """Begin a rebase of the series onto ``target`` (or, with check, only classify).

    Returns:
        0 when every patch was decided; 1 when --check found a patch that needs a person.

    Raises:
        SeriesError: a rebase is already in progress; vllm/ is missing, busy, dirty or holds
            commits outside the series; the tag is unknown; a patch stopped the replay (the
            state is kept; the message names the files, hunks and next commands).
    """
    store = Store(ws)
    st = store.load()
    if st is not None:
        raise SeriesError(
            f"a rebase onto {st.target} is already in progress (state in {store.file})",
            next_step(st.status),
        )
    pin = pinmod.load(ws.pin_file)
    entries = series.load(ws)
    vdir = ws.vllm
    if not check and _older(target, pin.tag):
        raise SeriesError(
            f"{target} is older than the pin {pin.tag}: a rebase moves the series to a newer "
            "release; a series for an older release is a kept line (lines/<tag>/, "
            "CONTRIBUTING.md)",
            "ls lines/   # the kept lines (scripts/setup.sh --line <tag> makes one's tree); "
            f"or scripts/rebase.sh <a release newer than {pin.tag}>",
        )
    if not check:
        preflight(ws, pin, entries)
    else:
        git.require_checkout(vdir, idle=False)
    if target == pin.tag:
        if check:  # the weekly CI check when no newer release is out: nothing to report
            print(f"rebase --check: the series is already on {target}; nothing to check")
            return 0
        raise SeriesError(
            f"the series is already on {target}", "scripts/apply.sh   # vllm/ at the pin + series"
        )
    shutil.rmtree(store.backup, ignore_errors=True)  # a leftover of a start that failed early
    store.backup.mkdir(parents=True)
    shutil.copy2(ws.pin_file, store.backup / "upstream.toml")
    shutil.copytree(ws.patches, store.backup / "patches")
    head, branch = git.rev(vdir, "HEAD"), git.head_branch(vdir)
    git.run(vdir, "update-ref", REFS + "orig-head", head)
    if git.rev(vdir, am.BRANCH):
        git.run(vdir, "update-ref", REFS + "orig-series", git.rev(vdir, am.BRANCH))
    # The refs that materialising the release may add (removed again by --abort); saved
    # before anything is made, so that a run killed in the middle can still be aborted.
    made = [
        r
        for r in (f"refs/tags/{target}", commit and f"refs/replace/{commit}")
        if r and git.rev(vdir, r) is None
    ]
    st = State(
        target=target,
        commit=commit,
        route=route,
        check=check,
        contracts=contracts,
        report=str(report) if report else None,
        old=OldPin(pin.tag, pin.commit, pin.source.filename),
        orig_head=head,
        orig_branch=branch,
        gitlink=git.gitlink(ws.root),
        refs=made,
    )
    store.save(st)
    try:
        rel = release.newer(vdir, pin, target, commit, route)
    except SeriesError:  # an unknown tag, no network ...: leave no rebase behind
        undo.abort(ws, quiet=True)
        raise
    # The series on the old pin, made afresh from patches/ (the same ids apply gives): the
    # left side of every range-diff, and proof that the series applies where it claims to.
    git.run(vdir, "checkout", "-q", "--detach", pin.commit)
    old = []
    for e in entries:
        out = am.am(vdir, e.path)
        if git.in_progress(vdir):
            why = am.explain(vdir, e.path, out)
            undo.abort(ws, quiet=True)
            raise SeriesError(
                f"{e.name} does not apply on the current pin {pin.tag}; nothing "
                f"was changed; fix the series first:\n{why}",
                "scripts/apply.sh --keep-conflict",
            )
        wrong = am.misplaced(vdir, e.path)
        if wrong:  # what apply refuses: the 3-way merge put the change into another file
            undo.abort(ws, quiet=True)
            raise SeriesError(
                f"{e.name} does not apply on the current pin {pin.tag}: it names files that "
                f"vllm/ never had; nothing was changed; fix the series first:\n{wrong}",
                f"fix the diff --git, ---, +++ paths in patches/{e.name} (or git checkout -- "
                f"patches/{e.name}), then scripts/apply.sh and scripts/rebase.sh {target}",
            )
        old.append(git.rev(vdir, "HEAD"))
    if old:
        git.run(vdir, "update-ref", REFS + "old-tip", old[-1])
    git.run(vdir, "checkout", "-q", "--detach", rel.base)
    st.status, st.new, st.next, st.head = REPLAYING, rel, 0, rel.base
    st.rows = [
        Row(e.name, patchfile.subject(e.path), old=c, options=e.options)
        for e, c in zip(entries, old, strict=True)
    ]
    store.save(st)
    print(f"rebase: {pin.tag} -> {target} ({rel.how}); replaying {len(entries)} patches")
    return run(ws, st, store)


def run(ws: Workspace, st: State, store: Store) -> int:
    """Replay from st.next on, then finish; the shared tail of start and --continue."""
    replay(ws, st, store)
    return finish.finish(ws, st, store)


def _evidence(st: State, row: Row) -> Evidence:
    return Evidence(st.new.tag, st.old.tag, row.options.get("contract"))


def replay(ws: Workspace, st: State, store: Store) -> None:
    """Decide every patch from st.next on, saving the state after each decision.

    Raises:
        SeriesError: a patch needs a person (conflict, or a line it would add twice) in a
            real rebase; the state is saved with the reason.
    """
    vdir = ws.vllm
    contracts = Contracts(ws, st, lambda: store.save(st))
    while st.row is not None:
        row = st.row
        patch = store.backup / "patches" / row.name
        text = patch.read_text(errors="replace")
        row.cls, row.evidence, row.new = "", [], ""  # a redo after a kill starts afresh
        ev = _evidence(st, row)
        ev.reverse_applies = evidence.reverse_applies(vdir, patch)
        ev.same_patch_id = evidence.same_patch_id(vdir, text, st.old.commit, st.new.base)
        if ev.reverse_applies or ev.same_patch_id:
            decided(ws, st, store, row, decide(ev))
            continue
        before = git.rev(vdir, "HEAD")
        # diff3: conflict regions also show the base, i.e. what upstream changed
        out = am.am(vdir, patch, "-c", "merge.conflictStyle=diff3")
        moved = "" if git.in_progress(vdir) else not_renamed(vdir, st, text, before)
        if moved:  # the merge followed a pre-image into a file upstream did not rename it to
            git.run(vdir, "checkout", "-q", "-f", "--detach", before)
            out = am.am(vdir, patch, three_way=False)  # stops where the patch names the file
        if git.in_progress(vdir):
            ev.am, ev.conflict = "conflict", moved + evidence.conflict_text(vdir, patch, out)
            ev.verdict = contracts.verdict(row.options)  # before asking a person
            if ev.verdict and ev.verdict[0] == "fail":
                ev.kept = contracts.kept(row.options)
            d = decide(ev)
            if d.action == DROP or st.check:  # --check: record it and go on without it
                git.run(vdir, "am", "--abort")
                decided(ws, st, store, row, d)
                continue
            stop(st, store, row, d, CONFLICT)
        if git.rev(vdir, "HEAD") == before:
            ev.am = "nothing"
            decided(ws, st, store, row, decide(ev))
            continue
        ev.am, ev.threeway = "applied", "3-way merge" in out
        carried(ws, st, store, row, text, ev)


def not_renamed(vdir: Path, st: State, text: str, before: str) -> str:
    """Where the commit am just made on HEAD carries the patch's change into another file
    than the one it names, and upstream's own diff between the releases does not rename the
    one into the other (git am -3 followed the pre-image blob, e.g. into a file that was
    already there): a sentence per such file, else ""."""
    replayed = git.run(vdir, "show", "--format=", "--full-index", "-M", "HEAD")
    out = []
    for old_path, new_path in diffs.renames(text, replayed).items():
        if not evidence.renamed_upstream(vdir, st.old.commit, st.new.base, old_path, new_path):
            had = (
                "never had it" if git.blob(vdir, st.old.commit, old_path) is None else "deleted it"
            )
            out.append(
                f"  git am -3 put the patch's change to {old_path} into {new_path}, but upstream "
                f"did not rename {old_path} to {new_path} between {st.old.tag} and "
                f"{st.new.tag} (it {had}); applied without the 3-way merge it stops here:\n"
            )
    return "".join(out)


def carried(
    ws: Workspace, st: State, store: Store, row: Row, text: str, ev: Evidence, prefix=()
) -> None:
    """Decide a patch that is now a commit on HEAD: gather what its replay shows (what
    moved, what upstream already had, lines it would add twice, its contract) and act on
    decide(): keep the commit, drop it again, or stop for a person.

    Args:
        text: the patch file's text; ev: the evidence so far (am's outcome).
        prefix: sentences that go before decide()'s (e.g. "fixed by hand and continued").
    """
    vdir = ws.vllm
    contracts = Contracts(ws, st, lambda: store.save(st))
    row.new = git.rev(vdir, "HEAD")
    replayed = git.run(vdir, "show", "--format=", "--full-index", "-M", row.new)
    ev.moved, ev.dropped, ev.added = diffs.compare(text, replayed)
    if ev.ported:  # a rewrite, not a replay: file pairs are not renames
        ev.moved = [f"the port touches {', '.join(patchfile.touched(replayed))}"]
    else:  # a file pair is upstream's rename only where upstream's own diff says so
        for a, b in diffs.renames(text, replayed).items():
            if not evidence.renamed_upstream(vdir, st.old.commit, st.new.base, a, b):
                said = f"{a} -> {b} (file renamed upstream)"
                ev.moved = [
                    f"{a} -> {b} (the change is there now; upstream did not rename {a} to it)"
                    if m == said
                    else m
                    for m in ev.moved
                ]
    ev.verdict = contracts.verdict(row.options)
    if not (ev.verdict and ev.verdict[0] == "pass"):
        made = evidence.upstream_made(
            vdir,
            st.old.commit,
            st.new.base,
            patchfile.touched(text) + patchfile.touched(replayed),
        )
        ev.taken = diffs.part_of_the_way(text, replayed, made)
        if ev.verdict and ev.verdict[0] == "fail":
            ev.kept = contracts.kept(row.options)
        bases = (st.old.commit, st.new.base)
        ev.repeated = evidence.repeated(vdir, text, replayed, row.old, row.new, bases)
    d = decide(ev)
    d.evidence = [*prefix, *d.evidence]
    if d.action == DROP:
        git.run(vdir, "checkout", "-q", "--detach", "HEAD~1")
        row.new = ""
    elif d.action == STOP and not st.check:  # --check records it and goes on with it
        stop(st, store, row, d, TWICE)
    decided(ws, st, store, row, d)


def stop(st: State, store: Store, row: Row, d: Decision, status: str) -> None:
    """Save the state with this patch waiting for a person, and say what to do.

    Raises:
        SeriesError: always (exit 2, with the next commands).
    """
    row.cls, row.evidence = d.cls, d.evidence
    st.status = status
    store.save(st)
    tag = st.new.tag
    if status == CONFLICT:
        why = d.evidence[0].split("\n", 1)[1] if "\n" in d.evidence[0] else d.evidence[0]
        raise SeriesError(
            f"patch {row.name} conflicts on {tag} + the patches before it; the git am "
            f"session is open in vllm/:\n{why}\n" + "\n".join(d.evidence[1:]),
            "fix the files in vllm/ and git -C vllm add them, then "
            "scripts/rebase.sh --continue   # or --continue --port <a port of the patch to "
            f"{tag}, git format-patch output>, --skip (drop it) or --abort",
        )
    raise SeriesError(
        f"patch {row.name} would add lines twice on {tag} + the patches before it; it is "
        "committed in vllm/ (HEAD) for you to look at:\n" + "\n".join(d.evidence),
        "scripts/rebase.sh --continue --drop-repeats   # takes the repeated lines out of the "
        "commit and goes on (upstreamed when nothing is left); or edit vllm/ (uncommitted "
        "changes are folded into the commit) and --continue, --continue as it is (keeps "
        "both), --skip (drop the patch) or --abort",
    )


def fold(vdir: Path, st: State) -> bool:
    """Make the commits above the last decision (``st.head..HEAD``) one commit, with the
    message, author and dates of the first (the patch's, as am made it): a fix committed on
    top of a stopped commit instead of amending it. The rest of the rebase, and refresh,
    count one commit per carried patch.

    Returns:
        True when it folded two or more commits (one is left alone; HEAD is left at the last
        decision when together they change nothing).
    """
    if not git.ok(vdir, "merge-base", "--is-ancestor", st.head, "HEAD"):
        return False
    made = git.run(vdir, "rev-list", "--reverse", f"{st.head}..HEAD").split()
    if len(made) < 2:
        return False
    git.run(vdir, "reset", "-q", "--soft", st.head)
    if git.ok(vdir, "diff", "--cached", "--quiet", st.head):
        return True  # together they change nothing: HEAD at the last decision
    date = git.run(vdir, "log", "-1", "--format=%ad", "--date=raw", made[0])
    env = {**am.AM_ENV, "GIT_COMMITTER_DATE": date}
    git.run(vdir, "commit", "-q", "--no-verify", "-C", made[0], env=env)
    print(f"rebase: the {len(made)} commits above the last decision were folded into one")
    return True


def files_left_behind(vdir: Path, text: str) -> list[str]:
    """The files a patch adds (``new file mode``) that are not in vllm/ HEAD: for a patch
    classed upstreamed, the part upstream did not take (e.g. config files beside a kernel
    change that upstream made its own way)."""
    added = re.findall(r"^diff --git a/(\S+) b/\1\nnew file mode", text, re.M)
    return [f for f in added if not (vdir / f).exists()]


def decided(ws: Workspace, st: State, store: Store, row: Row, d: Decision) -> None:
    """Record the decision on the current patch and move on to the next one."""
    if d.cls == UPSTREAMED:
        text = (store.backup / "patches" / row.name).read_text(errors="replace")
        left = files_left_behind(ws.vllm, text)
        if left:
            d.evidence.append(
                f"not taken: {len(left)} file(s) the patch adds are not in {st.new.tag} "
                f"({', '.join(left)}); carry them in a patch of their own if they are still "
                "wanted"
            )
    row.cls, row.evidence = d.cls, d.evidence
    print(
        f"  {row.name}: {row.cls}"
        + (f" ({row.evidence[0].splitlines()[0]})" if row.evidence else "")
    )
    st.next += 1
    st.head = git.rev(ws.vllm, "HEAD")
    st.status = REPLAYING
    store.save(st)
