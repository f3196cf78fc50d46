"""``patches/series``: the ordered list of patch files and their options.

Format (quilt's, plus options): one patch file name per line, in order of application,
optionally followed by ``key=value`` options; ``#`` starts a comment. Known options:
``contract=<path>``, the workspace contract test of that patch (tests/contract/...), and
``bench=`` for the PR tool (see vseries.prs.results). ``read`` is the one place the file is
checked (apply, refresh, rebase, prs and the series lint all read it through here): known
options only, names and values of sane length, contract paths that name a Python file inside
the workspace's tests/ (also once symbolic links are followed); ``load`` also refuses a patch
file that is a symbolic link out of patches/ (refresh would write through it).
"""

import dataclasses
import difflib
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from vseries import git, patchfile
from vseries.errors import SeriesError
from vseries.workspace import Workspace

HEADER = [
    "# The series: patch files in order of application (git am -3 on the pin).",
    "# Options: contract=<test file> names the patch's workspace contract test.",
]


@dataclass
class Entry:
    """One series line: the patch file and its options (e.g. {"contract": "tests/..."}).

    Attributes:
        name: the patch file's name in the patches folder.
        options: the line's key=value options, in order.
        folder: the patches folder the entry was read from (None for an entry made in
            memory, which has no ``path``).
    """

    name: str
    options: dict[str, str] = field(default_factory=dict)
    folder: Path | None = field(default=None, compare=False, repr=False)
    # the user's own lines, kept when the series is written again: comment and blank lines
    # above the entry (below the header), its line's ``# comment``, and the lines after the
    # last entry
    before: tuple[str, ...] = field(default=(), compare=False, repr=False)
    note: str = field(default="", compare=False, repr=False)
    after: tuple[str, ...] = field(default=(), compare=False, repr=False)

    @property
    def path(self) -> Path:
        if self.folder is None:
            raise ValueError(f"series entry {self.name} was not read from a series file")
        return self.folder / self.name

    @property
    def contract(self) -> str | None:
        return self.options.get("contract")

    def line(self) -> str:
        return " ".join([self.name, *(f"{k}={v}" for k, v in self.options.items())])

    def lines(self) -> list[str]:
        """The entry as written: the lines above it, its line (with its comment), the lines
        after it."""
        own = self.line() + (f"  {self.note}" if self.note else "")
        return [*self.before, own, *self.after]

    def moved(self, name: str, options: dict[str, str] | None = None) -> "Entry":
        """This entry under another file name (refresh, rebase), its comments kept."""
        return Entry(
            name,
            dict(self.options if options is None else options),
            before=self.before,
            note=self.note,
            after=self.after,
        )


# A series entry is the name of a file in patches/: no folder, no control character.
NAME = re.compile(r"[^/\\\x00-\x1f\x7f]+")
OPTIONS = ("contract", "bench")  # the options a series line may carry
MOST_NAME, MOST_VALUE = 200, 300  # characters; git format-patch names are under 80


def shown(text: str, most: int = 60) -> str:
    """``text`` quoted for a message, cut short (with its length) when it is long."""
    return repr(text) if len(text) <= most else f"{text[:most]!r}... ({len(text)} characters)"


def option_problem(key: str, value: str) -> str | None:
    """What is wrong with one ``key=value`` option of a series line, or None."""
    if key not in OPTIONS:
        return f"unknown option {shown(key)} (known: {', '.join(k + '=' for k in OPTIONS)})"
    if len(value) > MOST_VALUE:
        return f"{key}= value {shown(value)} is longer than {MOST_VALUE} characters"
    if key == "contract":
        p = PurePosixPath(value)
        if (
            "\\" in value
            or p.is_absolute()
            or ".." in p.parts
            or p.parts[:1] != ("tests",)
            or p.suffix != ".py"
        ):
            return (
                f"contract={shown(value)} is not a test file under tests/ of the workspace "
                "(a relative path to a .py file, no '..', e.g. "
                "contract=tests/contract/test_x.py)"
            )
    return None


def outside(path: Path, folder: Path) -> bool:
    """True when ``path``, its symbolic links followed, is not inside ``folder`` (whose own
    links are followed too: a workspace may link its tests/ folder in whole)."""
    return not path.resolve().is_relative_to(folder.resolve())


def contract_problem(ws: Workspace, value: str) -> str | None:
    """What is wrong with a contract path of ``ws`` (a series option, or a record of
    patches/upstreamed.toml), or None: it must name a .py file under tests/, also once
    symbolic links are followed."""
    problem = option_problem("contract", value)
    if not problem and outside(ws.root / value, ws.root / "tests"):
        problem = (
            f"contract={shown(value)} is not a test file under tests/ of the workspace: "
            f"a symbolic link leads it to {shown(str((ws.root / value).resolve()))}"
        )
    return problem


def read(path: Path | None = None, ws: Workspace | None = None) -> tuple[list[str], list[Entry]]:
    """Parse a series file (default: the workspace's) into (header comment lines, entries).

    Args:
        path: the series file (default: ``ws.series_file``).
        ws: the workspace that messages name paths relative to (default: the current one).

    Raises:
        SeriesError: the file is missing or not UTF-8 text, or a line names no plain file of
            patches/ (or a name over MOST_NAME characters), or has a malformed or unknown
            option, a value over MOST_VALUE characters or a contract outside tests/.
    """
    ws = ws or Workspace.current()
    path = path or ws.series_file
    where = ws.rel(path)
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
    header, entries, pending = [], [], []
    for n, raw in enumerate(text.splitlines(), 1):
        line, hash_, comment = raw.partition("#")
        line = line.strip()
        if not line:
            (pending if entries else header).append(raw)
            continue
        name, *opts = line.split()
        fix = f"git checkout -- {where}   # the committed series; or fix line {n} by hand"
        if not NAME.fullmatch(name) or name in (".", ".."):
            raise SeriesError(
                f"{where}:{n}: {shown(name)} is not the name of a file in patches/", fix
            )
        if len(name) > MOST_NAME:
            raise SeriesError(
                f"{where}:{n}: the patch name {shown(name)} is longer than {MOST_NAME} "
                "characters (git format-patch names are under 80)",
                fix,
            )
        options = {}
        for o in opts:
            k, sep, v = o.partition("=")
            if not sep or not k or not v:
                raise SeriesError(f"{where}:{n}: option {shown(o)} is not key=value", fix)
            problem = contract_problem(ws, v) if k == "contract" else option_problem(k, v)
            if problem:
                raise SeriesError(f"{where}:{n}: {problem}", fix)
            options[k] = v
        note = (hash_ + comment).strip()
        entries.append(Entry(name, options, path.parent, tuple(pending), note))
        pending = []
    if entries and pending:
        entries[-1] = dataclasses.replace(entries[-1], after=tuple(pending))
    return header, entries


def restore_cmd(ws: Workspace, path: Path) -> str | None:
    """``git checkout -- <path>`` when the workspace's git tracks path (so that it restores
    the committed file), else None."""
    where = ws.rel(path)
    return f"git checkout -- {where}" if git.tracked(ws.root, where) else None


def write(header: list[str], entries: list[Entry], path: Path) -> bool:
    """Write the series file; returns True when its bytes changed (else leaves it untouched)."""
    text = "".join(h + "\n" for h in header) + "".join(
        line + "\n" for e in entries for line in e.lines()
    )
    if path.exists() and path.read_text() == text:
        return False
    path.write_text(text)
    return True


def load(
    ws: Workspace | None = None, validate: bool = True, missing_ok: bool = False
) -> list[Entry]:
    """The series entries of ``ws`` (default: the current workspace), checked: every file
    exists and is a patch, every patch file in patches/ is listed, no name twice.

    Args:
        validate: check the files (without it, only the series file is read).
        missing_ok: a listed file may be missing (refresh writes it), but one that exists
            must be a patch.

    Raises:
        SeriesError: on the first problem found, naming the file.
    """
    ws = ws or Workspace.current()
    _, entries = read(ws.series_file, ws)
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
        if e.path.is_symlink() and outside(e.path, ws.patches):
            raise SeriesError(
                f"patches/{e.name} is a symbolic link out of patches/ (to "
                f"{shown(str(e.path.resolve()))}); verbs read and refresh writes the series' "
                "files in patches/ only",
                f"rm {ws.rel(e.path)} && scripts/refresh.sh   # exports it again from vllm/; or "
                "copy the file in its place",
            )
    unlisted = sorted(p.name for p in ws.patches.glob("*.patch") if p.name not in names)
    for e in entries:
        meant = not e.path.exists() and near_miss(e.name, unlisted)
        if meant:
            raise SeriesError(
                f"patches/series names {e.name}, which is missing; patches/ holds {meant}, "
                "which the series does not list: did you mean it?",
                f"sed -i {rename_cmd(e.name, meant)} patches/series   # the line names {meant}",
            )
    # the list edited by hand (a line deleted or misspelt): the committed list is the way
    # back; a patch leaves the series only through patches/retired/ (CONTRIBUTING.md)
    restore = restore_cmd(ws, ws.series_file)
    relist = (
        f"{restore}   # the committed list" if restore else "add each to patches/series in order"
    ) + "; to drop a patch for good: CONTRIBUTING.md, 'Drop a patch'"
    for e in entries:
        if unlisted and not e.path.exists():
            raise SeriesError(
                f"patches/series names {e.name}, which is missing, and patches/ holds "
                f"{unlisted}, which the series does not list",
                relist,
            )
        if not (missing_ok and not e.path.exists()):
            patchfile.check(e.path, ws.root, restore_cmd(ws, e.path))
    if unlisted:
        raise SeriesError(f"patches/ holds {unlisted}, which patches/series does not list", relist)
    return entries


def near_miss(name: str, candidates: list[str]) -> str | None:
    """The candidate that is one edit (one character) or one word away from ``name`` (a
    typo in a series line), the closest first; None when there is none."""
    words = re.compile(r"[A-Za-z0-9]+")  # the separators - _ . do not count as words
    for c in difflib.get_close_matches(name, candidates, n=len(candidates) or 1, cutoff=0.6):
        for a, b in ((name, c), (words.findall(name), words.findall(c))):
            ops = [o for o in difflib.SequenceMatcher(None, a, b).get_opcodes() if o[0] != "equal"]
            if all(max(i2 - i1, j2 - j1) == 1 for _, i1, i2, j1, j2 in ops) and len(ops) <= 1:
                return c
    return None


def rename_cmd(old: str, new: str) -> str:
    """The quoted sed expression that renames the series line of ``old`` to ``new``."""
    pattern = re.sub(r"([.*\[\]^$\\])", r"\\\1", old)
    repl = re.sub(r"([&\\])", r"\\\1", new)
    return shlex.quote(f"s/^{pattern}\\([[:space:]]\\|$\\)/{repl}\\1/")
