"""A patch e-mail (``git format-patch`` output), read once: its header, message and diff.

Everything the package wants to know about a patch file comes from here: the subject and
message as ``git am -k`` would commit them (``git mailinfo -k``), the Upstream-Status header,
the DCO sign-offs, the files and test files it touches, and its hunks.
"""

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from vseries import git
from vseries.errors import SeriesError

STATUS = re.compile(r"^Upstream-Status: (.+)$", re.M)
TRAILER = re.compile(
    r"^(Signed-off-by|Upstream-Status|Co-authored-by|Reviewed-by): .*$", re.I | re.M
)
_FILE = re.compile(r"^diff --git a/(\S+) b/(\S+)$")
_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@(.*)$")


class Hunk(NamedTuple):
    """One hunk of a diff.

    Attributes:
        start: first line of the hunk in the old file (1-based; 0 for a new file).
        header: ``@@ -a,b +c,d @@`` (without the function heading that follows).
        lines: the changed lines, signed ("+added", "-removed"); context lines left out
            (they move when upstream changes, the change itself does not).
        title: the whole header line, function heading included.
    """

    start: int
    header: str
    lines: list[str]
    title: str


def hunks(diff: str) -> dict[str, list[Hunk]]:
    """Split a diff (or a patch e-mail) into {path after the change: [Hunk, ...]}."""
    files: dict[str, list[Hunk]] = {}
    current = None
    for line in diff.replace("\r\n", "\n").splitlines():
        m = _FILE.match(line)
        if m:
            current = files.setdefault(m.group(2), [])
            continue
        m = _HUNK.match(line)
        if m and current is not None:
            current.append(Hunk(int(m.group(1)), line.split(" @@")[0] + " @@", [], line))
            continue
        if current and line[:1] in "+-" and not line.startswith(("+++ ", "--- ")):
            current[-1].lines.append(line)
    return files


def added_lines(diff: str) -> dict[str, list[tuple[int, str]]]:
    """{path after the change: [(line number in the new file, added text), ...]} of a diff
    (a ``git show`` of one commit, any context size)."""
    out: dict[str, list[tuple[int, str]]] = {}
    path, n = None, 0
    for line in diff.replace("\r\n", "\n").splitlines():
        if line.startswith("diff --git "):
            path = None
            continue
        if line.startswith("+++ "):
            path = line[6:] if line.startswith("+++ b/") else None
            continue
        m = re.match(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@", line)
        if m:
            n = int(m.group(1))
            continue
        if path is None or line.startswith(("--- ", "\\")):
            continue
        if line[:1] == "+":
            out.setdefault(path, []).append((n, line[1:]))
            n += 1
        elif line[:1] == " ":
            n += 1
    return out


def touched(diff: str) -> list[str]:
    """Every path a diff names (before and after a rename), in order."""
    out = []
    for line in diff.splitlines():
        m = _FILE.match(line)
        if m:
            out += [m.group(1), m.group(2)]
    return list(dict.fromkeys(out))


def mailinfo(text: str) -> tuple[dict[str, str], str]:
    """(header fields, message body) of a patch e-mail as ``git mailinfo -k`` reads them
    (``Subject`` with its brackets kept, ``Author``, ``Email``, ``Date``).

    Raises:
        SeriesError: git cannot read it as an e-mail.
    """
    with tempfile.TemporaryDirectory() as tmp:
        r = git.call(Path(tmp), "mailinfo", "-k", f"{tmp}/msg", f"{tmp}/diff", input=text)
        if not r.ok:
            raise SeriesError(f"git mailinfo cannot read the patch: {r.err.strip()}")
        body = Path(tmp, "msg").read_text(errors="replace")
    return dict(re.findall(r"^(\w+): (.*)$", r.out, re.M)), body


def message(text: str) -> str:
    """The commit message ``git am -k`` makes of a patch e-mail: subject, blank line, body."""
    head, body = mailinfo(text)
    return f"{head.get('Subject', '')}\n\n{body}"


def subject(patch: Path) -> str:
    """The Subject of a patch file, unfolded onto one line, brackets kept (the file name when
    it has none)."""
    text = patch.read_text(errors="replace")
    m = re.search(r"^Subject: (.*(?:\n[ \t].*)*)", text, re.M)
    return re.sub(r"\s*\n[ \t]+", " ", m.group(1)).strip() if m else patch.name


def upstream_status(text: str) -> str:
    """The ``Upstream-Status:`` header (Pending, Pending [data for url], Submitted [url],
    Accepted [tag]); "Pending" when there is none."""
    m = STATUS.search(text)
    return m.group(1).strip() if m else "Pending"


@dataclass
class PatchInfo:
    """What a patch e-mail says (via ``git mailinfo -k``: brackets of the subject kept)."""

    subject: str
    author: str
    email: str
    message: str  # the body, trailers removed
    signoffs: list[str]  # "Name <email>" of each Signed-off-by
    status: str  # Upstream-Status value, "Pending" when absent
    files: list[str]  # paths the patch touches and keeps (not deleted)
    tests: list[str]  # test files the patch adds or changes (tests/**/test_*.py)
    coauthors: list[str] = field(default_factory=list)  # each Co-authored-by


def info(patch: Path) -> PatchInfo:
    """Read a format-patch e-mail.

    Raises:
        SeriesError: git mailinfo cannot read it (not a patch e-mail).
    """
    text = patch.read_text(errors="replace")
    try:
        head, msg = mailinfo(text)
    except SeriesError as e:
        raise SeriesError(f"{patch.name}: {e}") from None
    files, deleted = [], set()
    for m in re.finditer(
        r"^diff --git a/(\S+) b/(\S+)\n((?:(?!diff --git|---|@@).*\n)*)", text, re.M
    ):
        if "deleted file mode" in m.group(3):
            deleted.add(m.group(1))
        else:
            files.append(m.group(2))
    tests = [f for f in files if f.startswith("tests/") and re.search(r"/test_[^/]*\.py$", f)]
    return PatchInfo(
        subject=re.sub(r"^\[PATCH[^\]]*\]\s*", "", head.get("Subject", patch.stem)),
        author=head.get("Author", ""),
        email=head.get("Email", ""),
        message=TRAILER.sub("", msg).strip(),
        signoffs=re.findall(r"^Signed-off-by: (.+)$", msg, re.M),
        status=upstream_status(msg),
        files=files,
        tests=tests,
        coauthors=re.findall(r"^Co-authored-by: (.+)$", msg, re.M | re.I),
    )


def check(patch: Path, root: Path, restore: str | None = None) -> None:
    """Refuse a file that is not a mail-format patch holding a diff.

    Args:
        patch: the patch file.
        root: the workspace root (messages name paths relative to it).
        restore: the command that restores the committed file, when git tracks it.

    Raises:
        SeriesError: the file is missing, has no From/Subject header, or holds no diff that
            ``git apply`` can read; the next: line restores it or exports it again.
    """
    try:
        where = str(patch.resolve().relative_to(root.resolve()))
    except ValueError:
        where = str(patch)
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
    r = git.call(root, "apply", "--numstat", str(patch))
    if not r.ok or not r.out.strip():
        raise SeriesError(
            f"{where} holds no diff git can read: {(r.err.strip() or 'empty').splitlines()[0]}",
            fix,
        )
