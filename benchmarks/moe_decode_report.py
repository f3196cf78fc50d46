#!/usr/bin/env python3
"""Table and plot of ``bench_moe_decode.py`` results: whole FP8 MoE layer, % of the roofline.

    python benchmarks/moe_decode_report.py BASE.json SERIES.json --out benchmarks/results/moe_decode
    python benchmarks/moe_decode_report.py SERIES.json --out ...    # a session without a base run

Reads the two result files of one session (``benchmarks/harness.py`` schema: a header with the
measured read bandwidth and rows with ``shape``, ``dtype``, ``m``, ``variant``, ``us``,
``us_min``, ``us_max``, ``roofline_pct``) and writes ``OUT.md`` (per shape and activation-scale
kind: time and % of the read roofline for v0.21.0, the series without the decode patch
(``decode_off``) and the series, with both ratios) and ``OUT.png`` (% of the roofline against
tokens; the one-launch variant ``one_kernel`` where the run has it). With one file only (a
session that ran the series tree alone) the v0.21.0 columns and ratios are left out rather
than taken from another session. ``--sweep FILE`` adds the cfg:/prequant variants of an
earlier run of the series tree; ``--anatomy FILE`` the fixed cost and streaming rate of each
decode kernel (``moe_decode_anatomy.py``).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections import defaultdict
from pathlib import Path

from benchmarks import plots
from vseries import results


def index(rows: list[dict]) -> dict:
    out: dict = defaultdict(dict)
    for r in rows:
        out[(r["shape"], r["dtype"].removeprefix("fp8_per_tensor_"), r["m"])][r["variant"]] = r
    return out


def fmt(r: dict) -> str:
    return f"{r['us']:.1f} ({r['us_min']:.1f}-{r['us_max']:.1f}), {r['roofline_pct']:.0f}%"


def table(base: dict | None, series: dict) -> list[str]:
    if base is None:
        return series_table(series)
    head = ["shape", "act. scale", "M", "v0.21.0 us (range), % roofline", "series without 0005"]
    head += ["series", "series / v0.21.0", "series / without 0005", "max rel. err vs fp32"]
    rows = []
    for key in sorted(series, key=lambda k: (k[0], k[1], k[2])):
        b, s = base[key]["default"], series[key]
        d, o = s["default"], s["decode_off"]
        err = d.get("rel_err_vs_fp32")
        rows.append(
            [*key, fmt(b), fmt(o), fmt(d), f"{b['us'] / d['us']:.3f}x",
             f"{o['us'] / d['us']:.3f}x", "" if err is None else f"{err:.3f}"]
        )  # fmt: skip
    return results.markdown_table(head, rows).splitlines()


def series_table(series: dict) -> list[str]:
    """``table`` for a run of the series tree alone: the series without 0005 and the series."""
    head = ["shape", "act. scale", "M", "series without 0005 us (range), % roofline", "series"]
    head += ["series / without 0005", "max rel. err vs fp32"]
    rows = []
    for key in sorted(series, key=lambda k: (k[0], k[1], k[2])):
        d, o = series[key]["default"], series[key]["decode_off"]
        err = d.get("rel_err_vs_fp32")
        rows.append(
            [*key, fmt(o), fmt(d), f"{o['us'] / d['us']:.3f}x", "" if err is None else f"{err:.3f}"]
        )
    return results.markdown_table(head, rows).splitlines()


def sweep_table(sweep: dict) -> list[str]:
    # variants without a config, beside the cfg: ones
    extra = {"prequant", "in_kernel", "l2_hot"}
    names = sorted(
        {
            v
            for variants in sweep.values()
            for v in variants
            if ":" in v or v in extra or v.startswith("one_kernel")
        }
    )
    rows = []
    for key in sorted(sweep):
        variants = sweep[key]
        if not any(":" in v for v in variants):
            continue
        cells = [f"{variants[n]['us']:.1f}" if n in variants else "" for n in names]
        rows.append([*key, f"{variants['default']['us']:.1f}", *cells])
    head = ["shape", "act. scale", "M", "default", *names]
    return results.markdown_table(head, rows).splitlines()


def anatomy_table(head: dict) -> list[str]:
    """Markdown rows of ``moe_decode_anatomy.py``'s fits (its header's ``fits``): per shape,
    scale kind, kernel and routing, the fixed cost (us) and the streaming rate (GB/s, and as
    % of the read bandwidth measured in that run)."""
    bw = head["read_bandwidth_Bps"] / 1e9
    rows = []
    for f in sorted(
        head.get("fits", []), key=lambda f: (f["shape"], f["dtype"], f["kernel"], f["routing"])
    ):
        where = "HBM (8 routings cycled)" if f["routing"] == "cycled" else "L2 (one routing)"
        rows.append(
            [f["shape"], f["dtype"].removeprefix("fp8_per_tensor_"), f["kernel"], where,
             f"{f['fixed_us']:.1f}", f"{f['rate_GBps']:.0f}", f"{100 * f['rate_GBps'] / bw:.0f}%"]
        )  # fmt: skip
    cols = ["shape", "act. scale", "kernel", "weights", "fixed us", "streaming GB/s"]
    return results.markdown_table([*cols, "% of read bw"], rows).splitlines()


def section(title: str, intro: str, table: list[str]) -> list[str]:
    """A Markdown section: a blank line, ``## title``, the intro paragraph and the table."""
    return ["", f"## {title}", "", intro, "", *table]


def short(kernel: str) -> str:
    """A kernel's name without its template and argument lists (CUPTI gives C++ names)."""
    name = kernel.split("(")[0].split("<")[0].strip()
    return name.rsplit("::", 1)[-1] or kernel[:40]


def breakdown_table(trees: dict[str, dict]) -> list[str]:
    """Rows with ``kernels_us`` (``bench_moe_decode.py --breakdown-batches``): per tree,
    case and variant, the span per call, the gaps in it and each kernel's time."""
    rows = []
    for tree, idx in trees.items():
        for key in sorted(idx):
            for variant, r in sorted(idx[key].items()):
                k = r.get("kernels_us")
                if not k:
                    continue
                parts = sorted(
                    ((short(name), t) for name, t in k.items() if name not in ("span", "gaps")),
                    key=lambda p: -p[1],
                )
                kernels = ", ".join(f"{name} {t:.1f}" for name, t in parts)
                rows.append(
                    [tree, *key, variant, f"{k.get('span', 0):.1f}", f"{k.get('gaps', 0):.1f}",
                     kernels]
                )  # fmt: skip
    if not rows:
        return []
    head = ["tree", "shape", "act. scale", "M", "variant", "span us", "gaps us"]
    return results.markdown_table([*head, "kernels (us per call)"], rows).splitlines()


def plot(base: dict | None, series: dict, out: Path) -> None:
    shapes = sorted({k[0] for k in series})
    scales = ["static", "dynamic"]
    fig, axes = plots.grid(len(scales), len(shapes), (4.2, 3.5), sharey=True)
    for i, scale in enumerate(scales):
        for j, shape in enumerate(shapes):
            ax = axes[i][j]
            ms = sorted(k[2] for k in series if k[0] == shape and k[1] == scale)
            if not ms:  # a run of one activation-scale kind
                ax.set_visible(False)
                continue
            lines = [
                ("v0.21.0", base, "default", "o--"),
                ("series without 0005", series, "decode_off", "s:"),
                ("series", series, "default", "^-"),
                ("one launch (experiment)", series, "one_kernel", "x-."),
            ]
            for label, idx, variant, style in lines:
                if idx is None:
                    continue
                have = [m for m in ms if variant in idx.get((shape, scale, m), {})]
                if have:
                    pct = [idx[(shape, scale, m)][variant]["roofline_pct"] for m in have]
                    ax.plot(have, pct, style, label=label)
            ax.axhline(55, color="grey", lw=0.6)
            ax.axhline(80, color="grey", lw=0.6)
            plots.roofline_axis(ax, f"{shape}, {scale} act. scale", fontsize=9)
            if j:
                ax.set_ylabel("")
    axes[0][0].legend(fontsize=8)
    title = "Whole FP8 MoE layer (fused_experts), H200, graph replay, 8 routings cycled"
    plots.save(fig, out, title)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", metavar="[BASE] SERIES", help="one or two result files")
    ap.add_argument("--sweep", help="an earlier series result with cfg:/prequant variants")
    ap.add_argument("--anatomy", help="a moe_decode_anatomy.py result (fixed cost, rate)")
    ap.add_argument("--out", required=True, help="output path without suffix")
    ap.add_argument("--note", action="append", default=[], help="a line under the header")
    args = ap.parse_args()
    if len(args.files) > 2:
        ap.error(f"one or two result files, not {len(args.files)}")
    bh, base = None, None
    if len(args.files) == 2:
        bh, brows = results.load(args.files[0])
        base = index(brows)
    sh, srows = results.load(args.files[-1])
    series = index(srows)
    out = Path(args.out)
    lines = [
        "# FP8 MoE decode: the whole layer against the HBM read roofline (patch 0005)",
        "",
        f"Made by `python benchmarks/moe_decode_report.py {shlex.join(sys.argv[1:])}`.",
        "",
        *(
            [f"- base: `{bh['command']}` ({bh['time']}, {bh['gpu']}, clocks {bh['clocks']})"]
            if bh
            else ["- base: not run in this session (no ratios against v0.21.0 here)"]
        ),
        f"- series: `{sh['command']}` ({sh['time']}, {sh['gpu']}, clocks {sh['clocks']}, tree "
        f"{sh['tree'].get('head', '')[:12] or 'head not recorded by that run'})",
        "- read bandwidth measured in the same run(s): "
        + " and ".join(f"{h['read_bandwidth_Bps'] / 1e12:.2f}" for h in (bh, sh) if h)
        + " TB/s",
        "- kernels per call at one token (profiled graph replay): "
        + (f"base {bh.get('kernels_per_call_m1')}, " if bh else "")
        + f"series {sh.get('kernels_per_call_m1')}",
        *(f"- {note}" for note in args.note),
        "",
        *table(base, series),
        "",
        f"![% of roofline against tokens]({out.name}.png)",
    ]
    kernels = breakdown_table({"v0.21.0": base, "series": series} if base else {"series": series})
    if kernels:
        lines += section(
            "Where the time goes",
            "Device time per call of each kernel, from profiled replays of the same graph "
            "(`harness.kernel_times`); span: first kernel start to last kernel end per call; "
            "gaps: span less the kernels' sum (negative where kernels overlap).",
            kernels,
        )
    if args.sweep:
        _, sweep_rows = results.load(args.sweep)
        lines += section(
            f"Tiles, split-K, stages and the dynamic scale (`{args.sweep}`)",
            "Time in us of the decode kernels with the heuristic's config and its neighbours, "
            "and of `prequant` (vLLM's dynamic quantisation kernel, then the decode kernels) "
            "and `in_kernel` (the dynamic scale found in GEMM1 at any size); "
            "`default` there is the path as it stood in that run (its header names the tree).",
            sweep_table(index(sweep_rows)),
        )
    if args.anatomy:
        ah, _ = results.load(args.anatomy)
        lines += section(
            f"Fixed cost against streaming rate at one token (`{args.anatomy}`)",
            f"`{ah['command']}` ({ah['time']}, read bandwidth "
            f"{ah['read_bandwidth_Bps'] / 1e12:.2f} TB/s): each decode kernel's K grown "
            "(0.25-1x of the model's) with its grid and config fixed; a least-squares line "
            "`us = fixed + MB / rate` through its device times (profiled graph replays).",
            anatomy_table(ah),
        )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    plot(base, series, out.with_suffix(".png"))
    print(f"wrote {out.with_suffix('.md')} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
