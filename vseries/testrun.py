"""test: run the tiers — workspace (CPU), contract (base vs patched), upstream (CUDA hosts).

``--fast`` is the edit-test loop: the workspace tier without the tests marked ``slow`` (real
rebases, the real series end to end). The full run (what CI runs) is every tier with every
test. ``--line <tag>``: that kept line's contract tier alone. A workspace test not marked
slow that takes more than a few seconds is named at the end (the tier check in
tests/workspace/conftest.py; only ten times that fails the run). A tier that fails, or that
collects no test, makes the run fail. The upstream tier needs a CUDA device; without one it is
reported as not run, with the reason, and does not count as a pass or a failure.
"""

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence

from vseries import contract, host, linesite, upstream, worktree
from vseries import pin as pinmod
from vseries.errors import SeriesError
from vseries.pytestrun import PYTEST
from vseries.workspace import Workspace

TIERS = ("workspace", "contract", "upstream")
FAST = ("workspace",)
WORKERS = 4  # most processes the fast tier runs its tests in


def installed_tree_ok(ws: Workspace) -> None:
    """Refuse to test vLLM before the main job has run: vllm must import from vllm/."""
    ok, where = host.probe("import importlib.util as u; print(u.find_spec('vllm').origin)")
    if not ok or not where.startswith(str(ws.vllm)):
        raise SeriesError(
            f"vllm is not installed from {ws.vllm} ({where if ok else 'absent'})",
            "scripts/setup.sh",
        )


def slow_tests(ws: Workspace) -> int:
    """How many tests of tests/workspace are marked slow (pytest's collection)."""
    p = subprocess.run(
        [*PYTEST, "--co", "-m", "slow", "tests/workspace"],
        cwd=ws.root,
        capture_output=True,
        text=True,
    )
    m = re.search(r"(\d+)/\d+ tests? collected", p.stdout)
    return int(m.group(1)) if m else 0


def tier_workspace(ws: Workspace, fast: bool) -> bool:
    """pytest tests/workspace, output as it runs, on up to WORKERS processes (pytest-xdist),
    one test handed out at a time (the slow tests, collected first, start first; a worker
    that finishes takes the next). fast: without the tests marked slow."""
    workers = min(WORKERS, os.cpu_count() or 1)
    args = ["tests/workspace", "-n", str(workers), "--maxschedchunk", "1"]
    if fast:
        print(
            f"workspace tier, fast: {slow_tests(ws)} tests marked slow left out; {workers} workers"
        )
        args += ["-m", "not slow"]
    else:  # the slowest tests named at the end: where the suite's time goes
        print(f"workspace tier: {workers} workers")
        args += ["--durations", "15"]
    code = subprocess.call([*PYTEST, *args], cwd=ws.root)
    if code == 5:
        print("workspace tier: collected no test — that is a failure")
    return code == 0


def tier_contract(ws: Workspace, fast: bool) -> bool:
    """Every patch's contract, base vs patched, for this line and (on the main line) for each
    kept line (``lines/<tag>/``); the contracts of upstreamed patches on the plain pin (dropped
    patches are named, not run)."""
    good = True
    for line in [ws, *([] if ws.line else ws.lines())]:
        pin = pinmod.load(line.pin_file)
        print(f"contract tier{line.label or ' (main line)'}: {pin.tag}, {line.rel(line.vllm)}")
        good = contract.report(contract.check_all(line, base=True)) and good
        guards = contract.check_upstreamed(line)
        if guards:
            print(f"upstreamed patches{line.label}: their contracts on plain {pin.tag}")
            good = contract.report_upstreamed(guards) and good
        contract.report_dropped(line)
    return good


def tier_upstream(ws: Workspace, fast: bool) -> bool | None:
    if not host.torch_cuda():
        print(
            "upstream tier: not run — no CUDA device here. It runs vLLM's own kernel tests "
            "(tests/upstream.toml) on base and patched; on a CUDA host (Hopper for the FP8 "
            "parts): scripts/test.sh --tier upstream"
        )
        return None
    text, ok = upstream.compare(
        worktree.base_tree(ws),
        ws.vllm,
        upstream.load_selections(ws.root / "tests/upstream.toml"),
        ws.state / "upstream",
        pythonpath=os.pathsep.join(str(p) for p in linesite.pythonpath(ws)),  # a kept line's
    )
    print(text)
    (ws.state / "upstream-report.md").write_text(text)
    return ok


RUN = {"workspace": tier_workspace, "contract": tier_contract, "upstream": tier_upstream}

# A whole run writes 4-5 GB of trees and clones to the temporary folder (pytest's tmp_path).
TMP_NEED = 6 << 30


def disk_note(need: int) -> str | None:
    """A line saying the temporary folder has less than ``need`` bytes free, else None."""
    low = host.short_of_disk(need, [tempfile.gettempdir()])
    if not low:
        return None
    return (
        f"test: {low[0]} in the temporary folder; a whole run writes about 5 GB there, and a "
        "full disk fails tests with 'No space left on device': free some (df -h) or set TMPDIR"
    )


def tiers_of(args) -> list[str]:
    """The tiers to run: --tier's; else --fast's (the workspace tier); else with --line the
    line's contract tier alone (the workspace tier tests the tool, which is the same on every
    line, from the main line's venv); else every tier. Raises SeriesError on --line with the
    workspace tier or --fast."""
    if args.line and (args.fast or "workspace" in (args.tier or [])):
        raise SeriesError(
            "the workspace tier tests the tool, not a line: it runs on the main line "
            f"(--line {args.line[:80]} runs that line's contract tier)",
            "scripts/test.sh --fast   # or scripts/test.sh --tier workspace",
        )
    if args.tier:
        return args.tier
    if args.fast:
        return list(FAST)
    return ["contract"] if args.line else list(TIERS)


def main(args) -> int:
    ws = Workspace.current()
    tiers = tiers_of(args)
    if args.line:
        ws = ws.kept(args.line, "scripts/test.sh")
    if set(tiers) & {"contract", "upstream"} and not ws.line:  # these import the installed vLLM
        installed_tree_ok(ws)
    if note := disk_note(TMP_NEED if not args.fast else TMP_NEED // 4):
        print(note)
    results = {}
    for t in tiers:
        print(f"\n=== tier {t} " + "=" * 60)
        start = time.monotonic()
        results[t] = (RUN[t](ws, args.fast), time.monotonic() - start)
    print("\n=== summary " + "=" * 60)
    width = shutil.get_terminal_size().columns
    for t, (ok, secs) in results.items():
        state = "not run (no CUDA)" if ok is None else "passed" if ok else "FAILED"
        print(f"  {t:10} {state:20} {secs:6.1f} s"[:width])
    left = [t for t in TIERS if t not in tiers] if args.fast else []
    if args.fast:
        print(f"  --fast: tests marked slow deselected; not run: {', '.join(left) or '-'}"[:width])
    last = verdict(results, left)
    if last.startswith("FAILED") and (note := disk_note(1 << 30)):
        print(note)
    print(last)
    return 0 if last.startswith("PASSED") else 1


def verdict(results: dict, left_out: Sequence[str] = ()) -> str:
    """The run's last line: which tiers failed, that none could run on this host (nothing was
    tested: exit status 1 too), or that every tier that ran passed, which could not run on
    this host and which --fast left out (the exit status says the same)."""
    failed = [t for t, (ok, _) in results.items() if ok is False]
    if failed:
        return f"FAILED: {', '.join(failed)} (exit status 1; the tier's output above says why)"
    absent = [t for t, (ok, _) in results.items() if ok is None]
    if len(absent) == len(results):
        return (
            f"NOT RUN: no tier asked for could run on this host ({', '.join(absent)}); nothing "
            "was tested (exit status 1)"
        )
    note = f"; not run on this host: {', '.join(absent)}" if absent else ""
    note += f"; left out by --fast: {', '.join(left_out)}" if left_out else ""
    return f"PASSED: every tier that ran{note} (exit status 0)"


def add_parser(sub) -> None:
    p = sub.add_parser(
        "test",
        help="run the test tiers: workspace, contract, upstream",
        description="Run the test tiers: workspace (the tool, on CPU), contract (each patch's "
        "contract: fails on the base, passes patched), upstream (vLLM's own kernel tests, "
        "base vs patched; CUDA hosts only). --fast: the workspace tier without slow tests.",
    )
    p.add_argument("--tier", action="append", choices=TIERS, help="run only this tier (repeat)")
    p.add_argument(
        "--fast",
        action="store_true",
        help="the quick loop: workspace tier, tests marked slow deselected",
    )
    p.add_argument(
        "--line",
        metavar="TAG",
        help="a kept line (lines/TAG/) alone: its contract tier against its own trees, from "
        "its own venv .venv-TAG when scripts/setup.sh --line TAG made one (--tier upstream: "
        "its upstream tier; the full run already includes every kept line's contract tier)",
    )
    p.set_defaults(func=main, check=tiers_of)
