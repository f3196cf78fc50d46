#!/usr/bin/env python3
"""Table of 0003's decode backend against a tuned TRITON baseline: the tuner's file
(``tune_fused_moe.py``: per batch the configuration v0.34.0 takes and the tuned one, timed by
vLLM's ``benchmark_config``) and ``bench_moe_layer.py`` runs of three trees in turns: v0.34.0
(``--base``: TRITON with the configuration it takes), v0.34.0 with the tuned configuration
file (``--tuned``) and the series (``--series``: its decode backend where it takes the batch,
else its TRITON).

Per layer row: the median over runs of each tree's time with its range (min-max of the runs'
medians), the speed-ups per turn (the tuned file against v0.34.0's configuration; the series
against the tuned file) as median and range, and % of the read roofline of the tuned TRITON
and of the series.

    python benchmarks/tune_report.py --tune raw/.../tune-qwen3-30b-a3b.json \\
        --base raw/.../moe_layer-t-base-r*.json --tuned raw/.../moe_layer-t-tuned-r*.json \\
        --series raw/.../moe_layer-t-series-r*.json --out benchmarks/results/tuned_triton_v0.34.0
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from benchmarks import moe_layer_report, plots, report_page
from vseries import results

spread, times, per_turn = (
    moe_layer_report.spread,
    moe_layer_report.times,
    moe_layer_report.per_turn,
)


def config_text(c: dict) -> str:
    """A configuration in one cell: tile M x N x K, GROUP_SIZE_M, warps, stages."""
    return (
        f"{c['BLOCK_SIZE_M']}x{c['BLOCK_SIZE_N']}x{c['BLOCK_SIZE_K']} g{c['GROUP_SIZE_M']} "
        f"w{c['num_warps']} s{c['num_stages']}"
    )


def tune_table(path: str) -> str:
    """Per batch: v0.34.0's configuration and the tuned one, as the tuner timed them."""
    _, rows = results.load(path)
    by = {(r["m"], r["variant"]): r for r in rows if r["us"]}
    lines = []
    for m in sorted({m for m, _ in by}):
        d, t = by.get((m, "default")), by.get((m, "tuned"))
        if not (d and t):
            continue
        lines.append(
            [m, f"{d['us']:.1f}", config_text(d["config"]), f"{t['us']:.1f}",
             config_text(t["config"]), f"{d['us'] / t['us']:.2f}x"]
        )  # fmt: skip
    head = ["M", "v0.34.0's config us", "v0.34.0's config", "tuned us", "tuned config",
            "speed-up"]  # fmt: skip
    return results.markdown_table(head, lines)


def layer_table(base, tuned, series) -> tuple[str, list[dict]]:
    keys = sorted({k[:3] for run in series for k in run})
    head = ["shape", "scales", "M", "v0.34.0 us", "v0.34.0 tuned us", "series us",
            "tuned / v0.34.0 speed-up", "series / tuned speed-up",
            "% roofline tuned -> series"]  # fmt: skip
    lines, points = [], []
    for shape, dtype, m in keys:
        k = (shape, dtype, m, "default")
        rt, rs = times(tuned, k, "roofline_pct"), times(series, k, "roofline_pct")
        roof = f"{statistics.median(rt):.0f}% -> {statistics.median(rs):.0f}%" if rt and rs else "-"
        lines.append(
            [shape, dtype, m, spread(times(base, k)), spread(times(tuned, k)),
             spread(times(series, k)), spread(per_turn(base, tuned, k), "{:.2f}x"),
             spread(per_turn(tuned, series, k), "{:.2f}x"), roof]
        )  # fmt: skip
        rb = times(base, k, "roofline_pct")
        points.append({"shape": shape, "dtype": dtype, "m": m,
                       **{n: statistics.median(v) if v else None
                          for n, v in (("base", rb), ("tuned", rt), ("series", rs))}})  # fmt: skip
    return results.markdown_table(head, lines), points


def plot(points: list[dict], out: Path, gpu: str) -> None:
    arms = [("base", "v0.34.0", "grey"), ("tuned", "tuned", "tab:orange"),
            ("series", "series", "tab:blue")]  # fmt: skip
    title = f"Per-tensor FP8 MoE layer, {gpu}:\nTRITON untuned, tuned, and 0003"
    plots.roofline_by_shape(points, arms, out, title)


def main(argv: list[str] | None = None) -> int:
    ap = report_page.parser(__doc__)
    ap.add_argument("--tuned", nargs="+", required=True)
    ap.add_argument("--tune", required=True, help="tune_fused_moe.py's result file")
    a = ap.parse_args(argv)
    load = moe_layer_report.load_runs
    base, tuned, series = load(a.base), load(a.tuned), load(a.series)
    text, points = layer_table(base, tuned, series)
    head = report_page.series_header(a)
    intro = report_page.ran(
        f"{len(base)} run{'s' if len(base) != 1 else ''} each of v0.34.0, v0.34.0 with the "
        "tuned file and the series, in turns",
        head, clocks=True,
    ) + (
        " vLLM's tuner first (`benchmarks/kernels/benchmark_moe.py`'s `benchmark_config`, "
        "fused_experts with static per-tensor scales, CUDA-graph replay of 10 calls, 100 "
        "iterations), then the layer as vLLM's FP8 oracle builds it (CUDA-graph replay with 8 "
        "routings cycled; median over runs of each run's median, range = min-max over runs)."
    )  # fmt: skip
    tables = f"{tune_table(a.tune)}\n\n{text}"
    more = f" --tuned {' '.join(a.tuned)} --tune {a.tune}"
    title = "0003's decode backend against a tuned TRITON baseline on v0.34.0"
    md = report_page.page(a, __file__, title, intro, tables, more)
    report_page.write(a, md, lambda png: plot(points, png, head.get("gpu", "")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
