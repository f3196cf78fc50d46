"""What became of each patch when the series moved to a new upstream release.

The evidence the rebase verb collects for one patch, and the Markdown report it writes:

- upstreamed: the patch applies in reverse on the new tree (``git apply -R --check``); or its
  patch-id equals that of upstream's own change to the same files between the two releases;
  or ``git am -3`` finds nothing left to change; or its contract test passes on plain upstream.
- partly upstreamed: the 3-way merge dropped some of the patch's changed lines because the new
  release already has them; the rest is carried (the reduced patch is what refresh exports).
- carried clean / carried with 3-way merge: the change is the same; what moved (a renamed
  file, hunk offsets) is listed.
- conflict: neither applies nor is shown to be upstream; files and hunks are listed.
"""

import re
import shutil
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import asdict, dataclass, field
from difflib import SequenceMatcher
from pathlib import Path

from vseries import contract, git

UPSTREAMED, PARTLY = "upstreamed", "partly upstreamed"
CLEAN, THREE_WAY = "carried clean", "carried with 3-way merge"
RESOLVED = "carried, resolved by hand"
CONFLICT, SKIPPED = "conflict", "dropped by --skip"


@dataclass
class Row:
    """The decision on one patch of the series.

    Attributes:
        name: patch file name in patches/ (before the rebase).
        subject: its Subject line.
        cls: one of the class names above.
        evidence: sentences that justify the class (each one checkable by a git command).
        old: the patch's commit on the old pin (for range-diff); "" when it has none.
        new: its commit on the new upstream; "" when it is not carried.
        options: the series options of the patch (contract=...), carried to the new series.
    """

    name: str
    subject: str
    cls: str = ""
    evidence: list[str] = field(default_factory=list)
    old: str = ""
    new: str = ""
    options: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


# ---- reading diffs -------------------------------------------------------------------------

_FILE = re.compile(r"^diff --git a/(\S+) b/(\S+)$")
_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@(.*)$")


def parse(diff: str) -> dict[str, list[tuple[int, str, list[str]]]]:
    """Split a diff (or a patch email) into {path after the change: [(old start line, hunk
    header, signed changed lines)]}. Context lines are left out: they move when upstream
    changes, the change itself does not."""
    files: dict[str, list] = {}
    hunks = None
    for line in diff.replace("\r\n", "\n").splitlines():
        m = _FILE.match(line)
        if m:
            hunks = files.setdefault(m.group(2), [])
            continue
        m = _HUNK.match(line)
        if m and hunks is not None:
            hunks.append((int(m.group(1)), line.split(" @@")[0] + " @@", []))
            continue
        if hunks and line[:1] in "+-" and not line.startswith(("+++ ", "--- ")):
            hunks[-1][2].append(line)
    return files


def touched(diff: str) -> list[str]:
    """Every path a diff names (before and after a rename), in order."""
    out = []
    for line in diff.splitlines():
        m = _FILE.match(line)
        if m:
            out += [m.group(1), m.group(2)]
    return list(dict.fromkeys(out))


def _lines(files) -> Counter:
    return Counter(ln for hunks in files.values() for _, _, lines in hunks for ln in lines)


def compare(original: str, replayed: str) -> tuple[list[str], list[str], list[str]]:
    """Compare a patch with its replay on the new upstream.

    Returns:
        (moved, dropped, added): moved = renamed files and hunk offsets ("a.py -> b.py",
        "a.py: 2 of 3 hunks moved (+15 lines)"); dropped = the original's hunks whose
        changed lines the replay no longer has (already upstream), each as "path: header";
        added = changed lines the replay has and the original has not (a hand resolution).
    """
    old, new = parse(original), parse(replayed)
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
    for p, hunks in old.items():
        q = rename.get(p, p)
        starts = {tuple(lines): start for start, _, lines in new.get(q, [])}
        shifts = [
            starts[tuple(lines)] - start
            for start, _, lines in hunks
            if starts.get(tuple(lines)) not in (None, start)
        ]
        if shifts:
            moved.append(
                f"{q}: {len(shifts)} of {len(hunks)} hunks moved "
                f"({', '.join(f'{d:+d}' for d in sorted(set(shifts)))} lines)"
            )
    missing = _lines(old) - _lines(new)
    dropped = []
    for p, hunks in old.items():
        for _, header, lines in hunks:
            if any(missing[ln] for ln in lines):
                dropped.append(
                    f"{p}: {header} ({sum(1 for ln in lines if missing[ln])} of "
                    f"{len(lines)} changed lines already upstream)"
                )
    added = sorted((_lines(new) - _lines(old)).elements())
    return moved, dropped, added


def upstream_made(vdir: Path, old_base: str, new_base: str, paths: list[str]) -> set[str]:
    """The lines upstream added to ``paths`` between the two releases (renames followed)."""
    diff = git.run(vdir, "diff", "-M", old_base, new_base, "--", *paths)
    return {ln[1:] for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")}


def conflict_hunks(
    vdir: Path, files: list[str], patch_text: str = "", most: int = 3, lines: int = 16
) -> list[str]:
    """The conflict regions (<<<<<<< ... >>>>>>>) git left in ``files``, with line numbers and
    the hunk of the patch (from ``patch_text``) whose added lines are the patch's side."""
    hunks = [
        (p, header, {ln[1:] for ln in changed if ln[:1] == "+"})
        for p, hs in parse(patch_text).items()
        for _, header, changed in hs
    ]
    out = []
    for f in files:
        if not (vdir / f).is_file():  # e.g. deleted on one side: nothing to show
            continue
        text = (vdir / f).read_text(errors="replace").splitlines()
        starts = [i for i, ln in enumerate(text) if ln.startswith("<<<<<<< ")][:most]
        for i in starts:
            end = next((j for j in range(i, len(text)) if text[j].startswith(">>>>>>> ")), i)
            mid = next((j for j in range(i, end) if text[j] == "======="), i)
            theirs = set(text[mid + 1 : end])
            same_file = sorted(hunks, key=lambda h: h[0] != f)  # this file's hunks first
            which = next(
                (f" (the patch's hunk {p}: {h})" for p, h, added in same_file if added & theirs), ""
            )
            body = text[i : min(end + 1, i + lines)] + (["    ..."] if end + 1 > i + lines else [])
            out.append(f"{f}:{i + 1}{which}:\n" + "\n".join("    " + b for b in body))
    return out


def part_of_the_way(original: str, replayed: str, made: set[str]) -> list[str]:
    """Lines showing that upstream already made part of the patch's change, when that is the
    whole difference between the patch and its replay; else [].

    A line counts when upstream wrote it (it is in ``made``) where the patch removes a line,
    and it is closer to one of the patch's added lines than any line the replay no longer
    removes is (upstream went part of the way the patch goes, e.g. one of two arguments).
    """
    old, new = _lines(parse(original)), _lines(parse(replayed))
    extra, missing = new - old, old - new
    removed = [ln[1:] for ln in missing if ln[:1] == "-"]
    plus = [ln[1:] for ln in old if ln[:1] == "+"]
    ratio = lambda a, b: SequenceMatcher(None, a, b).ratio()  # noqa: E731
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


# ---- evidence from git -----------------------------------------------------------------------


def reverse_applies(vdir: Path, patch: Path) -> bool:
    """True when the patch applies in reverse on vdir's work tree: its change is there."""
    return git.ok(vdir, "apply", "-R", "--check", str(patch))


def same_patch_id(vdir: Path, patch_text: str, old_base: str, new_base: str) -> bool:
    """True when upstream's own diff of the patch's files between the two releases has the
    patch's patch-id (the same change, whatever the commit message)."""
    paths = touched(patch_text)
    if not paths:
        return False
    diff = git.run(vdir, "diff", "--full-index", old_base, new_base, "--", *paths)
    mine = git.patch_id(vdir, patch_text)
    return bool(diff) and mine is not None and git.patch_id(vdir, diff + "\n") == mine


# how pytest's JUnit report starts the message of a failed assertion (or pytest.fail)
_ASSERTED = ("AssertionError", "assert ", "Failed:")


def contract_verdict(test: str, tree: Path) -> tuple[str, str]:
    """Run a patch's contract test on plain upstream (``tree``).

    Only an assertion decides: a test that fails with AssertionError (or pytest.fail) says
    the change is still needed; a run where tests pass and none fails on an assertion says
    upstream keeps the contract (skipped tests are named). A failure of another kind (an
    ImportError because upstream moved the module, a TypeError because an API changed) means
    the contract could not reach the code it checks in this release, and decides nothing;
    neither does a run where everything skipped (e.g. a GPU-only test on a CPU host).

    Returns:
        ("pass" | "fail" | "undecided", a sentence with pytest's closing line and the reason).
    """
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        r = contract.run_one(test, tree, ["--junitxml", str(xml)])
        cases = _junit(xml)
    failed = [(n, m) for n, k, m in cases if k in ("failure", "error")]
    asserted = [(n, m) for n, m in failed if m.startswith(_ASSERTED)]
    skipped = [(n, m) for n, k, m in cases if k == "skipped"]
    gpu = "" if _has_gpu() else " (this host has no CUDA GPU)"
    skips = (
        f"; skipped: {skipped[0][1].splitlines()[0][:120]}"
        + (gpu if "cuda" in skipped[0][1].lower() or "gpu" in skipped[0][1].lower() else "")
        if skipped
        else ""
    )
    if asserted:
        return "fail", f"{r.line}; {asserted[0][0]}: {asserted[0][1].splitlines()[0][:160]}"
    if failed:
        return "undecided", (
            f"{r.line}; it could not reach the code it checks in this release "
            f"({failed[0][1].splitlines()[0][:160]}), so it has to be brought "
            "up to date for it"
        )
    if r.code == 0 and any(k == "passed" for _, k, _ in cases):
        return "pass", r.line + skips
    return "undecided", (
        f"nothing passed or failed: {r.line}" if r.code == 0 else f"{r.outcome}: {r.line}"
    ) + skips


def contract_kept(test: str, old_tree: Path, new_tree: Path) -> list[str]:
    """Names of the contract's tests that fail on an assertion in ``old_tree`` (the old pin)
    and pass in ``new_tree`` (plain new upstream): the part upstream took.

    Args:
        test: contract test file, relative to the workspace root.
        old_tree, new_tree: vLLM checkouts to import (PYTHONPATH).
    """
    runs = []
    for tree in (old_tree, new_tree):
        with tempfile.TemporaryDirectory() as tmp:
            xml = Path(tmp) / "junit.xml"
            contract.run_one(test, tree, ["--junitxml", str(xml)])
            runs.append({n: (k, m) for n, k, m in _junit(xml)})
    old, new = runs
    return [
        n
        for n, (k, m) in old.items()
        if k == "failure" and m.startswith(_ASSERTED) and new.get(n, ("",))[0] == "passed"
    ]


def _junit(xml: Path) -> list[tuple[str, str, str]]:
    """(test name, passed | failure | error | skipped, message) from pytest's JUnit XML."""
    if not xml.exists():
        return []
    out = []
    for case in ET.parse(xml).getroot().iter("testcase"):
        kinds = [
            (c.tag, c.get("message") or (c.text or ""))
            for c in case
            if c.tag in ("failure", "error", "skipped")
        ]
        out.append((case.get("name", "?"), *(kinds[0] if kinds else ("passed", ""))))
    return out


def _has_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None or Path("/dev/nvidiactl").exists()


# ---- the report ----------------------------------------------------------------------------


def range_diff(vdir: Path, old: str, new: str) -> str:
    """``git range-diff`` of one patch: its commit on the old pin against the new one."""
    # one commit on each side, known to be the same patch: pair them whatever changed
    return git.run(
        vdir,
        "range-diff",
        "--no-color",
        "--creation-factor=999",
        f"{old}^..{old}",
        f"{new}^..{new}",
        check=False,
    )


def report(vdir: Path, head: dict, rows: list[Row]) -> str:
    """The Markdown report: a summary, a row per patch with its class and evidence, and a
    range-diff of every carried patch whose content changed.

    Args:
        head: {"title": str, "lines": [str]} for the summary block.
    """
    out = [
        f"# {head['title']}",
        "",
        *[f"- {x}" for x in head["lines"]],
        "",
        "| # | patch | class | evidence |",
        "| --- | --- | --- | --- |",
    ]
    details = []
    for i, r in enumerate(rows, 1):
        cell = [
            e.splitlines()[0].replace("|", "\\|") + (" (details below)" if "\n" in e else "")
            for e in r.evidence
        ]
        out.append(
            f"| {i} | {r.subject.replace('|', '/')} (`{r.name}`) | **{r.cls}** | "
            f"{'<br>'.join(cell) or '-'} |"
        )
        details += [(r, e) for e in r.evidence if "\n" in e]
    if details:
        out += ["", "## Details"]
        for r, e in details:
            first, rest = e.split("\n", 1)
            out += ["", f"{r.name}: {first}", "", "```", rest.rstrip(), "```"]
    changed = [r for r in rows if r.new and r.old and r.cls in (PARTLY, RESOLVED, THREE_WAY)]
    diffs = [(r, range_diff(vdir, r.old, r.new)) for r in changed]
    diffs = [(r, d) for r, d in diffs if d and not re.match(r"^\s*\d+:\s+\w+\s+=\s+", d)]
    if diffs:
        out += ["", "## Patches whose content changed (git range-diff old pin -> new)"]
        for r, d in diffs:
            out += ["", f"### {r.subject}", "", "```diff", d, "```"]
    return "\n".join(out) + "\n"
