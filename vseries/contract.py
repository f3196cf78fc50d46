"""contract: run each patch's contract test against the plain pin (base) and the patched tree.

A contract is a behaviour the patch promises (tests/contract/test_*.py, named by the series
option ``contract=``). It must fail on the base and pass with the patch; a contract that
passes on the base tests nothing, and is reported as an error. The same runner answers the
rebase tool's question "does plain upstream already keep this contract?".

A contract file may also hold guards (``@pytest.mark.guard``): checks of the patched tree
that the base passes by construction (e.g. "the shipped kernel compiles like the fully
specialised one", which on the base compares the kernel with itself). They run with the
patch only, never on the base or on plain upstream, where they could not fail.
"""

import os
import re
import textwrap
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from vseries import git, host, linesite, patchfile, pytestrun, retired, series, worktree
from vseries.errors import SeriesError
from vseries.pytestrun import Case
from vseries.workspace import Workspace

# pytest exit codes: 0 passed, 1 some failed, 5 nothing collected (a failure here).
OUTCOME = {0: "pass", 1: "fail", 5: "no tests"}
# -m expressions: the contract alone (base, plain upstream), and with its guards (patched).
CONTRACT = "contract and not guard"
WITH_GUARDS = "contract"


def jobs() -> int:
    """How many contract runs go at once: on a host without a GPU one per CPU core (at most
    4), each run being an interpreter that imports torch and vLLM on one core; on a GPU host
    one, so that no two runs share the device. VSERIES_CONTRACT_JOBS sets it. With more than
    one, the contract tier runs the contracts of one tree in one interpreter (check_many)."""
    if os.environ.get("VSERIES_CONTRACT_JOBS"):
        return max(1, int(os.environ["VSERIES_CONTRACT_JOBS"]))
    return 1 if host.has_gpu() else min(4, os.cpu_count() or 1)


@dataclass
class Result:
    """One contract run: exit code, pytest's closing line, the tree it ran against, the
    reasons of skipped tests (pytest -rs), so that a GPU part skipped on a CPU host says so,
    and the test cases of its JUnit report."""

    code: int
    line: str
    tree: str
    skips: tuple[str, ...] = ()
    cases: list[Case] = field(default_factory=list)

    @property
    def outcome(self) -> str:
        return OUTCOME.get(self.code, f"error (exit {self.code})")


def run_one(
    test: str,
    tree: Path | None,
    extra: list[str] = (),
    root: Path | None = None,
    cpu_only: bool = False,
    marks: str = CONTRACT,
    paths: list[Path] = (),
) -> Result:
    """Run one contract test file with pytest in a fresh interpreter.

    Args:
        test: path of the test file, relative to the workspace root.
        tree: a vLLM checkout to import instead of the installed vllm (PYTHONPATH), or None.
        extra: more pytest arguments (e.g. ["-k", "name"]).
        root: the workspace root pytest runs in (default: the current workspace's).
        cpu_only: hide every CUDA device (CUDA_VISIBLE_DEVICES=""): only the part of the
            contract that decides on the CPU runs, the same on every host; GPU parts skip.
        marks: which of its tests (-m): CONTRACT, or WITH_GUARDS for the patched tree.
        paths: folders put on PYTHONPATH after the tree (a kept line's own packages,
            linesite.pythonpath).
    """
    root = root or Workspace.current().root
    r = pytestrun.run(
        ["-rs", "-m", marks, test, *extra],
        cwd=root,
        pythonpath=[*([tree] if tree else []), *paths],
        env={"CUDA_VISIBLE_DEVICES": ""} if cpu_only else None,
    )
    return Result(r.code, r.closing, str(tree or "installed vllm"), r.skip_lines, r.cases)


def check_all(ws: Workspace, base: bool = True) -> list[tuple[series.Entry, Result, Result | None]]:
    """Run every patch's contract against the patched tree and, when ``base``, against the
    plain pin. The main line's patched tree is the installed vllm; a kept line's is its own
    checkout (``.vseries/lines/<tag>/vllm``, on PYTHONPATH), and both trees of a kept line
    get its own packages after them (linesite.pythonpath). Returns (entry, patched result,
    base result)."""
    if ws.line and not git.is_repo(ws.vllm):
        raise SeriesError(
            f"the line {ws.line} is not set up ({ws.rel(ws.vllm)} is missing)",
            "scripts/setup.sh   # sets up every kept line's trees beside the main line",
        )
    entries = series.load(ws)
    for e in entries:
        if not e.contract:
            raise SeriesError(
                f"patch {e.name} names no contract test in {ws.rel(ws.series_file)}",
                f"add contract=tests/contract/test_<name>.py to its line in "
                f"{ws.rel(ws.series_file)}",
            )
        if not (ws.root / e.contract).exists():
            near = sorted(p.name for p in (ws.root / "tests" / "contract").glob("test_*.py"))
            raise SeriesError(
                f"contract {e.contract} of {e.name} does not exist (tests/contract/ holds "
                f"{', '.join(near) or 'none'})",
                f"git diff -- {ws.rel(ws.series_file)}   # a misspelt contract=? then fix it "
                f"there, or git checkout -- {ws.rel(ws.series_file)}",
            )
    base_dir = worktree.base_tree(ws) if base else None
    patched_dir = ws.vllm if ws.line else None
    return check_many(entries, base_dir, patched_dir, root=ws.root, paths=linesite.pythonpath(ws))


def run_many(
    tests: list[str], tree: Path | None, root: Path, marks: str, paths: list[Path] = ()
) -> dict[str, Result]:
    """The contract files ``tests`` in one pytest run on ``tree`` (torch and vLLM imported
    once, not once per file: 35 s of CPU instead of 78 s for seven contracts on 2 cores); a
    Result per file, from its cases in the run's JUnit report. A file with no case there (a
    run that broke off) gets code 5. ``paths``: as run_one's."""
    r = pytestrun.run(
        ["-rs", "-m", marks, "--continue-on-collection-errors", *tests],
        cwd=root,
        pythonpath=[*([tree] if tree else []), *paths],
    )
    out = {}
    for test in tests:
        path = (root / test).resolve()
        cases = [c for c in r.cases if c.file and (root / c.file).resolve() == path]
        kinds = [c.kind for c in cases]
        code = 5 if not cases else 1 if {"failure", "error"} & set(kinds) else 0
        skips = tuple(x for x in r.skip_lines if test in x)
        line = f"{counted(cases)} (one run with the tree's other contracts)"
        out[test] = Result(code, line, str(tree or "installed vllm"), skips, cases)
    return out


def counted(cases: list[Case]) -> str:
    """A run's cases as every row of the contract table says them, e.g. "2 failed, 5 passed"
    (pytest's own closing line adds deselected tests, warnings and seconds)."""
    kinds = [c.kind for c in cases]
    counts = [
        (kinds.count("failure"), "failed"),
        (kinds.count("passed"), "passed"),
        (kinds.count("skipped"), "skipped"),
        (kinds.count("error"), "errors"),
    ]
    return ", ".join(f"{n} {what}" for n, what in counts if n) or "no tests ran"


def check_many(
    entries: list[series.Entry],
    base_dir: Path | None,
    patched_dir: Path | None = None,
    root: Path | None = None,
    paths: list[Path] = (),
) -> list[tuple[series.Entry, Result, Result | None]]:
    """check_one for each entry; the rows in the entries' order. With jobs() above one (a
    host without a GPU) the contracts of a tree run in one interpreter (run_many), the trees
    side by side, and a contract whose outcome there is not the expected one (fail on the
    base, pass patched) runs again alone: that run is the one reported. With one job (a GPU
    host) every contract runs alone, one at a time. ``paths``: as run_one's."""
    root = root or Workspace.current().root
    if jobs() == 1:
        return [check_one(e, base_dir, patched_dir, root, paths) for e in entries]
    tests = list(dict.fromkeys(e.contract for e in entries))
    with ThreadPoolExecutor(jobs()) as pool:
        patched = pool.submit(run_many, tests, patched_dir, root, WITH_GUARDS, paths)
        base = pool.submit(run_many, tests, base_dir, root, CONTRACT, paths) if base_dir else None
        patched, base = patched.result(), base.result() if base else None
        again = {}
        for e in entries:
            if patched[e.contract].code != 0:
                again[e.contract, "patched"] = pool.submit(
                    run_one, e.contract, patched_dir, root=root, marks=WITH_GUARDS, paths=paths
                )
            if base is not None and base[e.contract].code != 1:
                again[e.contract, "base"] = pool.submit(
                    run_one, e.contract, base_dir, root=root, paths=paths
                )
        rows = []
        for e in entries:
            p = again.get((e.contract, "patched"))
            b = again.get((e.contract, "base"))
            rows.append(
                (
                    e,
                    p.result() if p else patched[e.contract],
                    (b.result() if b else base[e.contract]) if base is not None else None,
                )
            )
        return rows


def check_upstreamed(ws: Workspace) -> list[tuple[retired.Record, Result]]:
    """The contracts of the patches upstream took (patches/retired.toml, kind upstreamed), on
    the plain pin: each must pass there (a guard: a failure means upstream regressed or
    reverted it). A dropped patch's contract is not run: it fails on the pin by design."""
    records = [r for r in retired.load(ws) if r.guard]
    if not records:
        return []
    base_dir = worktree.base_tree(ws)
    paths = linesite.pythonpath(ws)
    with ThreadPoolExecutor(jobs()) as pool:
        runs = [
            pool.submit(run_one, r.contract, base_dir, root=ws.root, paths=paths) for r in records
        ]
        return [(r, run.result()) for r, run in zip(records, runs, strict=True)]


def retired_prefix(r: retired.Record) -> str:
    """The start of a retired patch's row, e.g. `retired, was v0.21.0's `: its number is the
    one it had in the series it left (the line it was carried on, for an upstreamed patch; the
    pin's series, for a dropped one), which a patch of today's series may now carry."""
    return f"retired, was {r.left_from or r.left_at}'s "


def full_title(name: str, subject: str = "", prefix: str = "", renumbered: bool = False) -> str:
    """The line under a retired patch's row when ``label`` cut its Subject: the whole of it;
    ``renumbered`` (a patch dropped from the pin's own series, whose later patches moved up):
    that its number is the one it had then, which today's series gives another patch. Wrapped
    at 100 columns (a Subject can be a sentence long)."""
    if len(prefix + f"{name.split('-', 1)[0]} {subject}") <= 58 or not subject:
        return ""
    then = " (its number then; today's patch of that number is another)" if renumbered else ""
    return textwrap.fill(
        subject + then, 100, initial_indent="    title:   ", subsequent_indent=" " * 13
    )


def label(name: str, subject: str = "", prefix: str = "") -> str:
    """A patch's first column: its number and Subject (else its file name), cut with an
    ellipsis to fit 58 characters."""
    number = name.split("-", 1)[0]
    text = prefix + (f"{number} {subject}" if subject and number.isdigit() else name)
    return text if len(text) <= 58 else text[:57] + "…"


def _subject(e: series.Entry) -> str:
    """The Subject of a series entry's patch file, or "" (an entry made by hand, a file gone)."""
    try:
        return patchfile.subject(e.path) if e.path.is_file() else ""
    except ValueError:  # not read from a series file: no folder to find it in
        return ""


def report_upstreamed(rows) -> bool:
    """Print the guards' table; True when every one passes on the plain pin."""
    good = True
    for r, res in rows:
        verdict = "ok (still upstream)"
        if res.code != 0:
            verdict, good = "FAILS ON THE PIN: upstream regressed or reverted it", False
        print(
            f"{label(r.name, r.subject, retired_prefix(r)):58} {res.outcome:10} {'-':10} {verdict}"
        )
        since = f"; upstream since {r.taken_in}" if r.taken_in else ""
        print(
            f"    left the series at the move to {r.left_at}, its contract runs on the pin{since}"
        )
        if title := full_title(r.name, r.subject, retired_prefix(r)):
            print(title)
        print(f"    pin:     {counted(res.cases) if res.cases else res.line}")
    return good


def first_sentence(text: str, limit: int = 300) -> str:
    """The first sentence of ``text``, whole (a cut mid-sentence reads as a different claim);
    past ``limit`` characters it ends with an ellipsis."""
    one = " ".join(text.split())
    end = one.find(". ")
    one = one if end < 0 else one[: end + 1]
    return one if len(one) <= limit else one[: limit - 3].rstrip() + "..."


def report_dropped(ws: Workspace) -> None:
    """Name the patches dropped by hand (patches/retired.toml, kind dropped): their contracts
    are not run (they fail on the pin by design)."""
    for r in retired.load(ws):
        if r.kind == retired.DROPPED:
            name = label(r.name, r.subject, retired_prefix(r))
            print(f"{name:58} {'-':10} {'-':10} dropped at {r.left_at}: not run")
            if title := full_title(r.name, r.subject, retired_prefix(r), renumbered=True):
                print(title)
            print(f"    why: {first_sentence(r.why)}")


def check_one(
    e: series.Entry,
    base_dir: Path | None,
    patched_dir: Path | None = None,
    root: Path | None = None,
    paths: list[Path] = (),
) -> tuple[series.Entry, Result, Result | None]:
    """One patch's contract with its guards on the patched tree (None: the installed vllm),
    and without them on the base (None: not run); ``root``: the workspace root; ``paths``:
    as run_one's."""
    patched = run_one(e.contract, patched_dir, root=root, marks=WITH_GUARDS, paths=paths)
    base = run_one(e.contract, base_dir, root=root, paths=paths) if base_dir else None
    return e, patched, base


def report(rows) -> bool:
    """Print the table; True when every contract passes patched and fails on the base."""
    good = True
    print(f"{'patch':58} {'base':10} {'patched':10} verdict")
    for e, patched, base in rows:
        verdict = "ok"
        if patched.code != 0:
            verdict, good = "FAILS WITH THE PATCH", False
        elif base is not None and base.code == 0:
            verdict, good = "PASSES ON BASE: tests nothing", False
        first = label(e.name, _subject(e))
        print(f"{first:58} {base.outcome if base else '-':10} {patched.outcome:10} {verdict}")
        print(f"    patched: {patched.line}")
        for why in patched.skips:
            print(f"      skipped {why}")
        if base is not None:
            print(f"    base:    {base.line}")
    counts = Counter()
    for _, patched, _ in rows:
        counts.update({k: int(n) for n, k in re.findall(r"(\d+) (passed|skipped)", patched.line)})
    ok = sum(1 for e, patched, base in rows if patched.code == 0 and not (base and base.code == 0))
    print(
        f"{ok} of {len(rows)} contracts ok; patched, all together: {counts['passed']} passed, "
        f"{counts['skipped']} skipped (each row above says why)"
    )
    return good


def main(args) -> int:
    ws = Workspace.current()
    if not args.patched_only:
        retired.load(ws)  # a record it cannot read stops it now, not after minutes of runs
    ok = report(check_all(ws, base=not args.patched_only))
    if not args.patched_only:
        ok = report_upstreamed(check_upstreamed(ws)) and ok
        report_dropped(ws)
    return 0 if ok else 1


def add_parser(sub) -> None:
    p = sub.add_parser(
        "contract",
        help="run each patch's contract on base and patched",
        description="Run each patch's contract test (the contract= option in patches/series) "
        "on the installed patched vLLM and on a clean checkout of the pin; a contract must "
        "fail on the base and pass with the patch.",
    )
    p.add_argument("--patched-only", action="store_true", help="skip the run on the base")
    p.set_defaults(func=main)
