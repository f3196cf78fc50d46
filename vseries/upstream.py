"""The upstream tier: vLLM's own kernel tests on the base tree and the patched tree.

Standard library only, so it also runs on a GPU host that has no package index (the H200
recipe in CONTRIBUTING.md). Each selection of ``tests/upstream.toml`` runs with pytest from
inside each tree (vLLM's tests/ package and conftest resolve there) with a JUnit XML report;
the outcomes are compared test by test. A test that passes on the base and not with the patch
is a regression. ``--jobs N`` spreads each run over N pytest-xdist workers (the H200 host has
pytest-xdist; kernel tests are bound by Triton's compiles, which use one core each), unless a
selection says ``jobs = 1``. The report is rewritten after every selection, so a run cut by a
host's time limit still leaves what it finished.

    python3 -m vseries.upstream --base DIR --patched DIR [--only NAME] [--jobs N] [--out report.md]
"""

import argparse
import importlib.util
import os
import sys
import time
import tomllib
from pathlib import Path

from vseries import pytestrun
from vseries.results import markdown_table

HERE = Path(__file__).resolve().parent.parent


def load_selections(path: Path) -> list[dict]:
    """The [[select]] tables of tests/upstream.toml (keys: patch, path, k, patched_only, timeout,
    jobs, name: what --only matches exactly, where patch and path do not tell selections apart)."""
    try:
        sels = tomllib.loads(path.read_text()).get("select", [])
    except FileNotFoundError:
        raise ValueError(f"--select {path}: no such file") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ValueError(f"--select {path}: not a TOML file ({e})") from None
    if not isinstance(sels, list):
        raise ValueError(f"--select {path}: the selections are [[select]] tables (two brackets)")
    for i, sel in enumerate(sels, 1):
        if not isinstance(sel, dict) or not all(
            isinstance(sel.get(k), str) and sel.get(k) for k in ("patch", "path")
        ):
            raise ValueError(f"--select {path}: [[select]] {i} needs patch and path (strings)")
    return sels


def pick(sels: list[dict], only: list[str]) -> list[dict]:
    """The selections ``--only`` asks for (all when it names none): those whose patch name or
    path contains one of ``only``, or whose ``name`` is one of them exactly."""
    if not only:
        return sels
    return [
        s
        for s in sels
        if any(o in s["patch"] or o in s["path"] or o == s.get("name") for o in only)
    ]


def run_selection(
    tree: Path, sel: dict, xml: Path, pythonpath: str, jobs: int = 1
) -> tuple[dict[str, str], int, float]:
    """Run one selection in one tree (its output shown as it runs), its JUnit report in xml.

    A selection's ``timeout`` (s) bounds it; a run that hits it gives exit code 124 and none
    of the outcomes its report never got (so its tests count as absent, not passed). ``jobs``
    > 1: that many pytest-xdist workers (a selection's own ``jobs`` wins).

    Returns:
        ({test id ``classname::name``: passed / failed / error / skipped}, pytest exit code,
        wall time in s).
    """
    args = [sel["path"]] + (["-k", sel["k"]] if sel.get("k") else [])
    n = int(sel.get("jobs", jobs))
    if n > 1:
        args += ["-n", str(n)]
    # the tree and the extra folders only: nothing of the caller's PYTHONPATH
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(tree), pythonpath) if p)}
    t = time.monotonic()
    r = pytestrun.run(args, cwd=tree, env=env, timeout=sel.get("timeout"), capture=False, xml=xml)
    outcomes = {f"{c.classname}::{c.name}": c.outcome for c in r.cases}
    return outcomes, r.code, time.monotonic() - t


def count(res: dict[str, str]) -> str:
    c = {k: list(res.values()).count(k) for k in ("passed", "failed", "error", "skipped")}
    return ", ".join(f"{v} {k}" for k, v in c.items() if v) or "none"


HEAD = ("selection", "base", "patched", "time base / patched (s)")


def report(rows: list[list[str]], problems: list[str], pending: list[str]) -> str:
    """The Markdown report: the table, the regressions, and the selections not yet run."""
    out = [markdown_table(HEAD, rows), ""]
    out += (
        ["Regressions:"] + [f"- {p}" for p in problems]
        if problems
        else ["No regression: every test that passes on the base passes patched."]
    )
    if pending:
        out += ["", "Not run (the run stopped first):"] + [f"- {p}" for p in pending]
    return "\n".join(out) + "\n"


def compare(
    base: Path | None,
    patched: Path,
    sels: list[dict],
    work: Path,
    pythonpath: str = "",
    jobs: int = 1,
    out: Path | None = None,
) -> tuple[str, bool]:
    """Run every selection on both trees; returns (Markdown report, True when no regression).

    A regression: a test that passed on the base and fails/errors patched; a patched_only test
    that fails; or a selection that collected nothing (pytest exit 5) on the patched tree.
    ``out``: the report is written there after each selection (the rest listed as not run).
    """
    work.mkdir(parents=True, exist_ok=True)
    rows: list[list[str]] = []
    problems = []
    names = [f"`{s['path']}`" + (f" -k `{s['k']}`" if s.get("k") else "") for s in sels]
    if out:
        out.write_text(report(rows, problems, names))
    for i, sel in enumerate(sels):
        name = names[i]
        pres, pres_code, pt = run_selection(patched, sel, work / f"p{i}.xml", pythonpath, jobs)
        if sel.get("patched_only") or base is None:
            bres, bt, btxt = {}, 0.0, "(added by the patch)" if sel.get("patched_only") else "-"
        else:
            bres, _, bt = run_selection(base, sel, work / f"b{i}.xml", pythonpath, jobs)
            btxt = count(bres)
        rows.append([name, btxt, count(pres), f"{bt:.0f} / {pt:.0f}"])
        print("upstream:", " | ".join(rows[-1]), flush=True)  # seen if a host limit cuts the run
        if pres_code == 124:
            problems.append(f"{name}: timed out after {sel['timeout']} s on the patched tree")
        elif pres_code == 5 or not pres:
            problems.append(f"{name}: collected no test on the patched tree")
        for tid, res in pres.items():
            if res in ("failed", "error") and bres.get(tid, "passed") == "passed":
                was = bres.get(tid, "absent")
                problems.append(f"{tid}: {res} patched, {was} on base")
        if out:
            out.write_text(report(rows, problems, names[i + 1 :]))
    return report(rows, problems, []), not problems


def has_xdist() -> bool:
    """Whether the interpreter that runs pytest here (this one) has pytest-xdist."""
    return importlib.util.find_spec("xdist") is not None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", type=Path, help="the unpatched tree (omit: patched only)")
    ap.add_argument("--patched", type=Path, required=True)
    ap.add_argument("--select", type=Path, default=HERE / "tests" / "upstream.toml")
    ap.add_argument(
        "--only",
        action="append",
        help="run only selections whose patch name or path contains this, or named this",
    )
    ap.add_argument("--pythonpath", default="", help="extra PYTHONPATH (e.g. /root/site)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/vseries-upstream"))
    ap.add_argument("--out", type=Path, help="write the Markdown report here too")
    ap.add_argument("--jobs", type=int, default=1, help="pytest-xdist workers per run (-n)")
    a = ap.parse_args(argv)
    for flag, tree in (("--base", a.base), ("--patched", a.patched)):
        if tree is not None and not (tree / "tests").is_dir():
            ap.error(f"{flag} {tree}: not a vLLM tree (no tests/ folder)")
    try:
        every = load_selections(a.select)
    except ValueError as e:
        ap.error(str(e))
    sels = pick(every, a.only or [])
    if not sels:
        names = sorted({s.get("name") or s["patch"] for s in every})
        print(
            f"upstream: no selection to run ({'--only ' + ', '.join(a.only) if a.only else 'empty'}"
            f" matched none); the selections: {', '.join(names) or 'none'}",
            file=sys.stderr,
        )
        return 5
    if any(int(s.get("jobs", a.jobs)) > 1 for s in sels) and not has_xdist():
        print(
            f"upstream: --jobs {a.jobs} needs pytest-xdist, which {sys.executable} cannot "
            "import; install it (pip install pytest-xdist) or run with --jobs 1",
            file=sys.stderr,
        )
        return 2
    text, ok = compare(a.base, a.patched, sels, a.work, a.pythonpath, a.jobs, a.out)
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
