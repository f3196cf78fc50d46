"""What the series changes in the package, read from git, and the checks that make replacing
the release wheel's files right: the series' files are Python / Triton / JSON-config / text
files of the package (never a kernel, its source or the build), and the release wheel's copy
of each file the series touches is the pinned tag's.

The series' version of each file is the ``series`` branch of the line's tree: ``git diff
--name-status --no-renames <pin> series`` (a rename is a deletion and an addition).
"""

from dataclasses import dataclass
from pathlib import Path

from vseries import git
from vseries.errors import SeriesError

# Files of the package the wheel may take from the series: Python (Triton kernels are Python),
# the JSON configs (tuned kernel configs), and text (chat templates, READMEs, type markers).
TAKEN = (".py", ".pyi", ".json", ".txt", ".md", ".jinja", ".typed")
# Folders of the source tree that no wheel ships: a change there is left out, and said so
# (.buildkite and .github: vLLM's CI configuration, e.g. a PR's CI step for its tests).
NOT_SHIPPED = ("tests", "docs", "benchmarks", "examples", ".buildkite", ".github")


@dataclass(frozen=True)
class Change:
    """One file the series changes: git's status letter (A added, M modified, D deleted,
    T type changed) and its path in the source tree."""

    status: str
    path: str


@dataclass
class Plan:
    """The series' changes sorted: files the wheel takes (added or replaced), files it drops,
    and changes outside the package that no wheel ships."""

    put: list[Change]
    drop: list[Change]
    not_shipped: list[Change]


def changes(vdir: Path, pinned: str, tip: str) -> list[Change]:
    """The files ``tip`` changes against ``pinned`` (``git diff --name-status``, no renames)."""
    out = git.run(vdir, "diff", "--name-status", "--no-renames", "-z", pinned, tip)
    parts = out.split("\0")
    return [Change(s[0], p) for s, p in zip(parts[::2], parts[1::2], strict=False) if s and p]


def plan(found: list[Change], package: str, ref: str) -> Plan:
    """Sort the series' changes for a wheel of ``package``; ``ref`` names the series in
    messages.

    Raises:
        SeriesError: naming every change the wheel cannot take: a file of the package that
            is not Python, JSON or text (a kernel ``.so``, CUDA or C++ source), a change of
            type (a symlink), or a change outside the package other than vLLM's tests, docs,
            benchmarks and examples (``csrc/``, CMake, ``setup.py``, ``requirements/``: what
            the release's kernels and metadata are built from).
    """
    put, drop, skip, refused = [], [], [], []
    for c in found:
        top = c.path.split("/", 1)[0]
        if top == package and c.path != package:
            if c.status not in "AMD" or not c.path.endswith(TAKEN):
                refused.append(f"{c.status} {c.path}: not a Python, JSON or text file")
            elif c.status == "D":
                drop.append(c)
            else:
                put.append(c)
        elif top in NOT_SHIPPED and c.path != top:
            skip.append(c)
        else:
            refused.append(f"{c.status} {c.path}: outside the package {package}/")
    if refused:
        raise SeriesError(
            f"the series ({ref}) changes files a patched release wheel cannot carry: the "
            "release's compiled kernels and metadata would no longer match them:\n"
            + "\n".join(f"  {r}" for r in refused)
            + "\nA wheel takes only Python / Triton / JSON-config / text files of the package.",
            "TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 pip wheel --no-build-isolation --no-deps "
            "<the series tree>   # such a series needs a wheel built from source (nvcc, the "
            "CUDA toolkit; about an hour), not a patched release wheel",
        )
    return Plan(put, drop, skip)


def check_release(p: Plan, vdir: Path, pinned: str, tag: str, wheel: Path, read) -> None:
    """The release wheel holds the tag's version of every file the series touches: a changed
    or deleted file equal to the tag's source (``git cat-file`` at the pinned commit), an added
    one absent. ``read(path)`` gives the wheel's bytes of a member, None when it has none.

    Raises:
        SeriesError: naming each file where the wheel and the tag differ (replacing it would
            drop what the wheel holds there, or the wheel is not the tag's).
    """
    wrong = {}
    for c in [*p.put, *p.drop]:
        have, want = read(c.path), git.blob(vdir, pinned, c.path)
        if want is None and have is not None:
            wrong[c.path] = "the series adds it, but the release wheel has it already"
        elif want is not None and have is None:
            wrong[c.path] = f"{tag} has it, the release wheel does not"
        elif have != want:
            wrong[c.path] = f"the release wheel's file differs from {tag}'s"
    if wrong:
        first = next(iter(wrong))
        raise SeriesError(
            f"the release wheel {wheel.name} is not {tag}'s source for files the series "
            "changes, so the series' versions cannot replace them:\n"
            + "\n".join(f"  {path}: {why}" for path, why in wrong.items())
            + "\nCheck that the pin's [wheel] and commit (upstream.toml) are the same release.",
            f"diff <(unzip -p {wheel} '{first}') <(git -C {vdir} show {pinned}:'{first}')",
        )
