"""Comparing a patch with its replay on the new release: pure functions of diff text.

No git here: the engine hands over the texts (the patch, the replayed commit's diff, the files
before and after), these functions say what moved, what upstream already had, and which of
the patch's added lines the new release already holds elsewhere.
"""

import ast
import builtins
import io
import keyword
import re
import tokenize
from collections import Counter
from difflib import SequenceMatcher
from typing import NamedTuple

from vseries.patchfile import Hunk, hunks


def _lines(files: dict[str, list[Hunk]]) -> Counter:
    return Counter(ln for hs in files.values() for h in hs for ln in h.lines)


def compare(original: str, replayed: str) -> tuple[list[str], list[str], list[str]]:
    """Compare a patch with its replay on the new upstream.

    Returns:
        (moved, dropped, added): moved = renamed files and hunk offsets ("a.py -> b.py",
        "a.py: 2 of 3 hunks moved (+15 lines)"); dropped = the original's hunks whose
        changed lines the replay no longer has (already upstream), each as "path: header";
        added = changed lines the replay has and the original has not (a hand resolution).
    """
    old, new = hunks(original), hunks(replayed)
    moved = []
    rename = {}
    gone, appeared = [p for p in old if p not in new], [p for p in new if p not in old]
    for p in gone:  # pair a vanished path with the new path that shares most changed lines
        best = max(
            appeared,
            default=None,
            key=lambda q: sum((_lines({p: old[p]}) & _lines({q: new[q]})).values()),
        )
        if best is not None and (_lines({p: old[p]}) & _lines({best: new[best]})):
            rename[p] = best
            appeared.remove(best)
            moved.append(f"{p} -> {best} (file renamed upstream)")
    for p, hs in old.items():
        q = rename.get(p, p)
        starts = {tuple(h.lines): h.start for h in new.get(q, [])}
        shifts = [
            starts[tuple(h.lines)] - h.start
            for h in hs
            if starts.get(tuple(h.lines)) not in (None, h.start)
        ]
        if shifts:
            moved.append(
                f"{q}: {len(shifts)} of {len(hs)} hunks moved "
                f"({', '.join(f'{d:+d}' for d in sorted(set(shifts)))} lines)"
            )
    missing = _lines(old) - _lines(new)
    whole = Counter(tuple(h.lines) for hs in new.values() for h in hs)
    dropped = []
    for p, hs in old.items():
        for h in hs:
            if whole[tuple(h.lines)]:  # the replay carries this hunk as it is
                whole[tuple(h.lines)] -= 1
                continue
            gone = 0
            for ln in h.lines:  # a line missing once is one hunk's, not every hunk's
                if missing[ln]:
                    missing[ln] -= 1
                    gone += 1
            if gone:
                dropped.append(
                    f"{p}: {h.header} ({gone} of {len(h.lines)} changed lines already upstream)"
                )
    added = sorted((_lines(new) - _lines(old)).elements())
    return moved, dropped, added


def renames(original: str, replayed: str) -> dict[str, str]:
    """{path in the patch: path in the replay} for files the replay carries under a new
    name (as compare() pairs them)."""
    found = {}
    for line in compare(original, replayed)[0]:
        m = re.match(r"^(\S+) -> (\S+) \(file renamed upstream\)$", line)
        if m:
            found[m.group(1)] = m.group(2)
    return found


def part_of_the_way(original: str, replayed: str, made: set[str]) -> list[str]:
    """Lines showing that upstream already made part of the patch's change, when that is the
    whole difference between the patch and its replay; else [].

    A line counts when upstream wrote it (it is in ``made``) where the patch removes a line,
    and it is closer to one of the patch's added lines than any line the replay no longer
    removes is (upstream went part of the way the patch goes, e.g. one of two arguments).
    """
    old, new = _lines(hunks(original)), _lines(hunks(replayed))
    extra, missing = new - old, old - new
    removed = [ln[1:] for ln in missing if ln[:1] == "-"]
    plus = [ln[1:] for ln in old if ln[:1] == "+"]

    def ratio(a: str, b: str) -> float:
        return SequenceMatcher(None, a, b).ratio()

    taken = []
    for ln in extra:
        u = ln[1:]
        if ln[:1] != "-" or u not in made or not removed or not plus:
            return []
        goal = max(plus, key=lambda p: ratio(u, p))
        if ratio(u, goal) <= max([0.5] + [ratio(o, goal) for o in removed]):
            return []
        taken.append(u)
    return taken


# Names that do not make a line anyone's own: Python's keywords and builtins.
_PLAIN = set(keyword.kwlist) | set(dir(builtins))


def telling(line: str) -> bool:
    """True when a line says something of its own, so that finding it twice means something:
    code (not a comment), a whole expression (its brackets balance: not ``if (`` or
    ``logger.info(``), and a name that is not a keyword or builtin (``import os``,
    ``x = True``; not ``return None``, ``pass``, ``) -> bool:``)."""
    s = line.strip()
    if not s or s.startswith("#"):
        return False
    if any(s.count(a) != s.count(b) for a, b in ("()", "[]", "{}")):
        return False
    return any(w not in _PLAIN for w in re.findall(r"[A-Za-z_]\w*", s))


def statements(path: str, text: str) -> set[int] | range:
    """Line numbers (1-based) of ``text`` that hold one whole Python statement, or a compound
    statement's header (``def f():``), on their own; every line for a file that is not Python
    or does not tokenize."""
    every = range(1, text.count("\n") + 2)
    if not path.endswith(".py"):
        return every
    starts, found = {}, set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type in (tokenize.NEWLINE, tokenize.NL) or tok.type == tokenize.COMMENT:
                if tok.type == tokenize.NEWLINE and starts.get("line") == tok.start[0]:
                    found.add(tok.start[0])
                if tok.type == tokenize.NEWLINE:
                    starts.clear()
                continue
            if tok.type in (tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING):
                continue
            starts.setdefault("line", tok.start[0])
    except (tokenize.TokenError, SyntaxError):
        return every
    return found


def times(n: int) -> str:
    """ "once", "twice", "3 times"."""
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


class Repeat(NamedTuple):
    """A line, or a statement of several lines, that the replay adds although the new
    release already has it elsewhere in the same file, more often than the old pin with the
    patch had it.

    Attributes:
        path: the file (its path after the replay).
        first, last: the lines (1-based, in the file after the replay) the replay added it at.
        text: the line (its first line for a statement), stripped.
        elsewhere: where else the file has it (first lines).
        now: how often the file holds it after the replay.
        meant: how often the old pin with the series up to this patch held it.
        upstream: how many copies upstream added between the two releases.
    """

    path: str
    first: int
    last: int
    text: str
    elsewhere: list[int]
    now: int = 0
    meant: int = 0
    upstream: int = 0

    def sentence(self) -> str:
        at = ("lines " if len(self.elsewhere) > 1 else "line ") + ", ".join(
            map(str, self.elsewhere)
        )
        where = f"{self.path}:{self.first}" + (f"-{self.last}" if self.last != self.first else "")
        whole = (
            f" (the whole statement, {self.last - self.first + 1} lines)"
            if self.last != self.first
            else ""
        )
        return (
            f"{where} adds `{self.text}`, which {self.path} already has at {at}{whole}: it "
            f"would be there {times(self.now)}, where the old pin with the series up to this "
            f"patch has it {times(self.meant)} (upstream added {self.upstream} "
            f"{'copy' if self.upstream == 1 else 'copies'})"
        )


# The four counts of a line or statement that _more compares: the old pin (plain, without
# the series), the old pin with the series up to this patch (what the patch intended), the
# new release (plain) and the replay's result.
Counts = tuple[int, int, int, int]


def _more(counts: Counts) -> bool:
    """Whether a line or statement is there more often after the replay than on the old pin
    with the series up to this patch, while upstream added copies of it between the releases
    (counted on the plain releases: a line an earlier patch added and the rebase then took
    out again, or one a hand resolution brings back, counts too)."""
    old_plain, meant, new_plain, now = counts
    return now > meant and new_plain > old_plain


def _repeat(path: str, first: int, last: int, text: str, where: list[int], c: Counts) -> Repeat:
    return Repeat(path, first, last, text, where, c[3], c[1], c[2] - c[0])


def _decorator(line: str) -> bool:
    """A decorator line: it qualifies the function or class after it (compared whole, as a
    statement), so finding it again says nothing (``@pytest.mark.slow`` on every test)."""
    return line.lstrip().startswith("@")


def _whole_lines(path: str, text: str) -> Counter:
    """{stripped line: count} of the lines that hold a whole statement (``statements``)."""
    rows = text.splitlines()
    whole = statements(path, text)
    return Counter(x.strip() for i, x in enumerate(rows, 1) if i in whole)


def _ast_statements(path: str, text: str) -> list[tuple[int, int, str]] | None:
    """(first line, last line, normalised form) of every statement of a Python file (the
    form is its ``ast.dump``: layout and comments do not count); None when the file is not
    Python or does not parse."""
    if not path.endswith(".py"):
        return None
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    return [
        (n.lineno, n.end_lineno or n.lineno, ast.dump(n))
        for n in ast.walk(tree)
        if isinstance(n, ast.stmt)
    ]


def _runs(ours: set[int]) -> list[tuple[int, int]]:
    """Runs of consecutive line numbers, as (first, last)."""
    out: list[tuple[int, int]] = []
    for n in sorted(ours):
        if out and out[-1][1] == n - 1:
            out[-1] = (out[-1][0], n)
        else:
            out.append((n, n))
    return out


def _block(rows: list[str], first: int, last: int) -> tuple[str, ...]:
    return tuple(x.strip() for x in rows[first - 1 : last] if x.strip())


def _places(text: str, key: tuple[str, ...]) -> list[int]:
    """First line numbers of each place the stripped non-blank lines ``key`` stand in a row
    in ``text`` (blank lines between them do not count)."""
    kept = [(i, x.strip()) for i, x in enumerate(text.splitlines(), 1) if x.strip()]
    k = len(key)
    return [
        kept[j][0]
        for j in range(len(kept) - k + 1)
        if kept[j][1] == key[0] and tuple(x for _, x in kept[j : j + k]) == key
    ]


def _statements_twice(path: str, texts: tuple[str, str, str, str], ours: set[int]) -> list[Repeat]:
    """The replay's multi-line statements (Python, by ``ast``) or runs of added lines (any
    other file, or one that does not parse) that ``_more`` finds too often; ``texts`` in the
    order of ``Counts``."""
    rows = texts[3].splitlines()
    parsed = [_ast_statements(path, t) for t in texts]
    found = []
    if all(p is not None for p in parsed):
        counts = [Counter(k for _, _, k in p) for p in parsed]
        spans = [(a, b, k) for a, b, k in parsed[3] if b > a]
        for a, b, key in sorted(spans, key=lambda s: (s[0], -s[1])):
            if any(r.first <= a <= r.last for r in found):
                continue  # inside a statement already found
            if not all(n in ours for n in range(a, b + 1) if rows[n - 1].strip()):
                continue
            if not telling(" ".join(_block(rows, a, b))):
                continue
            n = tuple(c[key] for c in counts)
            if _more(n):
                where = [x for x, _, k in parsed[3] if k == key and x not in ours]
                if where:
                    found.append(_repeat(path, a, b, rows[a - 1].strip(), sorted(set(where)), n))
        return found
    for a, b in _runs(ours):
        key = _block(rows, a, b)
        if len(key) < 2 or not telling(" ".join(key)):
            continue
        n = tuple(len(_places(t, key)) for t in texts)
        if _more(n):
            where = [x for x in _places(texts[3], key) if x not in ours]
            if where:
                found.append(_repeat(path, a, b, key[0], where, n))
    return found


def repeats(
    added: dict[str, list[tuple[int, str]]],
    after: dict[str, str],
    new_plain: dict[str, str],
    old_plain: dict[str, str],
    old_after: dict[str, str] | None = None,
) -> list[Repeat]:
    """The replay's added lines and statements that the new release already holds elsewhere
    in the file, more times than the old pin with the series intended.

    A line (or a statement) counts when the replay's file holds it more often than the old
    pin with the series up to this patch did, and upstream added copies of it between the
    releases (counted on the plain releases; ``_more``). So a line new to the file that
    upstream also added counts, and so does a line the old pin had once or more, upstream
    one more copy and the patch another; each is said with its counts. Whitespace around a
    line is ignored (upstream may have moved it into another block); lines that say nothing
    (``telling``) and decorators are left out, and in a Python file so are lines that are not
    a whole statement (``self._x is not None`` inside a longer condition). A statement over
    several lines (a ``dict(`` ... ``)`` call, a function) is compared whole: in a Python file
    by its ``ast`` (layout and comments aside), in any other file (or one that does not
    parse) as a run of added lines; it replaces the lines of it found one by one.

    Args:
        added: the replayed commit's added lines (``patchfile.added_lines``).
        after: {path: text} of each file after the replay.
        new_plain: {path: text} of each file on the new release (without the series).
        old_plain: {path: text} of the same files on the old pin (without the series; under
            the path they had there).
        old_after: the same files on the old pin with the series up to this patch (what the
            patch intended); when missing, the old pin's text plus the replay's added lines.

    Returns:
        The repeats in file and line order (``Repeat.sentence()`` says each one).
    """
    found: list[Repeat] = []
    for path, lines in added.items():
        text = after.get(path, "")
        rows, whole = text.splitlines(), statements(path, text)
        ours = {n for n, _ in lines}
        old = old_plain.get(path, "")
        intended = (old_after or {}).get(path)
        if intended is None:
            intended = old + "".join(ln + "\n" for _, ln in lines)
        texts = (old, intended, new_plain.get(path, ""), text)
        counts = [_whole_lines(path, t) for t in texts]
        blocks = _statements_twice(path, texts, ours)
        for n, line in lines:
            s = line.strip()
            if not telling(s) or _decorator(s) or n not in whole:
                continue
            if any(b.first <= n <= b.last for b in blocks):
                continue
            c = tuple(x[s] for x in counts)
            if not _more(c):
                continue
            elsewhere = [
                i for i, x in enumerate(rows, 1) if x.strip() == s and i not in ours and i in whole
            ]
            if elsewhere:
                found.append(_repeat(path, n, n, s, elsewhere, c))
        found += blocks
    return sorted(found, key=lambda r: (r.path, r.first))


def without(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` without the lines in ``spans`` ((first, last), 1-based, inclusive)."""
    gone = {n for a, b in spans for n in range(a, b + 1)}
    return "".join(x for i, x in enumerate(text.splitlines(keepends=True), 1) if i not in gone)
