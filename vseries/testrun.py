"""test: run the tiers — workspace (CPU), contract (base vs patched), upstream (CUDA hosts).

A tier that fails, or that collects no test, makes the run fail. The upstream tier needs a
CUDA device; without one it is reported as not run, with the reason, and does not count as a
pass or a failure.
"""

import shutil
import subprocess
import sys
import time

from vseries import contract, paths, upstream, worktree
from vseries.errors import SeriesError

TIERS = ("workspace", "contract", "upstream")


def cuda_available() -> bool:
    """True when torch sees a CUDA device (checked in a fresh interpreter)."""
    p = subprocess.run(
        [sys.executable, "-c", "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)"],
        capture_output=True,
    )
    return p.returncode == 0


def installed_tree_ok() -> None:
    """Refuse to test before the main job has run: vllm must import from vllm/."""
    p = subprocess.run(
        [sys.executable, "-c", "import importlib.util as u; print(u.find_spec('vllm').origin)"],
        capture_output=True,
        text=True,
        cwd="/",
    )
    where = p.stdout.strip()
    if p.returncode != 0 or not where.startswith(str(paths.vllm_dir())):
        raise SeriesError(
            f"vllm is not installed from {paths.vllm_dir()} ({where or 'absent'})",
            "scripts/setup.sh",
        )


def tier_workspace() -> bool:
    code = subprocess.call(
        [*upstream.PYTEST, "tests/workspace"],
        cwd=paths.root(),
    )
    if code == 5:
        print("workspace tier: collected no test — that is a failure")
    return code == 0


def tier_contract() -> bool:
    return contract.report(contract.check_all(base=True))


def tier_upstream() -> bool | None:
    if not cuda_available():
        print(
            "upstream tier: not run — no CUDA device here. It runs vLLM's own kernel tests "
            "(tests/upstream.toml) on base and patched; on an H200: scripts/test.sh "
            "--tier upstream"
        )
        return None
    text, ok = upstream.compare(
        worktree.base_tree(),
        paths.vllm_dir(),
        upstream.load_selections(paths.root() / "tests/upstream.toml"),
        paths.state_dir() / "upstream",
    )
    print(text)
    (paths.state_dir() / "upstream-report.md").write_text(text)
    return ok


def main(args) -> int:
    installed_tree_ok()
    tiers = args.tier or list(TIERS)
    results = {}
    for t in tiers:
        print(f"\n=== tier {t} " + "=" * 60)
        start = time.monotonic()
        results[t] = (globals()[f"tier_{t}"](), time.monotonic() - start)
    print("\n=== summary " + "=" * 60)
    width = shutil.get_terminal_size().columns
    for t, (ok, secs) in results.items():
        state = "not run (no CUDA)" if ok is None else "passed" if ok else "FAILED"
        print(f"  {t:10} {state:20} {secs:6.1f} s"[:width])
    return 1 if any(ok is False for ok, _ in results.values()) else 0


def add_parser(sub) -> None:
    p = sub.add_parser("test", help="run the test tiers: workspace, contract, upstream")
    p.add_argument("--tier", action="append", choices=TIERS, help="run only this tier (repeat)")
    p.set_defaults(func=main)
