"""``patches/series``: the ordered list of patch files, and what each patch file says.

Format (quilt's, plus options): one patch file name per line, in order of application,
optionally followed by ``key=value`` options; ``#`` starts a comment. Known option:
``contract=<path>``, the workspace contract test of that patch (tests/contract/...).
"""

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from vseries import paths
from vseries.errors import SeriesError

STATUS = re.compile(r"^Upstream-Status: (.+)$", re.M)


@dataclass
class Entry:
    """One series line: the patch file and its options (e.g. {"contract": "tests/..."})."""

    name: str
    options: dict[str, str] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return paths.patches_dir() / self.name

    @property
    def contract(self) -> str | None:
        return self.options.get("contract")

    def line(self) -> str:
        return " ".join([self.name, *(f"{k}={v}" for k, v in self.options.items())])


def read(path: Path | None = None) -> tuple[list[str], list[Entry]]:
    """Parse a series file into (header comment lines, entries).

    Raises:
        SeriesError: the file is missing, or a line has a malformed option.
    """
    path = path or paths.patches_dir() / "series"
    if not path.exists():
        raise SeriesError(f"{path} is missing", "git checkout -- patches/series")
    header, entries = [], []
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            if not entries:
                header.append(raw)
            continue
        name, *opts = line.split()
        options = {}
        for o in opts:
            k, sep, v = o.partition("=")
            if not sep or not k or not v:
                raise SeriesError(f"{path}:{n}: option {o!r} is not key=value")
            options[k] = v
        entries.append(Entry(name, options))
    return header, entries


def write(header: list[str], entries: list[Entry], path: Path | None = None) -> bool:
    """Write the series file; returns True when its bytes changed (else leaves it untouched)."""
    path = path or paths.patches_dir() / "series"
    text = "".join(h + "\n" for h in header) + "".join(e.line() + "\n" for e in entries)
    if path.exists() and path.read_text() == text:
        return False
    path.write_text(text)
    return True


def subject(patch: Path) -> str:
    """The Subject of a patch email, folded onto one line, brackets kept."""
    text = patch.read_text(errors="replace")
    m = re.search(r"^Subject: (.*(?:\n[ \t].*)*)", text, re.M)
    return re.sub(r"\s*\n[ \t]+", " ", m.group(1)).strip() if m else patch.name


def upstream_status(patch: Path) -> str:
    """The patch's ``Upstream-Status:`` trailer (Pending, Submitted [url], Accepted [tag])."""
    m = STATUS.search(patch.read_text(errors="replace"))
    return m.group(1).strip() if m else "Pending"


def check_patch(patch: Path) -> None:
    """Refuse a file that is not a mail-format patch holding a diff.

    Raises:
        SeriesError: the file is missing, has no From/Subject header, or holds no diff that
            ``git apply`` can read.
    """
    if not patch.is_file():
        raise SeriesError(
            f"the series names {patch.name}, but {patch} does not exist",
            f"restore it (git checkout -- {patch.relative_to(paths.root())}) or "
            "remove its line from patches/series",
        )
    head = patch.read_bytes()[:4096].decode(errors="replace")
    if not re.search(r"^Subject: ", head, re.M) or not re.search(r"^From[ :]", head, re.M):
        raise SeriesError(
            f"{patch.name} is not a patch email (no From/Subject header); "
            "patches are made with git format-patch",
            "scripts/refresh.sh   # re-exports the commits in vllm/ as patches",
        )
    p = subprocess.run(
        ["git", "apply", "--numstat", str(patch)], capture_output=True, text=True, cwd=paths.root()
    )
    if p.returncode != 0 or not p.stdout.strip():
        raise SeriesError(
            f"{patch.name} holds no diff git can read: "
            f"{(p.stderr.strip() or 'empty').splitlines()[0]}",
            "scripts/refresh.sh   # re-exports the commits in vllm/ as patches",
        )


def load(validate: bool = True) -> list[Entry]:
    """The series entries, checked: every file exists and is a patch, every patch file in
    patches/ is listed, no name twice.

    Raises:
        SeriesError: on the first problem found, naming the file.
    """
    _, entries = read()
    if not validate:
        return entries
    names = [e.name for e in entries]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise SeriesError(f"patches/series lists {sorted(dup)} more than once")
    for e in entries:
        check_patch(e.path)
    unlisted = sorted(p.name for p in paths.patches_dir().glob("*.patch") if p.name not in names)
    if unlisted:
        raise SeriesError(
            f"patches/ holds {unlisted}, which patches/series does not list",
            "add them to patches/series in order, or delete them",
        )
    return entries
