"""Patch files onto vllm/ with ``git am``, the way every verb makes series commits.

apply (the series on the pin), rebase (the series on a new release) and prs (one patch alone
on the base) all make their commits here: ``git am -3 -k`` with a fixed committer and the
author date as committer date, so the same series on the same base gives the same commit ids
on every machine. Also here: which file and hunk stopped a patch, and which commits of a
branch are not the series' (a reset would lose them: the work-at-risk check of apply and
rebase).
"""

import re
from pathlib import Path

from vseries import git, patchfile
from vseries.series import Entry

BRANCH = "series"
# am writes committer = this identity and date = the author date, so the same series on the
# same pin gives the same commit ids on every machine (and works with no git identity set).
AM_ENV = {"GIT_COMMITTER_NAME": "vseries", "GIT_COMMITTER_EMAIL": "vseries@invalid"}


def am(vdir: Path, patch: Path | list[Path], *config: str, three_way: bool = True) -> str:
    """``git am -3 -k`` one patch (or several, in one session) onto HEAD of vdir; returns
    git's output and never raises: the caller looks at ``git.in_progress`` to see whether it
    stopped.

    Args:
        config: extra ``-c key=value`` pairs, e.g. ("-c", "merge.conflictStyle=diff3").
        three_way: False: no 3-way merge (a missing file stops am where the patch names it,
            instead of the merge finding the change another file).
    """
    patches = patch if isinstance(patch, list) else [patch]
    return git.run(
        vdir,
        *config,
        "am",
        "-3" if three_way else "--no-3way",
        "-k",
        "--committer-date-is-author-date",
        *map(str, patches),
        check=False,
        env=AM_ENV,
    )


def explain(vdir: Path, patch: Path, am_output: str) -> str:
    """Say which file and hunk of ``patch`` failed against the current HEAD of vdir.

    Reads the CONFLICT lines of am's 3-way merge and, for a plain rejection, asks
    ``git apply --check -v`` where the hunk stopped matching.
    """
    found = [m.group(0) for m in re.finditer(r"CONFLICT \([^)]*\): .*", am_output)]
    err = git.call(vdir, "apply", "--check", "-v", str(patch)).err
    by_file = patchfile.hunks(patch.read_text(errors="replace"))
    for m in re.finditer(r"error: patch failed: (\S+):(\d+)", err):
        path, line = m.group(1), int(m.group(2))
        # this file's hunk; else (a renamed file) the first hunk that starts there
        candidates = [*by_file.get(path, []), *(h for hs in by_file.values() for h in hs)]
        hunk = next((h for h in candidates if h.start == line), None)
        found.append(f"file {path}, hunk {hunk.title if hunk else f'at line {line}'}")
    for m in re.finditer(r"error: (\S+): (does not exist in index|No such file or directory)", err):
        found.append(f"file {m.group(1)} does not exist here (renamed or removed upstream?)")
    return "\n".join(f"  {x}" for x in dict.fromkeys(found)) or "  " + am_output.strip()[-400:]


def elsewhere(vdir: Path, patch: Path) -> tuple[str, bool]:
    """Whether the commit ``am`` just made on vdir's HEAD touches files the patch does not
    name (a ``diff --git`` path missing in vllm/, with real blob ids, sends ``git am -3`` to a
    3-way merge into another file).

    Returns:
        (sentence, renamed): "" when the commit touches only what the patch names; renamed
        is True when every path the patch names and the commit lacks is in HEAD's history
        (a file renamed upstream: the merge followed it), False when one never existed.
    """
    named = patchfile.touched(patch.read_text(errors="replace"))
    made = git.run(vdir, "diff-tree", "--no-commit-id", "--name-only", "-r", "--no-renames", "HEAD")
    other = [f for f in made.split() if f not in named]
    if not other:
        return "", False
    gone = [p for p in named if p not in made.split()]
    renamed = all(git.run(vdir, "log", "-1", "--format=%h", "HEAD~1", "--", p) for p in gone)
    return (
        f"  the patch names {', '.join(gone) or 'other files'} but git am -3 changed "
        f"{', '.join(other)} (its 3-way merge found the change there)",
        renamed,
    )


def misplaced(vdir: Path, patch: Path) -> str:
    """``elsewhere``'s sentence when the commit ``am`` just made on vdir's HEAD changed files
    the patch does not name and a path it names was never in HEAD's history (the 3-way merge
    followed the patch's pre-image blob into another file: not a rename); else "".
    apply refuses such a patch, and so do the verbs that replay one (rebase, prs)."""
    wrong, renamed = elsewhere(vdir, patch)
    return wrong if wrong and not renamed else ""


def wanted_ids(vdir: Path, entries: list[Entry]) -> list[str]:
    """patch-id of each series file, in order."""
    return [git.patch_id(vdir, e.path.read_text(errors="replace")) or "" for e in entries]


def foreign_commits(vdir: Path, base: str, tip: str, want: list[str]) -> list[str]:
    """'<short id> <subject>' for commits reachable from tip but not from base whose change
    is not one of the series' patches (``want``: their patch-ids; a reset would lose them)."""
    out = []
    for c, pid in git.commit_patch_ids(vdir, base, tip):
        if pid not in want:
            out.append(git.run(vdir, "log", "-1", "--format=%h %s", c))
    return out


def onto_branch(vdir: Path) -> str:
    """The command that puts a detached vllm/ on the branch ``series`` and drops no commit:
    ``checkout -B`` only when HEAD holds the whole branch (right after ``git am --continue``);
    else the branch as it is, HEAD's own commits first kept under a branch of their own."""
    if not git.ok(vdir, "rev-parse", "-q", "--verify", f"refs/heads/{BRANCH}"):
        return f"git -C vllm checkout -b {BRANCH}"
    if git.ok(vdir, "merge-base", "--is-ancestor", BRANCH, "HEAD"):
        return f"git -C vllm checkout -B {BRANCH}"
    if git.ok(vdir, "merge-base", "--is-ancestor", "HEAD", BRANCH):
        return f"git -C vllm checkout {BRANCH}"
    head = git.rev(vdir, "HEAD")[:12]
    return f"git -C vllm branch detached-{head} && git -C vllm checkout {BRANCH}"


def tips(vdir: Path) -> list[str]:
    """The commits a reset of vdir would move away from: HEAD and the branch ``series``."""
    return sorted({git.rev(vdir, "HEAD"), git.rev(vdir, BRANCH)} - {None, ""})


def reset_would_lose(vdir: Path, pinned: str, want: list[str]) -> list[str]:
    """The commits of vdir that a reset to the pin would lose: '<short id> <subject>' of each
    commit on a tip (``tips``) that is not one of the series' patches (``want``: their
    patch-ids), and '<short id> (not on the pin <id>)' for a tip that does not descend from
    the pin. apply keeps a backup of them (--force) or refuses; rebase refuses."""
    lost = []
    for tip in tips(vdir):
        if git.ok(vdir, "merge-base", "--is-ancestor", pinned, tip):
            lost += foreign_commits(vdir, pinned, tip, want)
        else:
            lost.append(f"{tip[:12]} (not on the pin {pinned[:12]})")
    return list(dict.fromkeys(lost))
