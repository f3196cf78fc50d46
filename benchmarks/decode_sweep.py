#!/usr/bin/env python3
"""The series' decode kernels under other launch configurations, timed as the layer benchmark
times them (docs/ROADMAP.md, "Decode at 3-16 tokens": the decode path near the read roofline).

``fused_moe_decode.get_decode_config`` picks split-K, K steps and stages by rules chosen on an
H200 (0003); at one token the Qwen3-30B-A3B layer reaches 42-54% of the read roofline. This
times the layer as ``benchmarks/bench_moe_layer.py`` does (the modular kernel of the decode
backend, CUDA-graph replay with 8 routings cycled, bandwidth measured in the run, error against
a float32 reference) once with the patch's own configuration (variant ``patch``) and once per
override from ``--grid`` (variant ``SPLIT_K1=2,num_stages=3`` and so on): the override replaces
those keys of the patch's configuration, by patching the name the decode experts class calls,
as ``benchmarks/decode_split.py`` does; the patch is unchanged. Every configuration compiles
its own kernel variants (about 1-3 s each on an H200), so the default grid is small: split-K
of both kernels and the stages, 18 configurations per shape, scale and batch; K steps
(``BLOCK_K1``, ``BLOCK_K2``), tiles (``BLOCK_I``: GEMM1's intermediate rows, twice that many
weight rows; ``BLOCK_N``: GEMM2's hidden rows) and warps only when ``--grid`` names them, e.g.
``--grid BLOCK_N=64,128 BLOCK_K2=128,256 SPLIT_K2=1,2`` for GEMM2, the kernel furthest from
the roofline in the served trace.

    cd /root/vllm-series && PYTHONPATH=/root/site:/root/vllm-series:<ws> \\
        python3 -m benchmarks.decode_sweep --variant series --out decode_sweep.json
    python3 -m benchmarks.decode_sweep --report decode_sweep.json    # the table, any host (several
                                                                     # files: runs of one grid)
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import statistics
import sys
from collections.abc import Iterator
from functools import partial

from benchmarks import decode_split, shapes
from vseries import results

BENCH = "decode_sweep"
GRID = {"SPLIT_K1": (1, 2, 4), "SPLIT_K2": (1, 2), "num_stages": (3, 4, 5)}
KEYS = (
    "BLOCK_I", "BLOCK_K1", "SPLIT_K1", "BLOCK_N", "BLOCK_K2", "SPLIT_K2", "num_warps", "num_stages",
    "PDL", "PREFETCH", "ONE_PASS", "BLOCK_N_OP",
)  # fmt: skip
# on/off keys of a candidate's configuration (patches/candidates/0003-pdl.patch,
# 0003-one-pass.patch): 0 allowed
SWITCHES = ("PDL", "PREFETCH", "ONE_PASS")


def parse_grid(items: list[str]) -> dict[str, tuple[int, ...]]:
    """``KEY=v1,v2`` items (keys of the decode configuration) into a grid."""
    grid: dict[str, tuple[int, ...]] = {}
    for item in items:
        key, _, values = item.partition("=")
        if key not in KEYS or not values:
            raise argparse.ArgumentTypeError(
                f"--grid {item!r}: expected KEY=v1,v2 with KEY one of {', '.join(KEYS)}"
            )
        try:
            grid[key] = tuple(int(v) for v in values.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(f"--grid {item!r}: values must be integers") from None
        if key in SWITCHES and not set(grid[key]) <= {0, 1}:
            raise argparse.ArgumentTypeError(f"--grid {item!r}: values must be 0 or 1")
        if key not in SWITCHES and any(v < 1 for v in grid[key]):
            raise argparse.ArgumentTypeError(f"--grid {item!r}: values must be positive")
    return grid


def overrides(grid: dict[str, tuple[int, ...]]) -> list[dict[str, int]]:
    """Every combination of the grid's values, in the grid's order."""
    keys = list(grid)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*grid.values())]


def label(override: dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in override.items()) or "patch"


@contextlib.contextmanager
def decode_config(override: dict[str, int], up_to: int) -> Iterator[None]:
    """The decode experts class takes the decode path up to ``up_to`` tokens (the layer
    benchmark's ``decode_up_to``) and runs the patch's configuration with ``override``'s keys
    replaced (``decode_split.config_rule``), inside the block."""
    from benchmarks.bench_moe_layer import decode_up_to

    with decode_up_to(up_to), decode_split.config_rule(lambda config, *_: {**config, **override}):
        yield


def run(a: argparse.Namespace) -> int:
    import torch
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.v1.worker import workspace

    from benchmarks import bench_moe_layer as layer_bench
    from benchmarks import harness, moe_layer
    from benchmarks.bench_moe_decode import make_layer

    workspace.init_workspace_manager(torch.device("cuda"))
    bw = harness.read_bandwidth()
    grid = a.grid or GRID
    head = harness.header(BENCH, a.variant, bw, grid={k: list(v) for k, v in grid.items()},
                          batches=a.batches)  # fmt: skip
    rows: list[results.Row] = []
    up_to = max(a.batches)
    with set_current_vllm_config(VllmConfig()):
        for shape in a.shapes:
            e, topk, h, i = shapes.MOE_SHAPES[shape]
            layer = make_layer(e, h, i, seed=1)
            for scale in a.scales:
                cfg = moe_layer.fused_moe_config(e, topk, h, i, up_to)
                cls, backend = next(
                    (c, b) for c, b in layer_bench.candidates()
                    if layer_bench.accepts(c, cfg, scale == "static")
                )  # fmt: skip
                if backend != "TRITON_FP8_DECODE":
                    print(f"{a.variant}: no decode backend in this tree", flush=True)
                    return 2
                for o in [{}, *overrides(grid)]:
                    v = layer_bench.Variant(label(o), cls, backend,
                                            context=partial(decode_config, o, up_to))  # fmt: skip
                    out: list[results.Row] = []
                    layer_bench.run_variant(v, shape, scale, layer, a, bw, out)
                    rows += [dataclasses.replace(r, bench=BENCH) for r in out]
                    results.write(a.out, head, rows)
    return 0


def report(paths: str | list[str], top: int = 3) -> str:
    """Per shape, scale and batch: the patch's row and the ``top`` fastest configurations.
    Several files (runs of one grid, on one machine): each configuration's median over the
    runs, its range the runs' fastest and slowest, the error the largest."""
    paths = [paths] if isinstance(paths, str) else paths
    runs = []
    for path in paths:
        try:
            head, rows = results.load(path)
        except ValueError as exc:
            raise SystemExit(f"decode_sweep --report: {exc}") from None
        rows = [r for r in rows if r.get("bench") == BENCH]
        if not rows:
            raise SystemExit(f"decode_sweep --report: {path} has no {BENCH} rows")
        runs.append(rows)
    if len(runs) == 1:
        what = "us (range): median of the run's replays (their range)"
    else:
        what = f"us (range): median of {len(runs)} runs' medians (their range)"
    out = [
        f"{head.get('gpu', 'GPU ?')}, tree {head.get('variant', '?')}; % of the read roofline"
        f" at the bandwidth measured in the run; {what}",
        "",
        "| shape | scales | M | configuration | us (range) | % roofline | err | vs patch |",
        "|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple, dict[str, list[dict]]] = {}
    failed: dict[tuple, set[str]] = {}
    for rows in runs:
        for r in rows:
            key = (r["shape"], r["dtype"], r["m"])
            if r.get("us"):
                groups.setdefault(key, {}).setdefault(r["variant"], []).append(r)
            else:
                failed.setdefault(key, set()).add(r["variant"])
    for key in sorted(set(groups) | set(failed)):
        shape, scale, m = key
        merged = {v: _merge(rs, len(runs) == 1) for v, rs in groups.get(key, {}).items()}
        patch = merged.pop("patch", None)
        timed = sorted(merged.items(), key=lambda kv: kv[1]["us"])[:top]
        shown = ([("patch", patch)] if patch else []) + timed
        for variant, r in shown:
            ratio = f"{patch['us'] / r['us']:.2f}x" if patch else "-"
            out.append(
                f"| {shape} | {scale} | {m} | {variant} | {r['us']:.1f} "
                f"({r['lo']:.1f}-{r['hi']:.1f}) | {r['pct']:.0f}% "
                f"| {r['err']:.4f} | {ratio} |"
            )
        if key in failed:
            out.append(f"| {shape} | {scale} | {m} | failed: {'; '.join(sorted(failed[key]))} "
                       "| | | | |")  # fmt: skip
    return "\n".join(out) + "\n"


def _merge(rows: list[dict], one_run: bool) -> dict[str, float]:
    us = sorted(r["us"] for r in rows)
    mid = statistics.median(us)
    return {
        "us": mid,
        "lo": rows[0]["us_min"] if one_run else us[0],
        "hi": rows[0]["us_max"] if one_run else us[-1],
        "pct": statistics.median(r["roofline_pct"] for r in rows),
        "err": max(r.get("rel_err", float("nan")) for r in rows),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--report",
        metavar="JSON",
        nargs="+",
        help="print the table of a finished run (several: of runs of one grid)",
    )
    ap.add_argument(
        "--top",
        type=int,
        default=3,
        help="--report: how many configurations beside the patch's (default 3)",
    )
    ap.add_argument("--variant", help="name of the tree (series: it needs the decode backend)")
    ap.add_argument("--out", help="the result file (JSON), rewritten after every configuration")
    ap.add_argument(
        "--shapes",
        nargs="+",
        default=["qwen3-30b-a3b", "dsv3-tp8"],
        choices=list(shapes.MOE_SHAPES),
        help="model shapes (benchmarks/shapes.py)",
    )
    ap.add_argument(
        "--batches", nargs="+", type=int, default=[1], help="tokens per call, 1 to 16 (default 1)"
    )
    ap.add_argument(
        "--scales",
        nargs="+",
        default=["static"],
        choices=["static", "dynamic"],
        help="activation scales (default static)",
    )
    ap.add_argument("--reps", type=int, default=30, help="CUDA-graph replays per timing")
    default = " ".join(f"{k}={','.join(map(str, v))}" for k, v in GRID.items())
    ap.add_argument("--grid", nargs="+", metavar="KEY=v1,v2",
                    help=f"the configurations to try, KEY one of {', '.join(KEYS)} "
                         f"(default: {default})")  # fmt: skip
    a = ap.parse_args(argv)
    if a.report:
        print(report(a.report, a.top), end="")
        return 0
    if not (a.variant and a.out):
        ap.error("--variant and --out are needed to run (or --report JSON to print a table)")
    if any(not 1 <= m <= 16 for m in a.batches):
        ap.error("--batches: the decode kernels take 1 to 16 tokens")
    try:
        a.grid = parse_grid(a.grid) if a.grid else None
    except argparse.ArgumentTypeError as exc:
        ap.error(str(exc))
    import torch

    if not torch.cuda.is_available():
        print(
            "decode_sweep: no CUDA GPU here; the sweep runs on an SM90 GPU (moved.sh phase "
            "sweep), --report JSON prints a finished run's table anywhere",
            file=sys.stderr,
        )
        return 2
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
