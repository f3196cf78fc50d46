"""A torch-profiler trace of served decode steps -> where each step's time goes.

vLLM's worker writes a Chrome trace (``--profiler-config``, ``LLM.start_profile``). A decode
step replays one CUDA graph (``cudaGraphLaunch``); its kernels carry that launch's
correlation id. For each step (from the first kernel of one graph replay to the first kernel
of the next) this reports:

- ``period_us``: the step's length on the GPU timeline (what a user sees as TPOT);
- ``busy_us`` / ``idle_us``: the union of every kernel's interval inside the period, and the
  rest (the GPU waiting for the CPU: scheduling, input preparation, sampling, output);
- ``graph_us``: the replayed graph's span; ``moe_us``: the kernels of the MoE layers (names
  matching ``MOE_KERNELS``: router top-k, alignment, quantisation inside the experts, the
  GEMMs, activation, the top-k sum, FlashInfer's permute/finalize), summed;
- ``eager_us``: the step's kernels outside its graphs (the logits GEMM and the sampler, run
  eagerly after the graph), summed;
- ``host_lead_us``: how long before the GPU starts a step's first graph the host called
  ``cudaGraphLaunch`` for it: the host running ahead (GPU-bound steps) when large, the GPU
  waiting for it when near the launch latency;
- ``launches``: kernels per step by name, for the kernels named in ``COUNTED`` (proof that a
  path runs inside the served graphs), and the ten longest kernels per step.

Medians over the steps of the trace. CPU annotations (``user_annotation``) are summarised as
the median time per step of each, where the trace has them.
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
import time
from collections import defaultdict
from pathlib import Path

MOE_KERNELS = re.compile(
    r"moe|topk|top_k|expandInputRows|finalizeMoeRouting|computeStridesTma|fusedBuildExpertMaps|"
    r"doActivationKernel|GroupProblemShape|MoeGemm|grouped_gemm|act_and_mul|silu_and_mul|"
    r"moe_sum|masked_amax",
    re.I,
)
# the experts' GEMM kernels: Triton's, the series' decode kernels, FlashInfer's CUTLASS grouped
# GEMM (a mangled name holding GroupProblemShape)
COUNTED = re.compile(
    r"_moe_decode_w13_kernel|_moe_decode_w2_kernel|fused_moe_kernel|MoeGemm|GroupProblemShape"
)


def load(path: Path) -> dict:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw)


def events_of(path: Path) -> list[dict]:
    """The trace events of a trace file (gzipped or not; a bare list or {"traceEvents"})."""
    data = load(path)
    return data["traceEvents"] if isinstance(data, dict) else data


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def steps(events: list[dict], decode_steps: int | None = None) -> list[dict]:
    """One dict per complete decode step of the trace. A step replays one full CUDA graph,
    or several piecewise ones (one per stretch between attention calls): with
    ``decode_steps`` (the decode steps the traced generate ran), consecutive replays are
    grouped into steps of round(replays / decode_steps) each."""
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    launches = {
        e["args"]["correlation"]: e["ts"]
        for e in events
        if e.get("ph") == "X"
        and e.get("cat") == "cuda_runtime"
        and e.get("name") == "cudaGraphLaunch"
        and "correlation" in e.get("args", {})
    }
    by_launch: dict[int, list[dict]] = defaultdict(list)
    for k in kernels:
        c = k.get("args", {}).get("correlation")
        if c in launches:
            by_launch[c].append(k)
    starts = sorted((min(k["ts"] for k in ks), c) for c, ks in by_launch.items())
    per = max(1, round(len(starts) / decode_steps)) if decode_steps else 1
    groups = [starts[i : i + per] for i in range(0, len(starts) - per + 1, per)]
    firsts = [(g[0][0], [c for _, c in g]) for g in groups]
    annotations = [e for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation"]
    out = []
    for (t0, cs), (t1, _) in zip(firsts, firsts[1:], strict=False):
        inside = [k for k in kernels if t0 <= k["ts"] < t1]
        graph = [k for c in cs for k in by_launch[c]]
        in_graph = {id(k) for k in graph}
        names: dict[str, float] = defaultdict(float)
        counts: dict[str, int] = defaultdict(int)
        for k in inside:
            names[k["name"]] += k["dur"]
            if COUNTED.search(k["name"]):
                counts[_short(k["name"])] += 1
        cpu: dict[str, float] = defaultdict(float)
        for a in annotations:
            if t0 <= a["ts"] < t1:
                cpu[a["name"]] += a["dur"]
        out.append(
            {
                "period_us": t1 - t0,
                "busy_us": _union([(k["ts"], k["ts"] + k["dur"]) for k in inside]),
                "graph_us": max(k["ts"] + k["dur"] for k in graph) - t0,
                "moe_us": sum(k["dur"] for k in inside if MOE_KERNELS.search(k["name"])),
                "eager_us": sum(k["dur"] for k in inside if id(k) not in in_graph),
                "host_lead_us": t0 - launches[cs[0]],
                "kernels": len(inside),
                "graphs": cs,
                "counts": dict(counts),
                "names": dict(names),
                "cpu": dict(cpu),
            }
        )
    return out


def _short(name: str) -> str:
    return name.split("<")[0].split("(")[0][:80]


def summarise(events: list[dict], decode_steps: int | None = None) -> dict:
    """Medians over the decode steps of one trace ({"steps": 0}: no complete step)."""
    st = steps(events, decode_steps)
    if not st:
        return {"steps": 0}

    def med(key):
        return round(statistics.median(s[key] for s in st), 2)

    top: dict[str, list[float]] = defaultdict(list)
    for s in st:
        for n, d in s["names"].items():
            top[_short(n)].append(d)
    longest = sorted(((statistics.median(v), n) for n, v in top.items()), reverse=True)[:10]
    counts = {n: statistics.median(s["counts"].get(n, 0) for s in st) for n in st[0]["counts"]}
    cpu_names = {n for s in st for n in s["cpu"]}
    cpu = {n: round(statistics.median(s["cpu"].get(n, 0.0) for s in st), 1) for n in cpu_names}
    return {
        "steps": len(st),
        "graphs_per_step": max(1, round(len(st[0]["graphs"]))) if st else 0,
        "period_us": med("period_us"),
        "busy_us": med("busy_us"),
        "idle_us": round(med("period_us") - med("busy_us"), 2),
        "graph_us": med("graph_us"),
        "moe_us": med("moe_us"),
        "eager_us": med("eager_us"),
        "host_lead_us": med("host_lead_us"),
        "kernels_per_step": med("kernels"),
        "launches_per_step": counts,
        "longest_kernels_us": {n: round(t, 2) for t, n in longest},
        "cpu_annotations_us": dict(sorted(cpu.items(), key=lambda kv: -kv[1])[:12]),
    }


def summarise_folder(
    folder: Path, exclude=frozenset(), wait_s: float = 0, decode_steps: int | None = None
) -> dict:
    """The newest trace file under ``folder`` not in ``exclude`` (waiting up to ``wait_s``
    for the worker to write it and for its size to settle), summarised; its name recorded."""
    end = time.monotonic() + wait_s
    while True:
        found = [p for p in folder.rglob("*.json*") if p not in exclude]
        if found or time.monotonic() > end:
            break
        time.sleep(1)
    if not found:
        return {"error": f"no trace file in {folder}"}
    path = max(found, key=lambda p: p.stat().st_mtime)
    size = -1
    while size != path.stat().st_size and time.monotonic() <= end + 30:
        size = path.stat().st_size
        time.sleep(1)
    return {"file": path.name, "bytes": size, **summarise(events_of(path), decode_steps)}


def main(argv: list[str] | None = None) -> int:
    """Summarise kept trace files (``--trace-keep``): one JSON line per file."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument(
        "--decode-steps", type=int, default=47, help="decode steps of the traced generate"
    )
    a = ap.parse_args(argv)
    for f in a.files:
        s = summarise(events_of(f), a.decode_steps)
        keep = ("steps", "period_us", "busy_us", "idle_us", "graph_us", "moe_us", "eager_us",
                "host_lead_us", "kernels_per_step")  # fmt: skip
        print(json.dumps({"file": f.name, **{k: s[k] for k in keep if k in s}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
