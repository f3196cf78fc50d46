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
    python3 -m benchmarks.decode_sweep --report decode_sweep.json    # the table, any host
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import sys
from collections.abc import Iterator
from functools import partial

from benchmarks import decode_split, shapes
from vseries import results

BENCH = "decode_sweep"
GRID = {"SPLIT_K1": (1, 2, 4), "SPLIT_K2": (1, 2), "num_stages": (3, 4, 5)}
KEYS = (
    "BLOCK_I", "BLOCK_K1", "SPLIT_K1", "BLOCK_N", "BLOCK_K2", "SPLIT_K2", "num_warps", "num_stages",
)  # fmt: skip


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
        if any(v < 1 for v in grid[key]):
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


def report(path: str, top: int = 3) -> str:
    """Per shape, scale and batch: the patch's row and the ``top`` fastest configurations."""
    try:
        head, rows = results.load(path)
    except ValueError as exc:
        raise SystemExit(f"decode_sweep --report: {exc}") from None
    rows = [r for r in rows if r.get("bench") == BENCH]
    if not rows:
        raise SystemExit(f"decode_sweep --report: {path} has no {BENCH} rows")
    out = [
        f"{head.get('gpu', 'GPU ?')}, tree {head.get('variant', '?')}; % of the read roofline"
        " at the bandwidth measured in the run",
        "",
        "| shape | scales | M | configuration | us (range) | % roofline | err | vs patch |",
        "|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["shape"], r["dtype"], r["m"]), []).append(r)
    for (shape, scale, m), group in sorted(groups.items()):
        patch = next((r for r in group if r["variant"] == "patch" and r.get("us")), None)
        timed = sorted((r for r in group if r.get("us") and r["variant"] != "patch"),
                       key=lambda r: r["us"])  # fmt: skip
        for r in [patch, *timed[:top]] if patch else timed[:top]:
            ratio = f"{patch['us'] / r['us']:.2f}x" if patch else "-"
            out.append(
                f"| {shape} | {scale} | {m} | {r['variant']} | {r['us']:.1f} "
                f"({r['us_min']:.1f}-{r['us_max']:.1f}) | {r['roofline_pct']:.0f}% "
                f"| {r.get('rel_err', float('nan')):.4f} | {ratio} |"
            )
        failed = [r["variant"] for r in group if not r.get("us")]
        if failed:
            out.append(f"| {shape} | {scale} | {m} | failed: {'; '.join(failed)} | | | | |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--report", metavar="JSON", help="print the table of a finished run")
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
        print(report(a.report), end="")
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
