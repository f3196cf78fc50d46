"""The evidence on one patch, read from git: what the rebase engine hands to decide().

``Evidence`` is plain data (no git, no files): everything decide() needs to class a patch.
The functions below collect its parts from vllm/ (the new release checked out, the patch
being replayed); the contract runs are in contracts.py, the text comparisons in diffs.py.
"""

import re
from dataclasses import dataclass, field
from pathlib import Path

from vseries import am, git, patchfile
from vseries.rebase import diffs


@dataclass
class Evidence:
    """What is known about one patch on the new release.

    Attributes:
        tag, old_tag: the new release and the old pin, for the sentences.
        contract: the patch's contract test (series option), or None.
        reverse_applies: ``git apply -R --check`` of the patch succeeds on the new release.
        same_patch_id: upstream's diff of the patch's files between the releases has the
            patch's patch-id.
        am: what ``git am -3`` did: "" (not tried), "conflict", "nothing" (no change left),
            "applied".
        threeway: am needed its 3-way merge.
        conflict: where it conflicted (files, hunks, CONFLICT lines), when it did.
        resolved: a conflict the user fixed by hand and continued.
        moved, dropped, added: from diffs.compare (carried patches).
        taken: lines that show upstream went part of the way (diffs.part_of_the_way).
        repeated: added lines the new release already has elsewhere (diffs.repeats).
        repeats_kept: the user saw ``repeated`` and continued (--continue) with them.
        repeats_dropped: the user had the repeats taken out (--continue --drop-repeats) and
            the rest is carried.
        emptied: how nothing of the patch was left once its repeats were out
            ("--drop-repeats", "the commit emptied by hand"); "" when something is left.
        ported: the patch was replaced by a port written against the new release
            (--continue --port): the lines it adds there are its author's, repeats included.
        verdict: the contract's CPU-decidable part on plain new upstream: ("pass" | "fail" |
            "undecided", sentence), or None when there is no contract to run (or
            --no-contracts).
        kept: contract tests that fail on the old pin and pass on plain new upstream.
        skipped: the user dropped the patch with --skip.
    """

    tag: str
    old_tag: str
    contract: str | None = None
    reverse_applies: bool = False
    same_patch_id: bool = False
    am: str = ""
    threeway: bool = False
    conflict: str = ""
    resolved: bool = False
    moved: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    taken: list[str] = field(default_factory=list)
    repeated: list[str] = field(default_factory=list)
    repeats_kept: bool = False
    repeats_dropped: bool = False
    emptied: str = ""
    ported: bool = False
    verdict: tuple[str, str] | None = None
    kept: list[str] = field(default_factory=list)
    skipped: bool = False


def reverse_applies(vdir: Path, patch: Path) -> bool:
    """True when the patch applies in reverse on vdir's work tree: its change is there."""
    return git.ok(vdir, "apply", "-R", "--check", str(patch))


def same_patch_id(vdir: Path, patch_text: str, old_base: str, new_base: str) -> bool:
    """True when upstream's own diff of the patch's files between the two releases has the
    patch's patch-id (the same change, whatever the commit message)."""
    paths = patchfile.touched(patch_text)
    if not paths:
        return False
    diff = git.run(vdir, "diff", "--full-index", old_base, new_base, "--", *paths)
    mine = git.patch_id(vdir, patch_text)
    return bool(diff) and mine is not None and git.patch_id(vdir, diff + "\n") == mine


def renamed_upstream(
    vdir: Path, old_base: str, new_base: str, old_path: str, new_path: str
) -> bool:
    """True when upstream's own diff between the releases renames ``old_path`` to
    ``new_path`` (``git diff -M``, limited to the two paths)."""
    out = git.run(
        vdir,
        "diff",
        "-M",
        "--name-status",
        "--diff-filter=R",
        old_base,
        new_base,
        "--",
        old_path,
        new_path,
    )
    return any(ln.split("\t")[1:] == [old_path, new_path] for ln in out.splitlines())


def upstream_made(vdir: Path, old_base: str, new_base: str, paths: list[str]) -> set[str]:
    """The lines upstream added to ``paths`` between the two releases (renames followed)."""
    diff = git.run(vdir, "diff", "-M", old_base, new_base, "--", *paths)
    return {ln[1:] for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")}


def conflict_hunks(
    vdir: Path, files: list[str], patch_text: str = "", most: int = 3, lines: int = 16
) -> list[str]:
    """The conflict regions (<<<<<<< ... >>>>>>>) git left in ``files``, with line numbers and
    the hunk of the patch (from ``patch_text``) whose added lines are the patch's side."""
    own = [
        (p, h.header, {ln[1:] for ln in h.lines if ln[:1] == "+"})
        for p, hs in patchfile.hunks(patch_text).items()
        for h in hs
    ]
    out = []
    for f in files:
        if not (vdir / f).is_file():  # e.g. deleted on one side: nothing to show
            continue
        text = (vdir / f).read_text(errors="replace").splitlines()
        starts = [i for i, ln in enumerate(text) if ln.startswith("<<<<<<< ")][:most]
        for i in starts:
            end = next((j for j in range(i, len(text)) if text[j].startswith(">>>>>>> ")), i)
            mid = next((j for j in range(i, end) if text[j] == "======="), i)
            theirs = set(text[mid + 1 : end])
            same_file = sorted(own, key=lambda h: h[0] != f)  # this file's hunks first
            which = next(
                (f" (the patch's hunk {p}: {h})" for p, h, added in same_file if added & theirs), ""
            )
            body = text[i : min(end + 1, i + lines)] + (["    ..."] if end + 1 > i + lines else [])
            out.append(f"{f}:{i + 1}{which}:\n" + "\n".join("    " + b for b in body))
    return out


def conflict_text(vdir: Path, patch: Path, out: str) -> str:
    """Where an ``git am -3`` that stopped conflicted: unmerged files, the conflict regions
    with the patch's hunk, and git's CONFLICT lines (or, when no 3-way merge happened, where
    the patch stopped applying)."""
    unmerged = list(dict.fromkeys(git.run(vdir, "diff", "--name-only", "--diff-filter=U").split()))
    files = f"  unmerged files: {', '.join(unmerged)}\n" if unmerged else ""
    hunks = "".join(
        f"  {h}\n" for h in conflict_hunks(vdir, unmerged, patch.read_text(errors="replace"))
    )
    if not hunks:  # no 3-way merge happened (e.g. a blob is missing): where apply stops
        return files + am.explain(vdir, patch, out)
    said = re.findall(r"CONFLICT \([^)]*\): .*", out)
    return files + hunks + "".join(f"  {c}\n" for c in dict.fromkeys(said))


def _show(vdir: Path, rev: str, path: str) -> str:
    """A file's text at a revision ("" when it has no such file)."""
    r = git.call(vdir, "show", f"{rev}:{path}")
    return r.out if r.ok else ""


def repeats(
    vdir: Path, original: str, replayed: str, old: str, new: str, bases: tuple[str, str]
) -> list[diffs.Repeat]:
    """The lines and statements the replayed commit ``new`` adds that the new release already
    has elsewhere in the same file, more often than the old pin with the series intended
    (diffs.repeats): ``old`` is the patch's commit on the old pin (what the series up to it
    intended), ``bases`` the two plain releases (old pin, new release), whose difference
    says which copies upstream added."""
    added = patchfile.added_lines(git.run(vdir, "show", "--format=", "-U0", new))
    if not added:
        return []
    back = {q: p for p, q in diffs.renames(original, replayed).items()}
    old_base, new_base = bases
    after = {p: _show(vdir, new, p) for p in added}
    new_plain = {p: _show(vdir, new_base, p) for p in added}
    old_plain = {p: _show(vdir, old_base, back.get(p, p)) for p in added}
    old_after = {p: _show(vdir, old, back.get(p, p)) for p in added} if old else None
    return diffs.repeats(added, after, new_plain, old_plain, old_after)


def repeated(
    vdir: Path, original: str, replayed: str, old: str, new: str, bases: tuple[str, str]
) -> list[str]:
    """``repeats`` as sentences, one per line or statement."""
    return [r.sentence() for r in repeats(vdir, original, replayed, old, new, bases)]
