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


def rel(path: Path) -> str:
    """path as the user knows it: relative to the workspace root when it lies inside."""
    try:
        return str(path.resolve().relative_to(paths.root()))
    except ValueError:
        return str(path)


# A series entry is the name of a file in patches/: no folder, no control character.
NAME = re.compile(r"[^/\\\x00-\x1f\x7f]+")


def read(path: Path | None = None) -> tuple[list[str], list[Entry]]:
    """Parse a series file into (header comment lines, entries).

    Raises:
        SeriesError: the file is missing or not UTF-8 text, or a line names no plain file of
            patches/ or has a malformed option.
    """
    path = path or paths.patches_dir() / "series"
    where = rel(path)
    if not path.is_file():
        raise SeriesError(f"{where} is missing", f"git checkout -- {where}")
    data = path.read_bytes()
    try:
        text = data.decode()
    except UnicodeDecodeError as e:
        n = data.count(b"\n", 0, e.start) + 1
        raise SeriesError(
            f"{where}:{n}: not UTF-8 text (byte 0x{data[e.start]:02x}); the series is a list "
            "of patch file names",
            f"git checkout -- {where}   # the committed series; or fix line {n} by hand",
        ) from None
    header, entries = [], []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            if not entries:
                header.append(raw)
            continue
        name, *opts = line.split()
        fix = f"git checkout -- {where}   # the committed series; or fix line {n} by hand"
        if not NAME.fullmatch(name) or name in (".", ".."):
            raise SeriesError(f"{where}:{n}: {name!r} is not the name of a file in patches/", fix)
        options = {}
        for o in opts:
            k, sep, v = o.partition("=")
            if not sep or not k or not v:
                raise SeriesError(f"{where}:{n}: option {o!r} is not key=value", fix)
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


def restore_cmd(path: Path) -> str | None:
    """``git checkout -- <path>`` when the workspace's git tracks path (so that it restores
    the committed file), else None."""
    where = rel(path)
    ok = subprocess.run(
        ["git", "-C", str(paths.root()), "ls-files", "--error-unmatch", "--", where],
        capture_output=True,
    )
    return f"git checkout -- {where}" if ok.returncode == 0 else None


def check_patch(patch: Path) -> None:
    """Refuse a file that is not a mail-format patch holding a diff.

    Raises:
        SeriesError: the file is missing, has no From/Subject header, or holds no diff that
            ``git apply`` can read.
    """
    where = rel(patch)
    restore = restore_cmd(patch)
    if not patch.is_file():
        raise SeriesError(
            f"patches/series names {patch.name}, but {where} does not exist",
            f"{restore}   # restore it; or remove its line from patches/series"
            if restore
            else "scripts/refresh.sh   # exports it again when vllm/ holds its commit; "
            "else remove its line from patches/series",
        )
    # Refresh writes a listed patch file that is missing when vllm/ holds its commit.
    again = f"rm {where} && scripts/refresh.sh"
    fix = (
        f"{restore}   # the committed file; or {again} to export it again from vllm/"
        if restore
        else f"{again}   # exports it again from vllm/'s commit"
    )
    head = patch.read_bytes()[:4096].decode(errors="replace")
    if not re.search(r"^Subject: ", head, re.M) or not re.search(r"^From[ :]", head, re.M):
        raise SeriesError(
            f"{where} is not a patch email (no From/Subject header); "
            "patches are made with git format-patch",
            fix,
        )
    p = subprocess.run(
        ["git", "apply", "--numstat", str(patch)],
        capture_output=True,
        text=True,
        errors="replace",
        cwd=paths.root(),
    )
    if p.returncode != 0 or not p.stdout.strip():
        raise SeriesError(
            f"{where} holds no diff git can read: {(p.stderr.strip() or 'empty').splitlines()[0]}",
            fix,
        )


def load(validate: bool = True, missing_ok: bool = False) -> list[Entry]:
    """The series entries, checked: every file exists and is a patch, every patch file in
    patches/ is listed, no name twice.

    Args:
        validate: check the files (without it, only the series file is read).
        missing_ok: a listed file may be missing (refresh writes it), but one that exists
            must be a patch.

    Raises:
        SeriesError: on the first problem found, naming the file.
    """
    _, entries = read()
    if not validate:
        return entries
    names = [e.name for e in entries]
    dup = [n for n in dict.fromkeys(names) if names.count(n) > 1]
    if dup:
        raise SeriesError(
            f"patches/series lists {dup} more than once",
            "git checkout -- patches/series   # the committed series; or delete the "
            "repeated lines by hand",
        )
    for e in entries:
        if not (missing_ok and not e.path.exists()):
            check_patch(e.path)
    unlisted = sorted(p.name for p in paths.patches_dir().glob("*.patch") if p.name not in names)
    if unlisted:
        raise SeriesError(
            f"patches/ holds {unlisted}, which patches/series does not list",
            "add them to patches/series in order, or delete them",
        )
    return entries
