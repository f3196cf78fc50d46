"""One branch per patch: the patch alone on the upstream base, in a temporary worktree.

``pr/<slug>`` in vllm/ (slug: from the subject, see PR.slug) = the upstream base (the pin, or
``--base <ref>``) + that ONE patch, applied with ``git am -3 -k``, its Upstream-Status line
(a workspace header), its results marker line (a workspace path) and its Signed-off-by lines
stripped: the patch file's sign-off certifies
the change to this workspace, and the person who submits it upstream signs the commit as its
author (``--sign``: ``git commit --amend --reset-author -s`` with vllm/'s git identity). A
patch that does not apply alone is reported, with the earlier patches it needs when it
applies after them (a hidden dependency), instead of being stacked silently. The ``series``
branch and HEAD of vllm/ are never touched; a ``pr/`` branch that holds work prs did not write
is kept under ``refs/vseries/backup/`` before it is made again.
"""

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from vseries import am, git, patchfile, series
from vseries.errors import SeriesError
from vseries.prs.body import strip_status, unsigned, without_markers
from vseries.prs.checks import Checks


@dataclass
class PR:
    """One patch on its way upstream."""

    entry: series.Entry
    number: str  # "0001", from the file name
    info: patchfile.PatchInfo
    commit: str | None = None  # the branch tip, when the patch applied alone
    problems: list[str] = field(default_factory=list)
    checks: Checks | None = None

    @property
    def slug(self) -> str:
        return slug(self.info.subject)

    @property
    def branch(self) -> str:
        return f"pr/{self.slug}"

    @property
    def ok(self) -> bool:
        return self.commit is not None and not self.problems


def slug(subject: str) -> str:
    """The subject in lower case, runs of other characters as '-', cut at a word near 64
    characters ('[Perf][Kernel] Swap A/B' -> 'perf-kernel-swap-a-b'): the PR branch is
    ``pr/<slug>``."""
    s = re.sub(r"[^a-z0-9]+", "-", subject.lower()).strip("-")
    return s if len(s) <= 64 else s[:64].rsplit("-", 1)[0]


def number(entry: series.Entry, index: int) -> str:
    """The PR number: the patch file's four digits, else its place in the series."""
    m = re.match(r"^(\d{4})-", entry.name)
    return m.group(1) if m else f"{index + 1:04d}"


def _am(wt: Path, patch: Path) -> tuple[bool, str]:
    """git am -3 -k one patch in the worktree; on failure (also a change the 3-way merge put
    into a file the patch does not name, which apply refuses) abort and say why."""
    out = am.am(wt, patch)
    if not git.in_progress(wt):
        wrong = am.misplaced(wt, patch)  # the merge put the change into another file
        if not wrong:
            return True, out
        git.run(wt, "checkout", "-q", "-f", "--detach", "HEAD~1")
        return False, f"{wrong}; the base never had the file it names"
    why = am.explain(wt, patch, out)
    git.run(wt, "am", "--abort", check=False)
    return False, why


def _reset(wt: Path, base: str) -> None:
    git.run(wt, "checkout", "-q", "-f", "--detach", base)
    git.run(wt, "clean", "-q", "-fdx")


SIGN_FIX = (
    "git -C vllm config user.name 'Your Name' && git -C vllm config user.email you@example.com"
    "   # the identity you sign off with; then scripts/prs.sh --sign again"
)


def identity(vdir: Path) -> str:
    """The author identity ``--sign`` signs with (vllm/'s git config).

    Raises:
        SeriesError: vllm/ has no user.name / user.email.
    """
    name, email = (
        git.run(vdir, "config", k, check=False).strip() for k in ("user.name", "user.email")
    )
    if not (name and email):
        raise SeriesError(
            "--sign signs each PR commit off as you, and vllm/ has no git identity "
            "(user.name and user.email)",
            SIGN_FIX,
        )
    return f"{name} <{email}>"


# the reflog message of every branch update prs makes: a tip without it was moved by hand
REFLOG = "vseries prs"


def keep_hand_made(vdir: Path, branch: str, new: str) -> str | None:
    """Before prs rewrites ``branch``: when its tip is not what prs last wrote there (a commit,
    amend or rebase made by hand) and differs from ``new``, keep it under
    ``refs/vseries/backup/`` and say so. Returns the backup ref, or None."""
    ref = f"refs/heads/{branch}"
    tip = git.rev(vdir, ref)
    if tip is None or tip == new:
        return None
    last = git.run(vdir, "reflog", "show", "-1", "--format=%H %gs", ref, check=False)
    if last == f"{tip} {REFLOG}":
        return None
    backup = f"refs/vseries/backup/{branch}-{time.strftime('%Y%m%d-%H%M%S')}"
    git.run(vdir, "update-ref", backup, tip)
    print(
        f"prs: {branch} held work prs did not write ({tip[:12]}); kept as {backup} before the "
        f"branch is made again (git -C vllm log --oneline {backup})"
    )
    return backup


def make_branch(
    vdir: Path,
    wt: Path,
    base: str,
    entries: list[series.Entry],
    i: int,
    pr: PR,
    tmp: Path,
    sign: bool = False,
) -> None:
    """Apply patch i alone on base in worktree wt, unsigned (or, with ``sign``, signed off by
    vllm/'s git identity, who becomes its author); on success set refs/heads/pr/<slug>.
    Records a problem on pr (hidden dependency, or no fit at all) otherwise."""
    _reset(wt, base)
    stripped = tmp / entries[i].name
    text = entries[i].path.read_text(errors="replace")
    stripped.write_text(without_markers(unsigned(strip_status(text))))
    ok, why = _am(wt, stripped)
    if ok:
        if sign:
            git.run(wt, "commit", "-q", "--amend", "--no-edit", "--reset-author", "--signoff")
        pr.commit = git.rev(wt, "HEAD")
        keep_hand_made(vdir, pr.branch, pr.commit)
        git.run(vdir, "update-ref", "-m", REFLOG, f"refs/heads/{pr.branch}", pr.commit)
        return
    # does it apply after the earlier patches? then name the ones it needs
    needs = []
    for j in range(i):
        _reset(wt, base)
        if _am(wt, entries[j].path)[0] and _am(wt, stripped)[0]:
            needs.append(entries[j].name)
    if not needs and i:
        _reset(wt, base)
        if all(_am(wt, entries[j].path)[0] for j in range(i)) and _am(wt, stripped)[0]:
            needs = ["the earlier patches together"]
    if needs:
        pr.problems.append(
            f"does not apply alone on the base; it applies after {', '.join(needs)} "
            f"(a hidden dependency between patches). Upstream PRs must stand alone: move the "
            f"shared change into one patch, or submit {needs[0]} first and mark this PR as "
            f"depending on it. Alone it fails at:\n{why}"
        )
    else:
        pr.problems.append(f"does not apply on the base:\n{why}")
