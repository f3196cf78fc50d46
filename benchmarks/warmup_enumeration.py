#!/usr/bin/env python3
"""CPU cost of the fused-MoE warm-up's enumeration (patch 0004), per layer shape.

Before it compiles anything, the start-up warm-up of patch 0004
(``vllm.model_executor.warmup.fused_moe_warmup.fused_moe_warmup_batch_sizes``) asks the
layer's own config lookup for every batch size 1..max_num_batched_tokens to find one batch
size per distinct Triton variant. That walk is pure host work, once per distinct MoE layer
shape of a model; this times it on the host it runs on, for the shapes of
``benchmarks/harness.py`` (per-tensor FP8 with dynamic activation scales, as
``quantization="fp8"`` serves them) and several ``max_num_batched_tokens``: 8192 (vLLM's
default for ``vllm serve`` on an H200), 16384 (its offline ``LLM`` default), 40960 and 131072
(no chunked prefill: the model length). The platform is a mocked SM90 H200, so the tuned
H200 config files of the tree are the ones looked up, as on the GPU host. No GPU is needed.

    CUDA_VISIBLE_DEVICES= python benchmarks/warmup_enumeration.py --variant series \\
        --out benchmarks/results/raw/warmup_enumeration.json

Each figure: median and range of ``--reps`` walks (seconds of host time), with the number of
variants (warm-up calls) found. A tree without the warm-up (v0.21.0) is refused (exit 2).
``--report JSON --out benchmarks/results/warmup_enumeration`` writes the table and plot.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from benchmarks import harness, moe_layer, plots, shapes
from vseries import results

MAX_TOKENS = (8192, 16384, 40960, 131072)


def layer(e: int, topk: int, hidden: int, inter: int):
    """What the warm-up reads of a FusedMoE layer (weights on the meta device) and its
    TritonExperts, per-tensor FP8 weights and dynamic per-tensor activation scales."""
    import torch
    from vllm.model_executor.layers.fused_moe.config import fp8_w8a8_moe_quant_config
    from vllm.model_executor.layers.fused_moe.experts.triton_moe import TritonExperts

    fp8 = torch.float8_e4m3fn
    moe_config = moe_layer.fused_moe_config(e, topk, hidden, inter, max_num_tokens=512)
    quant = fp8_w8a8_moe_quant_config(
        w1_scale=torch.ones(e), w2_scale=torch.ones(e), a1_scale=None, a2_scale=None
    )
    fake = moe_layer.stand_in(
        torch.empty(e, 2 * inter, hidden, dtype=fp8, device="meta"),
        torch.empty(e, hidden, inter, dtype=fp8, device="meta"),
        topk,
        moe_config,
    )
    return fake, TritonExperts(moe_config, quant)


def report(path: str, out: Path) -> None:
    """OUT.md (seconds per walk, median and range, and per batch size) and OUT.png."""
    head, rows = results.load(path)
    lines = [
        "# Fused-MoE warm-up: host time of the variant enumeration (patch 0004)",
        "",
        f"Made by `{head['command']}` ({head['time']}, {head.get('host', '')}, "
        f"torch {head['torch']}), then `python benchmarks/warmup_enumeration.py --report "
        f"{path} --out {out}`. One walk per distinct MoE layer shape of a model, at start-up, "
        "before the compiles; per-tensor FP8, dynamic activation scales.",
        "",
    ]
    table = []
    fig, axes = plots.grid(1, 1, (6, 4))
    ax = axes[0][0]
    for shape in sorted({r["shape"] for r in rows}):
        mine = sorted((r for r in rows if r["shape"] == shape), key=lambda r: r["m"])
        for r in mine:
            table.append(
                [shape, r["m"], f"{r['us'] / 1e6:.3f} ({r['us_min'] / 1e6:.3f}-"
                 f"{r['us_max'] / 1e6:.3f})", f"{r['us'] / r['m']:.1f}", r["variants"]]
            )  # fmt: skip
        ax.plot([r["m"] for r in mine], [r["us"] / 1e6 for r in mine], "o-", label=shape)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("max_num_batched_tokens")
    ax.set_ylabel("enumeration, s of host time")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Fused-MoE warm-up: variant enumeration per layer shape", fontsize=9)
    plots.save(fig, out.with_suffix(".png"))
    head = ["shape", "max_num_batched_tokens", "walk s, median (range)", "us per batch size"]
    lines += [results.markdown_table([*head, "variants (warm-up calls)"], table)]
    lines += ["", f"![enumeration time]({out.name}.png)"]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out.with_suffix('.md')} and {out.with_suffix('.png')}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variant", help="name of the tree, e.g. series")
    ap.add_argument("--out", required=True, help="result JSON (with --report: OUT.md, OUT.png)")
    ap.add_argument("--report", metavar="JSON", help="write the table and plot of a result file")
    ap.add_argument("--shapes", nargs="*", default=list(shapes.MOE_SHAPES))
    ap.add_argument("--max-tokens", nargs="*", type=int, default=list(MAX_TOKENS))
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    if args.report:
        report(args.report, Path(args.out))
        return 0
    if not args.variant:
        ap.error("--variant is required to measure")
    try:
        from vllm.model_executor.warmup import fused_moe_warmup
    except ImportError:
        print("error: this vLLM tree has no fused-MoE warm-up (patch 0004)", file=sys.stderr)
        print("next: run it with the series' vLLM (scripts/setup.sh installs it)", file=sys.stderr)
        return 2
    import vllm.model_executor.layers.fused_moe.fused_moe as fm

    fm.current_platform = moe_layer.mock_h200()
    rows = []
    for shape in args.shapes:
        fake, experts = layer(*shapes.MOE_SHAPES[shape])
        for n in args.max_tokens:
            times, variants = [], 0
            for _ in range(args.reps):
                fm.get_moe_configs.cache_clear()  # each walk reads the config file once
                t0 = time.perf_counter()
                variants = len(fused_moe_warmup.fused_moe_warmup_batch_sizes(fake, experts, n))
                times.append(time.perf_counter() - t0)
            med = statistics.median(times)
            rows.append(
                results.Row(
                    "warmup-enumeration",
                    shape,
                    "fp8_per_tensor_dynamic",
                    n,
                    args.variant,
                    round(med * 1e6, 1),
                    round(min(times) * 1e6, 1),
                    round(max(times) * 1e6, 1),
                    extra={"variants": variants, "reps": args.reps},
                )
            )
            print(
                f"{shape} max_num_batched_tokens={n}: {med:.3f} s "
                f"({min(times):.3f}-{max(times):.3f}), {variants} variants",
                flush=True,
            )
    with open("/proc/cpuinfo") as f:
        cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    head = harness.header(
        "warmup-enumeration",
        args.variant,
        None,
        host=f"{cpu or 'unknown CPU'}, {os.cpu_count()} cores (mocked SM90 H200)",
    )
    results.write(args.out, head, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
