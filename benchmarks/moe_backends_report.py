#!/usr/bin/env python3
"""Table and plot of ``bench_moe_layer.py`` runs with every backend beside the series.

Per (shape, scales, M): v0.34.0's TRITON layer (``default`` of the base tree), v0.34.0's
FLASHINFER_CUTLASS layer autotuned (``flashinfer``, static scales only: v0.34.0 gives it no
dynamic per-tensor layer), the layer a v0.34.0 user gets by default on Hopper with FlashInfer
installed (the oracle's first choice: FLASHINFER_CUTLASS for static, TRITON for dynamic), the
series' decode backend (``default`` of the series tree, ``--moe-backend triton_fp8_decode``)
and, where run, its decode path taken at every batch up to 16 tokens (``decode16``), also with
split-K sized from the batch (``decode16m``, ``benchmarks/decode_split.py``). Each
cell: median us of the run (range over runs when several) and % of the read roofline measured
in the same run.

    python benchmarks/moe_backends_report.py --base moe_layer-base-*.json \\
        --series moe_layer-series-*.json --out benchmarks/results/moe_backends_v0.34.0
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from benchmarks import plots, report_page
from vseries import results

# the backend v0.34.0's FP8 oracle picks on SM90 without EP, FlashInfer installed
DEFAULT_BACKEND = {"static": "flashinfer", "dynamic": "default"}


def load(paths: list[str]) -> dict[tuple, list[dict]]:
    """(shape, scales, M, variant) -> the rows of every run that has it."""
    out: dict[tuple, list[dict]] = {}
    for p in sorted(paths):
        _, rows = results.load(p)
        for r in rows:
            if r.get("us"):
                out.setdefault((r["shape"], r["dtype"], r["m"], r["variant"]), []).append(r)
    return out


def cell(rows: list[dict] | None) -> str:
    if not rows:
        return "-"
    us = [r["us"] for r in rows]
    pct = statistics.median(r["roofline_pct"] for r in rows)
    rng = f" ({min(us):.1f}-{max(us):.1f})" if len(us) > 1 else ""
    return f"{statistics.median(us):.1f}{rng}, {pct:.0f}%"


def med(rows: list[dict] | None, key: str = "us") -> float | None:
    return statistics.median(r[key] for r in rows) if rows else None


def table(base: dict, series: dict) -> tuple[str, list[dict]]:
    keys = sorted({k[:3] for k in series} | {k[:3] for k in base})
    head = ["shape", "scales", "M", "v0.34.0 TRITON us, % roofline",
            "v0.34.0 FLASHINFER_CUTLASS (autotuned)", "series", "series vs v0.34.0 default",
            "series vs TRITON", "series, decode path to 16 tokens"]  # fmt: skip
    by_batch = any(k[3] == "decode16m" for k in series)
    if by_batch:
        head.append("the same, split-K by batch")
    lines, points = [], []
    for shape, dtype, m in keys:
        tri = base.get((shape, dtype, m, "default"))
        fi = base.get((shape, dtype, m, "flashinfer"))
        ser = series.get((shape, dtype, m, "default"))
        dec = series.get((shape, dtype, m, "decode16"))
        # the default's own rows only: a static row whose FLASHINFER_CUTLASS run failed has no
        # default figure, never TRITON's in its place
        dflt = fi if DEFAULT_BACKEND[dtype] == "flashinfer" else tri
        s_us = med(ser)

        def ratio(rows, s_us=s_us):
            return f"{med(rows) / s_us:.2f}x" if rows and s_us else "-"

        dec_m = series.get((shape, dtype, m, "decode16m"))
        lines.append([shape, dtype, m, cell(tri), cell(fi), cell(ser), ratio(dflt), ratio(tri),
                      cell(dec)] + ([cell(dec_m)] if by_batch else []))  # fmt: skip
        points.append({"shape": shape, "dtype": dtype, "m": m,
                       **{k: med(v, "roofline_pct") for k, v in
                          (("triton", tri), ("flashinfer", fi), ("series", ser),
                           ("decode16", dec), ("decode16m", dec_m))}})  # fmt: skip
    return results.markdown_table(head, lines), points


def plot(points: list[dict], out: Path, gpu: str) -> None:
    panels = sorted({(p["shape"], p["dtype"]) for p in points})
    fig, axes = plots.grid(1, len(panels), (4.2, 3.6))
    colours = {"triton": "grey", "flashinfer": "tab:green", "series": "tab:blue",
               "decode16": "tab:orange", "decode16m": "tab:red"}  # fmt: skip
    for ax, (shape, dtype) in zip(axes[0], panels, strict=True):
        pts = sorted((p for p in points if (p["shape"], p["dtype"]) == (shape, dtype)),
                     key=lambda p: p["m"])  # fmt: skip
        for k, c in colours.items():
            xy = [(p["m"], p[k]) for p in pts if p[k] is not None]
            if xy:
                ax.plot(*zip(*xy, strict=True), "o-", ms=3, color=c, label=k)
        plots.roofline_axis(ax, f"{shape}, {dtype}", "tokens (M)")
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 100)
    # the legend where every series has a line (dynamic panels have no FLASHINFER_CUTLASS)
    max((ax for row in axes for ax in row), key=lambda ax: len(ax.get_lines())).legend(fontsize=7)
    plots.save(fig, out, f"Per-tensor FP8 MoE layer, {gpu}: v0.34.0's backends and the series")


def main(argv: list[str] | None = None) -> int:
    a = report_page.parse(__doc__, argv)
    base, series = load(a.base), load(a.series)
    text, points = table(base, series)
    runs = f"{len(a.base)} run(s) of v0.34.0 and {len(a.series)} of the series"
    head = report_page.series_header(a)
    intro = report_page.ran(runs, head) + (
        " The layer as vLLM's FP8 oracle builds it (the modular kernel: prepare, experts, "
        "finalize), per-tensor FP8 weights, static or dynamic per-tensor activation scales; "
        "CUDA-graph replay with 8 routings cycled; median of 30 replays. v0.34.0's default on "
        "Hopper with FlashInfer: FLASHINFER_CUTLASS for static scales (autotuned by "
        "FlashInfer's own autotuner for the batch buckets up to 64 before timing, as vLLM's "
        "start-up does), TRITON for dynamic scales (FLASHINFER_CUTLASS takes no dynamic "
        "per-tensor layer)."
    )
    title = "FP8 MoE layer on v0.34.0: its backends and the series"
    md = report_page.page(a, __file__, title, intro, text)
    report_page.write(a, md, lambda png: plot(points, png, head.get("gpu", "")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
