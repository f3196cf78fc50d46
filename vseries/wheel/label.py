"""The patched wheel's local version label: ``series.<time>.<n>.h<digest>``.

PEP 440 compares local version segments one by one, digits as numbers. A label of the number
of patches alone (``series.<n>``, the label before this one) put a newer series of 5 patches
below an older one of 7, and two series of one length could not be told apart. This label
sorts by the time of the series' last change, then by the number of patches, and ends in a
digest of what the wheel carries:

- time: ``YYYYMMDDhhmmss``, UTC, of the last commit of the workspace that changed the series
  file or one of its patches (``git log -1 -- <those files>``; its committer time). The same
  checkout gives the same time on every machine and no build reads the clock. One number, so
  a later series sorts higher, and above every ``series.<n>`` wheel;
- n: the number of patches;
- digest: ``h`` and the first 8 hex digits of the sha256 of the wheel's series list
  (``vseries-series.txt``: the pin, the release wheel, each patch's name and patch-id), so two
  series that differ in a patch differ here. The ``h`` keeps the segment alphanumeric: an
  all-digit one would compare as a number and lose its leading zeros.
"""

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

from vseries import git
from vseries.errors import SeriesError

NAME = "series"  # the label's first segment: <release>+series.<time>.<n>.h<digest>
DIGITS = 8  # hex digits of the digest


@dataclass(frozen=True)
class Label:
    """The label's parts, and the series' files whose changes no commit holds (the time is
    then that of their last commit, so the label sorts with it: said, not refused).

    Attributes:
        changed: ``YYYYMMDDhhmmss`` (UTC) of the series' last commit.
        patches: the number of patches.
        digest: ``h`` and 8 hex digits of the series list's sha256.
        uncommitted: ``git status --porcelain`` lines of the series' files.
        shallow: the checkout is shallow and its history stops at the commit found, so the
            series' last change may be older (the label then sorts that commit's wheel a
            little late: said, not refused, since a CI clone may be shallow).
    """

    changed: str
    patches: int
    digest: str
    uncommitted: tuple[str, ...] = ()
    shallow: bool = False

    def __str__(self) -> str:
        return f"{NAME}.{self.changed}.{self.patches}.{self.digest}"


def digest(listing: bytes) -> str:
    """``h`` and the first 8 hex digits of the sha256 of the series list."""
    return "h" + hashlib.sha256(listing).hexdigest()[:DIGITS]


def changed_at(root: Path, files: list[Path]) -> tuple[str, tuple[str, ...], bool]:
    """The UTC time (``YYYYMMDDhhmmss``) of the last commit of the workspace ``root`` that
    changed one of ``files``, the ``git status`` lines of those with changes no commit
    holds, and whether the checkout is shallow with its history stopping at that commit (the
    last change may be older than that commit).

    Raises:
        SeriesError: root is not a git checkout, or no commit holds any of the files.
    """
    rel = [str(f.relative_to(root)) for f in files]
    folder = str(files[0].parent.relative_to(root))
    fix = f"git -C {root} add {folder} && git -C {root} commit   # the series"
    if not git.is_repo(root):
        raise SeriesError(
            f"{root} is not a git checkout: the wheel's version carries the time of the "
            "series' last commit",
            f"git -C {root} init && {fix}",
        )
    stamp, _, parents = git.run(root, "log", "-1", "--format=%ct %P", "--", *rel).partition(" ")
    if not stamp:
        raise SeriesError(
            f"no commit of {root} holds {rel[0]} or its patches: the wheel's version carries "
            "the time of the series' last commit",
            fix,
        )
    shallow = git.run(root, "rev-parse", "--is-shallow-repository") == "true"
    cut = shallow and not parents.strip()
    changed = time.strftime("%Y%m%d%H%M%S", time.gmtime(int(stamp)))
    status = git.run(root, "status", "--porcelain", "--", *rel)
    return changed, tuple(line for line in status.splitlines() if line), cut


def label(root: Path, files: list[Path], patches: int, listing: bytes) -> Label:
    """The label of a series: ``files`` are its series file and patch files in the workspace
    ``root``, ``listing`` the series list the wheel carries.

    Raises:
        SeriesError: as ``changed_at``.
    """
    changed, uncommitted, cut = changed_at(root, files)
    return Label(changed, patches, digest(listing), uncommitted, cut)
