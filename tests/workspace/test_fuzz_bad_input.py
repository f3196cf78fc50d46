"""Generated bad input (hypothesis) for apply, refresh and rebase --check.

A synthetic workspace holds a series of two valid patches, applied on vllm/'s branch
``series``. Each example breaks one file of patches/ in a way that is malformed by
construction (a hunk cut short, a hunk count too large, a binary line inside a hunk, binary
junk, an empty file, a duplicated / missing / unlisted / junk series line, a bad option, an
unknown option, a patch name or option value far too long (up to 10 MB), a contract path
that leaves tests/ or the workspace, no series), optionally with CRLF line ends on top, and
runs one verb as the scripts run it (``python -m vseries <verb>``). Each run must exit 2 with
a message that names the broken file and a ``next:`` line, print no Python traceback, and
leave vllm/ (files, HEAD, refs, no am in progress) and patches/ byte for byte as they were.

Bounded for CI: a fixed number of examples per verb, seeded (the same inputs on every run),
no example database: FAST of them in the fast tier, the rest (other inputs, another seed)
marked slow. The number of inputs tried, by kind, is printed (pytest -s shows it).
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import git, make_patch, tiny_workspace
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

EXAMPLES = 30  # per verb: FAST in the fast tier, the rest in the slow one (another seed)
FAST = 4  # CI (2 cores): 8 of refresh's took 6.8 s of CPU, past the fast tier's 5 s
PARTS = [
    pytest.param(0, FAST, id="fast"),
    pytest.param(1, EXAMPLES - FAST, id="more", marks=pytest.mark.slow),
]
VERBS = {
    "apply": ["apply"],
    "refresh": ["refresh"],
    "rebase --check": ["rebase", "--check", "v0.99.0"],
}
# lengths of a patch name or option value past the limits (200 / 300 characters), up to 10 MB
HUGE = [201, 301, 4096, 300_000, 10_000_000]
ESCAPES = [
    b"../../../../etc/passwd",
    b"/etc/passwd",
    b"tests/../../x.py",
    b"tests/../vseries/cli.py",
    b"vseries/cli.py",
    b"..",
]


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> tuple[Path, dict]:
    """The workspace and the environment that points vseries at it: two patches (b.py; a.py
    in two hunks plus a new c.py), applied. No index or git remote is reachable: a bad input
    that got past the checks would fail on the network, not pass."""
    root = tiny_workspace(tmp_path_factory.mktemp("fuzz") / "ws")
    vdir, pdir = root / "vllm", root / "patches"
    p1 = make_patch(vdir, pdir, lambda r: (r / "b.py").write_text("x = 2\n"), "[Perf] b two")

    def edit(r: Path) -> None:
        text = (r / "a.py").read_text()
        (r / "a.py").write_text(text.replace("line 5\n", "five\n").replace("line 30\n", "30\n"))
        (r / "c.py").write_text("".join(f"c = {i}\n" for i in range(6)))

    p2 = make_patch(vdir, pdir, edit, "[Kernel] a and c")
    p2 = p2.rename(pdir / ("0002" + p2.name[4:]))
    (pdir / "series").write_text(f"# a header\n{p1.name} contract=tests/x.py\n{p2.name}\n")
    env = {
        **os.environ,
        "VSERIES_ROOT": str(root),
        "VSERIES_OFFLINE": "1",
        "VSERIES_CACHE": str(root / "cache"),
        "VSERIES_INDEX_URL": "http://127.0.0.1:9/simple",
    }
    for verb in ("apply", "refresh"):  # refresh: patches/ as refresh writes them
        p = subprocess.run([sys.executable, "-m", "vseries", verb], env=env, capture_output=True)
        assert p.returncode == 0, p.stderr
    return root, env


def snapshot(root: Path) -> dict:
    """patches/ and vllm/ byte for byte: every file (vllm/'s outside .git), and vllm/'s HEAD,
    refs, stash and whether an am / rebase is in progress."""
    vdir = root / "vllm"
    files = {
        str(p.relative_to(root)): p.read_bytes()
        for top in ("patches", "vllm")
        for p in sorted((root / top).rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }
    return {
        "files": files,
        "head": git(vdir, "rev-parse", "HEAD"),
        "branch": git(vdir, "rev-parse", "--abbrev-ref", "HEAD"),
        "refs": git(vdir, "for-each-ref", "--format=%(refname) %(objectname)"),
        "busy": [d for d in ("rebase-apply", "rebase-merge") if (vdir / ".git" / d).exists()],
    }


def restore(root: Path, saved: dict) -> None:
    """Undo an example's damage: patches/ as saved."""
    pdir = root / "patches"
    pdir.mkdir(exist_ok=True)
    for p in pdir.iterdir():
        p.unlink()
    for name, data in saved["files"].items():
        if name.startswith("patches/"):
            (root / name).write_bytes(data)


# ---- the faults ------------------------------------------------------------------------------

# A line that no diff parser can take for diff content: its first byte is binary, and it
# holds neither a line break nor '#' (which would make a series line a comment).
JUNK = st.builds(
    lambda first, rest: bytes([first]) + rest,
    st.sampled_from([0, 1, 7, 0x80, 0xC0, 0xFE, 0xFF]),
    st.binary(max_size=30).map(lambda b: b.translate(None, b"\r\n#")),
)


def hunks(lines: list[bytes]) -> list[tuple[int, int]]:
    """(index of the @@ line, index of the last body line) of every hunk."""
    out, i = [], 0
    while i < len(lines):
        if lines[i].startswith(b"@@ -"):
            j = i + 1
            while j < len(lines) and lines[j][:1] in (b" ", b"+", b"-", b"\\"):
                j += 1
            out.append((i, j - 1))
            i = j
        else:
            i += 1
    return out


@st.composite
def patch_fault(draw, patches: dict[str, bytes]) -> tuple[str, dict[str, bytes | None]]:
    """(the broken patch's file name, {file: new bytes}) for one patch of the series."""
    name = draw(st.sampled_from(sorted(n for n in patches if n != "series")))
    lines = patches[name].splitlines(keepends=True)
    spans = hunks(lines)
    kind = draw(st.sampled_from(["truncated", "count", "junk line", "binary", "no diff", "empty"]))
    _seen.append(kind)
    if kind == "truncated":  # cut before the last line of a hunk: the hunk is short
        h, last = draw(st.sampled_from(spans))
        text = b"".join(lines[: draw(st.integers(h + 1, last))])
    elif kind == "count":  # a hunk claims more lines than it has
        h, _ = draw(st.sampled_from(spans))
        old = draw(st.booleans())
        more = draw(st.integers(1, 5))

        def bump(m: re.Match) -> bytes:
            n = int(m.group(2) or b"1") + more
            return m.group(1) + b",%d" % n

        pattern = rb"^(@@ -\d+)(?:,(\d+))?" if old else rb"(\+\d+)(?:,(\d+))?(?= @@)"
        lines[h] = re.sub(pattern, bump, lines[h], count=1)
        text = b"".join(lines)
    elif kind == "junk line":  # a binary line inside a hunk, before its last line
        h, last = draw(st.sampled_from(spans))
        lines.insert(draw(st.integers(h + 1, last)), draw(JUNK) + b"\n")
        text = b"".join(lines)
    elif kind == "binary":
        text = draw(st.binary(min_size=1, max_size=300))
    elif kind == "no diff":  # a mail header, then junk
        text = b"From: a <a@a>\nSubject: [P] x\n\n" + draw(st.binary(max_size=200))
    else:
        text = b""
    return name, {name: text}


MALFORMED = ["duplicate", "missing", "unlisted", "junk", "option", "empty", "gone"]
# what the one series check refuses although the line is well formed (issue 33)
LIMITS = ["unknown option", "huge name", "huge value", "contract escapes"]


@st.composite
def series_fault(
    draw, patches: dict[str, bytes], kinds: list[str]
) -> tuple[str, dict[str, bytes | None]]:
    """("patches/series", {"series": new bytes or None (deleted)})."""
    lines = patches["series"].splitlines(keepends=True)
    listed = [i for i, ln in enumerate(lines) if ln.strip() and not ln.startswith(b"#")]
    kind = draw(st.sampled_from(kinds))
    _seen.append(kind)
    if kind == "duplicate":
        i = draw(st.sampled_from(listed))
        lines.insert(draw(st.integers(1, len(lines))), lines[i])
    elif kind == "missing":  # names a file that does not exist
        stem = draw(st.from_regex(r"[0-9]{4}-[A-Za-z][A-Za-z-]{0,15}", fullmatch=True))
        lines.insert(draw(st.integers(1, len(lines))), f"{stem}.patch\n".encode())
    elif kind == "unlisted":  # a patch file stays, its line goes
        del lines[draw(st.sampled_from(listed))]
    elif kind == "junk":
        lines.insert(draw(st.integers(0, len(lines))), draw(JUNK) + b"\n")
    elif kind == "option":
        i = draw(st.sampled_from(listed))
        bad = draw(st.sampled_from([b"contract", b"=x", b"k=", b"="]))
        lines[i] = lines[i].rstrip(b"\n") + b" " + bad + b"\n"
    elif kind == "unknown option":
        i = draw(st.sampled_from(listed))
        key = draw(st.sampled_from([b"contrct", b"extra", b"Contract", b"bench2", b"x"]))
        lines[i] = lines[i].rstrip(b"\n") + b" " + key + b"=1\n"
    elif kind == "huge name":  # a new line, or a listed name made long
        n = draw(st.sampled_from(HUGE))
        lines.insert(draw(st.integers(1, len(lines))), b"0003-" + b"x" * n + b".patch\n")
    elif kind == "huge value":  # past the value limit (300): 201..300 characters are allowed
        i = draw(st.sampled_from(listed))
        n = draw(st.sampled_from([h for h in HUGE if h > 300]))
        key = draw(st.sampled_from([b"contract=tests/", b"bench="]))
        name = lines[i].split()[0]
        lines[i] = name + b" " + key + b"y" * n + b"\n"
    elif kind == "contract escapes":
        i = draw(st.sampled_from(listed))
        lines[i] = lines[i].split()[0] + b" contract=" + draw(st.sampled_from(ESCAPES)) + b"\n"
    elif kind == "empty":
        lines = []
    else:
        return "patches/series", {"series": None}
    return "patches/series", {"series": b"".join(lines)}


_seen: list[str] = []  # the kind each drawn input is of, in order (for the counts)


@st.composite
def bad_input(draw, patches: dict[str, bytes]) -> tuple[str, dict[str, bytes | None]]:
    named, files = draw(
        st.one_of(
            patch_fault(patches), series_fault(patches, MALFORMED), series_fault(patches, LIMITS)
        )
    )
    if draw(st.booleans()):  # CRLF line ends on top of the fault
        files = {n: t.replace(b"\n", b"\r\n") if t else t for n, t in files.items()}
    return named, files


# ---- the property ----------------------------------------------------------------------------


@pytest.mark.parametrize("part, examples", PARTS)
@pytest.mark.parametrize("verb", list(VERBS))
def test_bad_series_or_patch_is_refused_cleanly(ws, verb, part, examples):
    root, env = ws
    saved = snapshot(root)
    patches = {
        n.removeprefix("patches/"): b for n, b in saved["files"].items() if n.startswith("patches/")
    }
    tried, kinds = [0], {}

    @seed(100 * part + list(VERBS).index(verb))  # other inputs for each verb and part
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(bad_input(patches))
    def run(case):
        named, files = case
        tried[0] += 1
        kind = _seen[-1] if _seen else "?"
        kinds[kind] = kinds.get(kind, 0) + 1
        try:
            for name, text in files.items():
                target = root / "patches" / name
                if text is None:
                    target.unlink()
                else:
                    target.write_bytes(text)
            before = snapshot(root)
            p = subprocess.run(
                [sys.executable, "-m", "vseries", *VERBS[verb]],
                env=env,
                capture_output=True,
                text=True,
                errors="replace",
            )
            out = p.stdout + p.stderr
            assert "Traceback" not in out, out
            assert p.returncode == 2, out
            assert named in p.stderr, p.stderr
            assert "\n  next: " in p.stderr, p.stderr
            assert snapshot(root) == before, "patches/ or vllm/ changed"
        finally:
            restore(root, saved)

    run()
    print(f"\nfuzz {verb}: {tried[0]} generated inputs, each refused with nothing lost")
    print("  by kind: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    assert tried[0] >= examples
