"""The benchmarks' shared harness: ceiling, timing, roofline, result header.

Every H200 benchmark of this workspace times vLLM code the same way (the method of the
design notes, ``../shared/design.md`` "Performance: how to measure"):

- Ceiling: HBM read bandwidth, bytes/s, measured in the same process as the timings
  (``read_bandwidth``: a torch ``sum`` over 2 GiB, median of ``do_bench``; it reads every byte
  once and writes almost nothing). On the team's H200 it read 4.18-4.38 TB/s.
- Timing: CUDA-graph replay (``time_graph``), as vLLM runs decode batches. A decode MoE call
  touches a few experts; replaying the same routing would find their weights in the 50 MB
  L2 from the previous replay, so ``time_graph`` captures ``n`` calls in one graph, each with
  its own routing (``routings``), and reports the time of one call: graph time / n. Median,
  min and max over ``reps`` timed replays, in microseconds.
- Roofline: bytes that must move / time / read bandwidth (``roofline_pct``); for a MoE layer
  the bytes are the weights of the distinct experts each routing touches plus the
  activations in and out (``moe_bytes``).
- Results: one JSON file per tree and benchmark in the schema of ``vseries.results`` (``Row``,
  ``failed``, ``write``, ``load``: the standard-library half, which the reports and the PR
  bodies read on any host); ``header`` here adds what only the GPU host knows.

Runs on a CUDA host (the H200 recipe). The import needs nothing beyond the standard library
(torch is imported by the functions that time and measure).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks import gpu
from vseries import results

if TYPE_CHECKING:  # for the annotations only: the import stays free of torch
    import torch

DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64)
ROUTINGS = 8  # routings cycled inside one graph; 8 x top-8 of 128 experts covers most


def arguments(doc: str, batches: Sequence[int], reps: int) -> argparse.ArgumentParser:
    """The command line the layer benchmarks share: the tree's name (``--variant``), the
    result file (``--out``), the model shapes, the batch sizes and the timed replays; a
    benchmark adds its own options to the parser."""
    from benchmarks import shapes

    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--variant", required=True, help="name of the tree, e.g. base or series")
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", nargs="*", default=list(shapes.MOE_SHAPES))
    ap.add_argument("--batches", nargs="*", type=int, default=list(batches))
    ap.add_argument("--reps", type=int, default=reps)
    return ap


def read_bandwidth(gib: int = 2) -> float:
    """HBM read bandwidth in bytes/s: a torch sum over ``gib`` GiB (median of do_bench)."""
    import torch
    import triton

    x = torch.empty(gib * 1024**3, dtype=torch.uint8, device="cuda").view(torch.float32)
    x.normal_()
    ms = triton.testing.do_bench(x.sum, warmup=50, rep=300, return_mode="median")
    bw = x.numel() * 4 / (ms * 1e-3)
    del x
    torch.cuda.empty_cache()
    return bw


@dataclasses.dataclass
class Timing:
    """One call's time in microseconds over ``reps`` graph replays: median, min, max."""

    us: float
    us_min: float
    us_max: float
    reps: int


def capture_graph(calls: Sequence[Callable[[], Any]]) -> Any:
    """One CUDA graph of ``calls`` in order, each run once eagerly first (JIT compiles,
    caches) and once more on the capture stream (its allocator pool)."""
    import torch

    for fn in calls:
        fn()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        for fn in calls:  # warm the allocator on the capture stream
            fn()
        stream.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            for fn in calls:
                fn()
    torch.cuda.synchronize()
    return graph


def kernel_times(calls: Sequence[Callable[[], Any]], reps: int = 2) -> dict[str, float]:
    """Where one call's time goes: device time per call (us) of each CUDA kernel, by name,
    from ``reps`` profiled replays of the graph ``time_graph`` times (``calls`` cycled),
    the median over replays; plus ``"span"``, the first kernel's start to the last one's
    end per call, and ``"gaps"``, span less the kernels' sum (launch gaps, tails; negative
    where kernels overlap, e.g. under programmatic dependent launch). Profiler (CUPTI)
    timestamps: a replay under the profiler may run slightly slower than ``time_graph``'s."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    graph = capture_graph(calls)
    graph.replay()
    torch.cuda.synchronize()
    samples: dict[str, list[float]] = {}
    for _ in range(reps):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            graph.replay()
            torch.cuda.synchronize()
        events = [ev for ev in prof.events() if ev.device_type.name == "CUDA"]
        if not events:
            continue
        busy: dict[str, float] = {}
        for ev in events:
            busy[ev.name] = busy.get(ev.name, 0.0) + ev.time_range.elapsed_us()
        span = max(ev.time_range.end for ev in events) - min(ev.time_range.start for ev in events)
        busy = {name: t / len(calls) for name, t in busy.items()}
        busy["span"] = span / len(calls)
        busy["gaps"] = busy["span"] - sum(t for n, t in busy.items() if n != "span")
        for name, t in busy.items():
            samples.setdefault(name, []).append(t)
    del graph
    return {name: round(sorted(v)[len(v) // 2], 2) for name, v in samples.items()}


def time_graph(calls: Sequence[Callable[[], Any]], reps: int = 30, warmup: int = 3) -> Timing:
    """Time one call under CUDA-graph replay, cycling ``calls`` inside the graph.

    ``calls`` are the same operation on different inputs (e.g. different routings); each
    runs once eagerly first (JIT compiles, caches), then all are captured in order into one
    graph. Each replay is timed with CUDA events; per-call time = replay time / len(calls).
    """
    import torch

    graph = capture_graph(calls)
    for _ in range(warmup):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / len(calls))
    del graph
    times.sort()
    return Timing(us=times[len(times) // 2], us_min=times[0], us_max=times[-1], reps=reps)


def routings(
    m: int, e: int, topk: int, n: int = ROUTINGS, seed: int = 0
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``n`` routings (topk_weights fp32 [m, topk], topk_ids int32 [m, topk]) from random
    logits: distinct experts per token, as vLLM's router returns them."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    out = []
    for _ in range(n):
        logits = torch.randn(m, e, device="cuda", generator=g)
        w, ids = torch.topk(torch.softmax(logits, dim=-1), topk)
        out.append((w.contiguous(), ids.to(torch.int32).contiguous()))
    return out


def moe_bytes(
    ids: torch.Tensor, hidden: int, inter: int, weight_bytes: float = 1, act_bytes: int = 2
) -> int:
    """Bytes one MoE call must move: the w13 [2I, H] and w2 [H, I] weights of each distinct
    expert in ``ids`` once, plus the activations in and out ([M, H] each)."""
    distinct = int(ids.unique().numel())
    m = ids.size(0)
    return int(distinct * 3 * inter * hidden * weight_bytes + 2 * m * hidden * act_bytes)


def roofline_pct(nbytes: float, us: float, bandwidth: float) -> float:
    """Achieved bandwidth as % of the measured read bandwidth (bytes/s)."""
    return 100.0 * nbytes / (us * 1e-6) / bandwidth


def _tree_info() -> dict[str, Any]:
    """The vLLM tree under test: VSERIES_TREE.json beside it (benchmarks/e2e/trees.py) or its
    git head."""
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        return {}
    package = Path(spec.origin).resolve().parent
    root = package.parent
    # benchmarks/e2e/trees.py writes it beside vllm/ and, since the H200 staging ships only
    # vllm/ and tests/, inside vllm/ too
    for info_file in (root / "VSERIES_TREE.json", package / "VSERIES_TREE.json"):
        if info_file.exists():
            return json.loads(info_file.read_text())
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        head = ""
    return {"path": str(root), "head": head}


def header(bench: str, variant: str, bandwidth: float | None, **extra: Any) -> dict[str, Any]:
    """The result file's header (``vseries.results.header``: what ran, when, with which
    command) with where: the GPU and its clocks, torch, Triton, the tree, the read bandwidth."""
    import torch
    import triton

    return results.header(
        bench,
        variant,
        gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else "",
        clocks=gpu.clocks_line(),
        torch=torch.__version__,
        triton=triton.__version__,
        tree=_tree_info(),
        read_bandwidth_Bps=bandwidth,
        **extra,
    )
