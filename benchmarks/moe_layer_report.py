#!/usr/bin/env python3
"""Table and plot of ``bench_moe_layer.py`` runs: base against the series, run by run.

Each run of a tree gives one median per row (shape, scales, M, variant); runs of the two trees
alternate (base, series, base, series, ...), and a pair is one base run and the series run
after it. Per row: the median over runs of each tree's time with its range (min-max of the
runs' medians), the ratio base / series per pair (median and range), % of the read roofline
(bytes / time / the read bandwidth measured in the same run), and, where the series tree also
ran ``general`` (its TRITON backend: the series without its decode backend), that ratio too.

    python benchmarks/moe_layer_report.py --base raw/.../moe_layer-base-*.json \\
        --series raw/.../moe_layer-series-*.json --out benchmarks/results/moe_layer_v0.34.0
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from benchmarks import plots, report_page
from vseries import results

KEY = ("shape", "dtype", "m")


def load_runs(paths: list[str]) -> list[dict[tuple, dict]]:
    """One dict per run file: (shape, scales, M, variant) -> row (rows with a time only), in
    the order of the sorted file names: name the base and series files of a pair alike
    (``moe_layer-<tree>-r<round>-call<n>.json``) so that they pair up."""
    runs = []
    for p in sorted(paths):
        _, rows = results.load(p)
        runs.append({(r["shape"], r["dtype"], r["m"], r["variant"]): r for r in rows if r["us"]})
    return runs


def spread(values: list[float], fmt: str = "{:.1f}") -> str:
    if not values:
        return "-"
    med = statistics.median(values)
    return f"{fmt.format(med)} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def times(runs: list[dict], key: tuple, field: str = "us") -> list[float]:
    """``field`` of row ``key`` in each run that has it."""
    return [r[key][field] for r in runs if key in r]


def per_turn(num: list[dict], den: list[dict], key: tuple) -> list[float]:
    """num / den time of row ``key`` per turn (the i-th run of each tree), where both have it."""
    return [a[key]["us"] / b[key]["us"] for a, b in zip(num, den, strict=False)
            if key in a and key in b]  # fmt: skip


def table(base: list[dict], series: list[dict]) -> tuple[str, list[dict]]:
    keys = sorted({k[:3] for run in series for k in run}, key=lambda k: (k[0], k[1], k[2]))
    head = ["shape", "scales", "M", "v0.34.0 us", "series us", "series / v0.34.0 speed-up"]
    head += ["% roofline v0.34.0 -> series", "speed-up of the decode patch (vs series' general)"]
    lines, points = [], []
    for shape, dtype, m in keys:
        k, g = (shape, dtype, m, "default"), (shape, dtype, m, "general")
        b, s, ratio = times(base, k), times(series, k), per_turn(base, series, k)
        dec = [r[g]["us"] / r[k]["us"] for r in series if g in r and k in r]
        rb, rs = times(base, k, "roofline_pct"), times(series, k, "roofline_pct")
        roof = f"{statistics.median(rb):.0f}% -> {statistics.median(rs):.0f}%" if rb and rs else "-"
        lines.append(
            [shape, dtype, m, spread(b), spread(s), spread(ratio, "{:.2f}x"), roof,
             spread(dec, "{:.2f}x")]
        )  # fmt: skip
        points.append(
            {
                "shape": shape, "dtype": dtype, "m": m,
                "ratio": statistics.median(ratio) if ratio else None,
                "roof_base": statistics.median(rb) if rb else None,
                "roof_series": statistics.median(rs) if rs else None,
            }
        )  # fmt: skip
    return results.markdown_table(head, lines), points


def plot(points: list[dict], out: Path, gpu: str) -> None:
    arms = [("roof_base", "v0.34.0", "grey"), ("roof_series", "series", "tab:blue")]
    title = f"Per-tensor FP8 MoE layer, {gpu}: v0.34.0 (TRITON) vs the series"
    plots.roofline_by_shape(points, arms, out, title)


def main(argv: list[str] | None = None) -> int:
    a = report_page.parse(__doc__, argv)
    base, series = load_runs(a.base), load_runs(a.series)
    text, points = table(base, series)
    runs = f"{len(base)} runs of v0.34.0 and {len(series)} of the series, alternating"
    head = report_page.series_header(a)
    intro = report_page.ran(runs, head, clocks=True) + (
        " The layer as vLLM's FP8 oracle builds it (the modular kernel: prepare, experts, "
        "finalize) for the TRITON backend on v0.34.0 and for the series' decode backend "
        "(`--moe-backend triton_fp8_decode`), per-tensor FP8 weights, static or dynamic per-tensor "
        "activation scales; CUDA-graph replay with 8 routings cycled; median over the runs of "
        "each run's median, range = min-max over runs; speed-up per pair of runs."
    )
    title = "FP8 MoE layer on v0.34.0: the series against v0.34.0"
    md = report_page.page(a, __file__, title, intro, text)
    report_page.write(a, md, lambda png: plot(points, png, head.get("gpu", "")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
