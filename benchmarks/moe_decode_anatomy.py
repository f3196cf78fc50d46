#!/usr/bin/env python3
"""H200 benchmark: fixed cost against streaming rate of each FP8 MoE decode kernel at one token.

Patch 0005 runs the layer at one token as two kernels. ``bench_moe_decode.py`` found them
latency-bound there (Qwen3-30B-A3B, static scales: 21.9 us with 8 routings cycled, 19.9 us
with the weights in L2; raw/round7/kernels). This benchmark says how much of each kernel is
a fixed cost per call (launch, routing ids, pipeline fill, epilogue, arrival counters, the
last program's reduction) and how much is streaming, by growing each kernel's K dimension
while its grid stays the same:

- GEMM1 (``_moe_decode_w13_kernel``, grid top-k x intermediate / BLOCK_I x SPLIT_K1): the
  hidden size grows (``--factors`` times the model's), the intermediate size stays;
- GEMM2 (``_moe_decode_w2_kernel``, grid top-k x hidden / BLOCK_N x SPLIT_K2): the
  intermediate size grows, the hidden size stays.

The config (tiles, K steps, split-K, stages) is the model shape's own (``get_decode_config``),
held for every size. Each kernel's device time per call comes from profiled replays of one
CUDA graph (``harness.kernel_times``, median of ``--reps``) with 8 routings cycled (weights
from HBM) and with one routing replayed (``hot``: weights in L2). A least-squares line
``us = fixed_us + MB / rate`` per (shape, scale kind, kernel, routing) gives the fixed cost
and the streaming rate (GB/s), which the read bandwidth measured in the same run puts in
proportion. Bytes: the weights of the distinct experts each routing selects.

    cd /root/vllm-series && PYTHONPATH=/root/site:/root/vllm-series:<ws> \\
        python3 -m benchmarks.moe_decode_anatomy --variant series \\
        --out moe_decode_anatomy-series.json

About a minute on an H200 (most of it Triton compiles). Needs a tree with patch 0005.
"""

from __future__ import annotations

import argparse
import sys

from benchmarks import harness, shapes
from vseries import results

BENCH = "moe-decode-anatomy"
SHAPES = ("qwen3-30b-a3b", "dsv3-tp8")
# At most the model's own size: larger hidden sizes would cross the threshold above which the
# path quantizes the input with vLLM's kernel first (DeepSeek-V3 TP8 at 2x), changing GEMM1's
# mode within one line.
FACTORS = (0.25, 0.5, 0.75, 1.0)
KERNELS = {"w13": "_moe_decode_w13_kernel", "w2": "_moe_decode_w2_kernel"}


def sized(shape: tuple[int, int, int, int], kernel: str, factor: float) -> tuple[int, int]:
    """(hidden, intermediate) of one point: the kernel's K dimension (hidden for w13,
    intermediate for w2) scaled by ``factor``, rounded to a multiple of 64 (>= 64)."""
    _, _, h, i = shape
    k = max(64, round(factor * (h if kernel == "w13" else i) / 64) * 64)
    return (k, i) if kernel == "w13" else (h, k)


def kernel_bytes(kernel: str, distinct: int, hidden: int, inter: int) -> int:
    """FP8 weight bytes one call of the kernel must read: [2I, H] (w13) or [H, I] (w2) per
    distinct expert."""
    return distinct * (2 if kernel == "w13" else 1) * inter * hidden


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares line through (MB, us) points: (fixed_us, rate_GBps), the intercept and
    1000 / slope. Needs two distinct MB values; a slope <= 0 gives rate inf."""
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    if sxx == 0:
        raise ValueError("fit needs points at two sizes at least")
    slope = sum((p[0] - mx) * (p[1] - my) for p in points) / sxx
    rate = 1000.0 / slope if slope > 0 else float("inf")
    return my - slope * mx, rate


def fits(rows: list[dict]) -> list[dict]:
    """One fit per (shape, dtype, kernel, routing) of result rows (``Row.as_dict`` or
    ``results.load``: flattened, with ``kernel`` and ``routing``)."""
    groups: dict[tuple, list[tuple[float, float]]] = {}
    for r in rows:
        if r.get("us") is None:
            continue
        key = (r["shape"], r["dtype"], r["kernel"], r["routing"])
        groups.setdefault(key, []).append((r["bytes"] / 1e6, r["us"]))
    out = []
    for (shape, dtype, kernel, routing), pts in sorted(groups.items()):
        if len({p[0] for p in pts}) < 2:
            continue
        fixed, rate = fit(pts)
        out.append(
            dict(shape=shape, dtype=dtype, kernel=kernel, routing=routing,
                 fixed_us=round(fixed, 2), rate_GBps=round(rate, 1), points=len(pts))
        )  # fmt: skip
    return out


def layer_calls(fd, e: int, topk: int, h: int, i: int, config: dict, a1, a2) -> tuple:
    """One point's layer (FP8 weights of E experts, hidden h, intermediate i) and the decode
    call on each of 8 routings: (calls, topk_ids of each routing)."""
    import torch
    from bench_moe_decode import make_layer

    w1, w2, s1, s2 = make_layer(e, h, i, seed=1)
    routes = harness.routings(1, e, topk, seed=2)
    g = torch.Generator(device="cuda").manual_seed(3)
    xs = [torch.randn(1, h, device="cuda", dtype=torch.bfloat16, generator=g) for _ in routes]
    outs = [torch.empty_like(x) for x in xs]

    def call(k: int):
        tw, ti = routes[k]
        return lambda: fd.fused_moe_fp8_decode(
            xs[k], w1, w2, s1, s2, tw, ti, a1, a2, outs[k], config=config
        )

    return [call(k) for k in range(len(routes))], [ids for _, ids in routes]


def measure(fd, shape_name: str, scale: str, kernel: str, factors, reps: int, bw: float):
    """Rows of one (shape, scale kind, kernel): every factor, cycled and hot routings."""
    import torch

    e, topk, h0, i0 = shapes.MOE_SHAPES[shape_name]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    config = fd.get_decode_config(1, topk, h0, i0, sms)
    static = scale == "static"
    a1 = torch.full((1,), 0.02, device="cuda") if static else None
    a2 = torch.full((1,), 0.05, device="cuda") if static else None
    dtype = f"fp8_per_tensor_{scale}"
    rows = []
    for f in factors:
        h, i = sized(shapes.MOE_SHAPES[shape_name], kernel, f)
        calls, ids = layer_calls(fd, e, topk, h, i, config, a1, a2)
        for routing, cs, used in (
            ("cycled", calls, ids),
            ("hot", [calls[0]] * len(calls), ids[:1]),
        ):
            distinct = sum(int(t.unique().numel()) for t in used) / len(used)
            nbytes = int(kernel_bytes(kernel, distinct, h, i))
            variant = f"{kernel}:{routing}:x{f:g}"
            extra = dict(kernel=kernel, routing=routing, factor=f, hidden=h, inter=i)
            try:
                times = harness.kernel_times(cs, reps=reps)
                us = next(t for name, t in times.items() if KERNELS[kernel] in name)
            except Exception as exc:  # one failing point does not lose the run
                rows.append(results.failed(BENCH, shape_name, dtype, 1, variant, exc, **extra))
                continue
            rows.append(
                results.Row(
                    BENCH, shape_name, dtype, 1, variant, us, None, None, nbytes,
                    round(harness.roofline_pct(nbytes, us, bw), 1),
                    dict(extra, config=config, kernels_us=times),
                )
            )  # fmt: skip
            print(f"{shape_name} {scale} {variant} H={h} I={i}: {us} us, "
                  f"{nbytes / 1e6:.1f} MB", flush=True)  # fmt: skip
        del calls
        torch.cuda.empty_cache()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variant", required=True, help="name of the tree, e.g. series")
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", nargs="*", default=list(SHAPES))
    ap.add_argument("--scales", nargs="*", default=["static", "dynamic"])
    ap.add_argument("--factors", nargs="*", type=float, default=list(FACTORS))
    ap.add_argument("--reps", type=int, default=5, help="profiled replays per point (median)")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("moe_decode_anatomy: needs a CUDA GPU (an H200: the decode path is SM90 only)",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        from vllm.model_executor.layers.fused_moe import fused_moe_decode as fd
    except ImportError:
        print("moe_decode_anatomy: this vLLM tree has no decode path (patch 0005)",
              file=sys.stderr)  # fmt: skip
        return 2
    bw = harness.read_bandwidth()
    print(f"read bandwidth {bw / 1e12:.2f} TB/s", flush=True)
    head = harness.header(BENCH, args.variant, bw)
    rows: list[results.Row] = []
    for shape in args.shapes:
        for scale in args.scales:
            for kernel in KERNELS:
                rows += measure(fd, shape, scale, kernel, args.factors, args.reps, bw)
                results.write(args.out, head, rows)
    head["fits"] = fits([r.as_dict() for r in rows])
    results.write(args.out, head, rows)
    for f in head["fits"]:
        print(f, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
