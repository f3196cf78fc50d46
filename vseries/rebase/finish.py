"""After the last patch: the report; and, unless --check, the series branch, the pin, patches/,
the series, the container recipe's default image and the superproject's gitlink moved to the
new release, the line it leaves kept under ``lines/<old tag>/`` and the patches upstream took
recorded in ``patches/retired.toml``."""

import shutil
from pathlib import Path

from vseries import am, git, image, refresh, retired, series
from vseries import pin as pinmod
from vseries.errors import SeriesError
from vseries.pin import Artefact
from vseries.rebase.contracts import Contracts
from vseries.rebase.decide import CARRIED, CONFLICT, SKIPPED, TWICE, UPSTREAMED
from vseries.rebase.report import report
from vseries.rebase.state import FINISHING, REFS, State, Store
from vseries.rebase.undo import OWN_REFS, drop_refs
from vseries.workspace import Workspace


def keep_line(ws: Workspace, st: State, store: Store, notes: list[str]) -> None:
    """The line the series leaves, as it was before the rebase (its pin and patches/), into
    ``lines/<old tag>/``: users of that release keep their series (``scripts/setup.sh --line
    <old tag>``), and its contracts keep running (``scripts/test.sh``)."""
    dest = ws.main.root / "lines" / st.old.tag
    if dest.exists():
        shutil.rmtree(dest)
        notes.append(f"the line {st.old.tag} kept before in {ws.rel(dest)} is replaced")
    dest.mkdir(parents=True)
    shutil.copy2(store.backup / "upstream.toml", dest / "upstream.toml")
    shutil.copytree(store.backup / "patches", dest / "patches")
    tip = git.rev(ws.vllm, REFS + "orig-series") or st.orig_head
    git.run(ws.vllm, "update-ref", f"refs/heads/{am.BRANCH}-{st.old.tag}", tip)
    notes.append(
        f"the line {st.old.tag} is kept in {ws.rel(dest)} (set it up: scripts/setup.sh --line "
        f"{st.old.tag}); its series branch as {am.BRANCH}-{st.old.tag} in vllm/"
    )


def record_upstreamed(ws: Workspace, st: State, notes: list[str]) -> None:
    """The patches classed upstreamed, with their evidence, into patches/retired.toml; on
    the main line each record names its last version in the kept line (keep_line)."""
    gone = [r for r in st.rows if r.cls == UPSTREAMED]
    if not gone:
        return
    kept = ws.main.root / "lines" / st.old.tag / "patches"
    retired.add(
        ws,
        [
            retired.Record(
                name=r.name,
                subject=r.subject,
                kind=retired.UPSTREAMED,
                contract=r.options.get("contract", ""),
                left_at=st.new.tag,
                left_from=st.old.tag,
                file="" if ws.line else ws.rel(kept / r.name),
                evidence=list(r.evidence),
            )
            for r in gone
        ],
    )
    notes.append(
        f"{len(gone)} upstreamed patch(es) recorded in {ws.rel(retired.path(ws))}; their "
        "contracts run on the pin as guards"
    )


def _move(ws: Workspace, st: State, notes: list[str]) -> None:
    """Move the series branch, pin, patches/, series and gitlink to the new release."""
    vdir, rel = ws.vllm, st.new
    carried = [r for r in st.rows if r.new]
    held = git.run(vdir, "rev-list", "--count", f"{rel.base}..HEAD")
    if held != str(len(carried)):  # checked before anything moves: refresh exports HEAD's
        raise SeriesError(
            f"vllm/ HEAD holds {held} commits above {rel.tag}, but the rebase carried "
            f"{len(carried)} patches (a commit made or removed in vllm/ outside a stop?); "
            "nothing was moved",
            "scripts/rebase.sh --abort   # puts everything back as before the rebase; then "
            f"scripts/rebase.sh {rel.tag} again",
        )
    stamp = st.stamp_now()
    if not ws.line:
        keep_line(ws, st, Store(ws), notes)
    if git.rev(vdir, REFS + "orig-series"):
        git.run(
            vdir,
            "update-ref",
            f"refs/vseries/backup/rebase-{stamp}",
            git.rev(vdir, REFS + "orig-series"),
        )
        notes.append(f"the old branch {am.BRANCH} is kept as refs/vseries/backup/rebase-{stamp}")
    git.run(vdir, "checkout", "-q", "-B", am.BRANCH)
    if rel.note:  # where vllm/ now comes from (setup's summary reads it)
        git.run(vdir, "config", "vseries.source", rel.note)
    pinmod.move(
        ws.pin_file,
        rel.tag,
        rel.base,
        Artefact(*rel.source),
        Artefact(*rel.wheel),
        rel.torch,
        rel.triton,
        upstream_id=None if rel.full else rel.upstream,
    )
    refresh.refresh(prune=True, ws=ws)  # upstreamed and skipped patches leave the series
    header, _ = series.read(ws.series_file)
    new_entries = series.load(ws, validate=False)
    series.write(
        header,
        [e.moved(e.name, c.options) for e, c in zip(new_entries, carried, strict=True)],
        ws.series_file,
    )
    record_upstreamed(ws, st, notes)
    if not ws.line and image.move_default(ws.root, st.old.tag, rel.tag):
        notes.append(f"{image.DOCKERFILE}: the default release image is now {rel.tag}")
    link = git.gitlink(ws.root)
    if link:
        # the gitlink records the pin, also a synthetic commit (upstream's id known only as a
        # short one): left at the old release it would check the old tree out silently, while
        # an id upstream lacks fails loudly in a recursive clone, and setup.sh makes it anew
        git.run(ws.root, "update-index", "--cacheinfo", f"160000,{rel.base},vllm")
        notes.append(
            f"gitlink vllm moved to {rel.base[:12]} (staged in the superproject)"
            + (
                ""
                if rel.full
                else f": the synthetic commit of {rel.tag}, whose upstream id is known only as "
                f"{rel.upstream} (setup.sh makes the same commit from the source release)"
            )
        )
    store = Store(ws)
    keep = store.dir / f"backup-{st.old.tag}-{stamp}"
    if store.backup.exists():  # not yet moved by an earlier, killed finish
        store.backup.rename(keep)
    notes.append(f"the old pin and patches/ are kept in {ws.rel(keep)}")


def finish(ws: Workspace, st: State, store: Store) -> int:
    """Everything after the last patch.

    Returns:
        0; 1 when --check left a patch that needs a person (a conflict, or lines it would
        add twice).
    """
    vdir, rel, rows = ws.vllm, st.new, st.rows
    waiting = [r for r in rows if r.cls in (CONFLICT, TWICE)]
    st.status = FINISHING
    store.save(st)  # also counts the time up to here into elapsed_s
    notes: list[str] = []
    if not st.check:
        _move(ws, st, notes)
    twice = len([r for r in rows if r.cls == TWICE])
    head = {
        "title": f"Rebase of the series: {st.old.tag} -> {rel.tag}"
        + (" (--check: nothing changed)" if st.check else ""),
        "lines": [
            f"old pin: {st.old.tag} {st.old.commit} ({st.old.source})",
            f"new upstream: {rel.tag} {rel.upstream}; {rel.how}",
            f"pin: wheel {rel.wheel[0]}, torch {rel.torch}, triton {rel.triton}"
            + ("" if rel.triton_known else " (kept: torch's Triton could not be read)"),
            f"result: {len([r for r in rows if r.cls in CARRIED])} carried, "
            f"{len([r for r in rows if r.cls == UPSTREAMED])} upstreamed, "
            f"{len([r for r in rows if r.cls == CONFLICT])} conflicts, "
            f"{len([r for r in rows if r.cls == SKIPPED])} skipped"
            + (f", {twice} adding a line twice" if twice else ""),
            f"wall time: {st.elapsed_s:.1f} s",
            *notes,
        ],
    }
    text = report(vdir, head, rows)
    out = Path(st.report) if st.report else (None if st.check else store.report_path(rel.tag))
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    print(text + (f"\nrebase: report written to {out}" if out else ""))
    Contracts(ws, st, lambda: None).remove_trees()
    drop_refs(vdir, OWN_REFS)
    store.remove()
    if waiting and st.check:
        what = "conflict" if not twice else "stop (a conflict, or lines added twice)"
        print(
            f"rebase: {len(waiting)} patch(es) would {what} on {rel.tag}; to rebase for real "
            f"and fix them by hand: scripts/rebase.sh {rel.tag} (then --continue each)"
        )
    return 1 if waiting else 0
