"""Comparing a patch with its replay on the new release: pure functions of diff text.

No git here: the engine hands over the texts (the patch, the replayed commit's diff, the files
before and after), these functions say what moved, what upstream already had, and which of
the patch's added lines the new release already holds elsewhere.
"""

import builtins
import io
import keyword
import re
import tokenize
from collections import Counter
from difflib import SequenceMatcher

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
    dropped = []
    for p, hs in old.items():
        for h in hs:
            if any(missing[ln] for ln in h.lines):
                dropped.append(
                    f"{p}: {h.header} ({sum(1 for ln in h.lines if missing[ln])} of "
                    f"{len(h.lines)} changed lines already upstream)"
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


def repeats(
    added: dict[str, list[tuple[int, str]]],
    after: dict[str, str],
    new_before: dict[str, str],
    old_before: dict[str, str],
) -> list[str]:
    """The replay's added lines that the new release already holds elsewhere in the file.

    A line counts when it is new to the file on both sides: the old pin did not have it (the
    patch brought it), upstream added it between the releases, and the replay adds it once
    more, so the result holds it twice. A line the old pin already had (an idiom such as a
    decorator used on every test) says nothing about upstream taking the patch. Whitespace
    around a line is ignored (upstream may have moved it into another block); lines that say
    nothing (``telling``) are left out, and in a Python file so are lines that are not a
    whole statement (``self._x is not None`` inside a longer condition: the same expression
    in two places is ordinary code).

    Args:
        added: the replayed commit's added lines (``patchfile.added_lines``).
        after: {path: text} of each file after the replay.
        new_before: {path: text} of each file on the new release + the patches before this one.
        old_before: {path: text} of the same files on the old pin + the patches before this
            one (under the path they had there).

    Returns:
        One sentence per repeated line, e.g. "a.py:31 adds `import os`, which a.py already has
        at line 2 (upstream added it)", in file and line order.
    """
    found = []
    for path, lines in added.items():
        text = after.get(path, "").splitlines()
        whole = statements(path, after.get(path, ""))
        ours = {n for n, _ in lines}
        counts_new = Counter(x.strip() for x in new_before.get(path, "").splitlines())
        counts_old = Counter(x.strip() for x in old_before.get(path, "").splitlines())
        for n, line in lines:
            s = line.strip()
            if not telling(s) or counts_old[s] or not counts_new[s] or n not in whole:
                continue
            elsewhere = [
                i for i, x in enumerate(text, 1) if x.strip() == s and i not in ours and i in whole
            ]
            if elsewhere:
                at = ("lines " if len(elsewhere) > 1 else "line ") + ", ".join(map(str, elsewhere))
                found.append(
                    f"{path}:{n} adds `{s}`, which {path} already has at {at} (upstream added it)"
                )
    return found
