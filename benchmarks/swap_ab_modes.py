#!/usr/bin/env python3
"""Does swap-AB pay for the quantisation modes its rule leaves unswapped? H200, one run.

Patch 0001 swaps decode tiles by rule only for per-tensor FP8; FP8 block-wise (128x128),
FP8 per-token activations with per-channel weights, and INT8 w8a8 per-token were not measured.
For each of those modes, the Qwen3-30B-A3B and DeepSeek-V3 TP8 shapes and decode batches, this
times the whole `fused_experts` call on the patched tree with:

- "stock": the config vLLM picks (`try_get_optimal_moe_config`: the tuned H200 file where v0.21.0
  has one, e.g. block FP8, else the default), unswapped ("SWAP_AB": false), as base runs it;
- "stock_swapped": the same config with "SWAP_AB": true (the launcher maps it onto wgmma);
- "best_swapped": the best of a few swapped tiles (BLOCK_SIZE_N 64/128 x 3-5 stages);
- with --rule, "rule": the same config with no "SWAP_AB" key, so the launcher's rule decides per
  GEMM (e.g. it keeps DeepSeek-V3's w2, K=256, unswapped).

Timing and result file are ``benchmarks/harness.py``'s: CUDA-graph replay with 4 routings
cycled inside the graph, median and range in us; rows (variants stock, stock_swapped,
best_swapped, or rule) with roofline %.

    cd /root/vllm-patched && PYTHONPATH=/root/site:/root/vllm-patched:<ws> \\
        python3 -m benchmarks.swap_ab_modes --out swap_ab_modes.json

Exit 2 without CUDA or on a tree without the swap-AB patch.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time

import torch

from benchmarks import bench_swap_ab as bench
from benchmarks import harness
from benchmarks import tune_swap_ab as tune
from vseries import results

MODES = ("fp8_block", "fp8_per_token", "int8_per_token")
BATCHES = (1, 4, 16, 64)
SWAPPED = [
    dict(BLOCK_SIZE_N=n, num_stages=s, num_warps=4, SWAP_AB=True)
    for n, s in itertools.product((64, 128), (3, 4, 5))
]


def make_mode(mode: str, e: int, h: int, i: int, seed: int):
    """(w1 [E, 2I, H], w2 [E, H, I], quant config, dtype name for config lookup, block_shape).

    Weights are randn/16 quantised to FP8 or INT8 with random positive scales (block 128x128
    [E, 2I/128, H/128], or per output channel [E, N]); activations are quantised per token or
    per 128-group dynamically by fused_experts.
    """
    from vllm.model_executor.layers.fused_moe.config import (
        fp8_w8a8_moe_quant_config,
        int8_w8a8_moe_quant_config,
    )

    g = torch.Generator(device="cuda").manual_seed(seed)
    w1 = torch.randn(e, 2 * i, h, device="cuda", generator=g) / 16
    w2 = torch.randn(e, h, i, device="cuda", generator=g) / 16

    def scales(*shape):
        return torch.rand(*shape, device="cuda", generator=g) * 0.01 + 0.005

    if mode == "fp8_block":
        bs = [128, 128]
        s1 = scales(e, -(-2 * i // 128), -(-h // 128))
        s2 = scales(e, -(-h // 128), -(-i // 128))
        qc = fp8_w8a8_moe_quant_config(w1_scale=s1, w2_scale=s2, block_shape=bs)
        return w1.to(bench.FP8), w2.to(bench.FP8), qc, "fp8_w8a8", bs
    if mode == "fp8_per_token":
        qc = fp8_w8a8_moe_quant_config(
            w1_scale=scales(e, 2 * i),
            w2_scale=scales(e, h),
            per_act_token_quant=True,
            per_out_ch_quant=True,
        )
        return w1.to(bench.FP8), w2.to(bench.FP8), qc, "fp8_w8a8", None
    if mode == "int8_per_token":
        qc = int8_w8a8_moe_quant_config(
            w1_scale=scales(e, 2 * i),
            w2_scale=scales(e, h),
            a1_scale=None,
            a2_scale=None,
            per_act_token_quant=True,
        )
        q = lambda w: (w * 127 / w.abs().amax()).round().to(torch.int8)  # noqa: E731
        return q(w1), q(w2), qc, "int8_w8a8", None
    raise ValueError(f"unknown mode {mode}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--shapes", nargs="+", default=list(tune.TUNE_SHAPES))
    ap.add_argument("--batches", nargs="+", type=int, default=list(BATCHES))
    ap.add_argument("--budget-s", type=float, default=300, help="stop past this wall time, s")
    ap.add_argument("--rule", action="store_true", help="time stock and rule only")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    found = tune.patched_moe("swap-ab-modes", "patched")
    if found is None:
        return 2
    fm, override_config, result = found
    bw = result["read_bandwidth_Bps"]
    rows: list[results.Row] = []
    for mode, (s_idx, name) in itertools.product(args.modes, enumerate(args.shapes)):
        e, topk, h, i = bench.SHAPES[name]
        w1, w2, qc, dtype, bs = make_mode(mode, e, h, i, seed=1000 + s_idx)
        for batch in args.batches:
            if time.monotonic() - t0 > args.budget_s:
                result["stopped_early"] = f"{mode} {name} M={batch}"
                break
            g = torch.Generator(device="cuda").manual_seed(batch)
            x = torch.randn(batch, h, device="cuda", dtype=torch.bfloat16, generator=g)
            sets = harness.routings(batch, e, topk, 4, 7 * batch + s_idx)
            nbytes = sum(harness.moe_bytes(ids, h, i) for _, ids in sets) / len(sets)
            stock = fm.try_get_optimal_moe_config(w1.size(), w2.size(), topk, dtype, batch, bs)
            stock = {k: v for k, v in stock.items() if k != "SWAP_AB"}
            cands = [("stock", dict(stock, SWAP_AB=False))]
            if args.rule:
                cands += [("rule", dict(stock))]
            else:
                cands += [("stock_swapped", dict(stock, SWAP_AB=True))]
                cands += [("best_swapped", dict(stock, **c)) for c in SWAPPED]
            best: dict[str, dict] = {}
            for kind, cfg in cands:
                try:
                    timed = tune.time_config(fm, override_config, x, w1, w2, qc, sets, cfg)
                except Exception as exc:  # a tile that does not fit: skip it
                    print(f"{mode} {name} M={batch} {cfg}: {type(exc).__name__}", flush=True)
                    continue
                if kind not in best or timed.us < best[kind][0].us:
                    best[kind] = (timed, cfg)
            for kind, (timed, cfg) in best.items():
                row = results.Row(
                    "swap-ab-modes", name, mode, batch, kind, round(timed.us, 2),
                    round(timed.us_min, 2), round(timed.us_max, 2), int(nbytes),
                    round(harness.roofline_pct(nbytes, timed.us, bw), 1),
                    {"timing": "graph", "config": cfg},
                )  # fmt: skip
                rows.append(row)
                print(
                    json.dumps(
                        {"shape": name, "dtype": mode, "m": batch, "variant": kind, "us": row.us}
                    )
                )
            results.write(args.out, result, rows)
        del w1, w2
        torch.cuda.empty_cache()
    result["wall_s"] = round(time.monotonic() - t0, 1)
    results.write(args.out, result, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
