"""The Triton compiles of a server process: the hook that logs them (compile_hook.py, installed
as ``sitecustomize.py`` in the process's PYTHONPATH), its lines read back, and their summary
for the ``compiles`` record (before and after the server was ready, each later one with the
phase, probe or run, it fell in)."""

import json
import shutil
from collections import Counter
from pathlib import Path

from benchmarks.e2e.records import Compile

HERE = Path(__file__).resolve().parent


def install_hook(work: Path) -> Path:
    """``work/hook/sitecustomize.py`` = compile_hook.py; returns the folder."""
    d = work / "hook"
    d.mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "compile_hook.py", d / "sitecustomize.py")
    return d


def read(compile_dir: Path) -> list[dict]:
    """Every line the hook wrote in ``compile_dir`` (one file per process), oldest first."""
    out = []
    for f in sorted(compile_dir.glob("compiles-*.jsonl")):
        for line in f.read_text(errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return sorted(out, key=lambda r: r.get("t", 0))


def summarize(recs: list[dict], t_ready: float | None, phases: list) -> dict:
    """The ``Compiles`` record's fields: compiles before and after ready; each after-ready
    compile with its kernel, token count, duration and the phase (``phases``: (t0, t1, label)
    of the probe's requests and the runs; else "idle") it happened in."""
    ok = [r for r in recs if "kernel" in r]
    after = [r for r in ok if t_ready is not None and r["t"] >= t_ready]

    def phase(t):
        for t0, t1, label in phases:
            if t0 <= t <= t1:
                return label
        return "idle"

    return {
        "compiles_total": len(ok),
        "compiles_before_ready": len(ok) - len(after),
        "compiles_after_ready": len(after),
        "after_ready": [
            Compile(
                kernel=r["kernel"],
                fc_num_tokens=r.get("fc_num_tokens"),
                fc_num_actual_tokens=r.get("fc_num_actual_tokens"),
                duration_ms=r.get("duration_ms"),
                rank=r.get("rank"),
                pid=r.get("pid"),
                t_after_ready_s=round(r["t"] - t_ready, 3),
                phase=phase(r["t"]),
                spec=(r.get("spec") or "")[:300],
            )
            for r in after
        ],
        "before_ready_by_kernel": dict(Counter(r["kernel"] for r in ok if r not in after)),
        "hook_errors": [r["hook_error"] for r in recs if "hook_error" in r][:5],
        "hook_pids": sorted({r.get("pid") for r in recs}),
    }
