#!/usr/bin/env python3
"""H200 benchmark of the swap-AB patch: vLLM's whole Triton fused MoE layer, base vs patched.

Times `fused_experts` (activation quantisation, alignment, both fused_moe_kernel GEMMs, the
activation and the top-k reduction; routing excluded: top-k ids and weights are precomputed) for
three model shapes, two dtypes and batch sizes 1..4096, once per staged tree:

    cd /root/vllm-base && PYTHONPATH=/root/site:/root/vllm-base:<ws> \\
        python3 -m benchmarks.bench_swap_ab --variant base --out $OUT/swap_ab_base.json
    cd /root/vllm-patched && PYTHONPATH=/root/site:/root/vllm-patched:<ws> \\
        python3 -m benchmarks.bench_swap_ab --variant patched --out $OUT/swap_ab_patched.json

Method (``benchmarks/harness.py``, shared by every benchmark): every batch is timed under
CUDA-graph replay with ``--routing-sets`` routings of different experts captured in one graph
and cycled (as consecutive MoE layers of a model would, so that small batches do not find
their experts' weights in the 50 MB L2 from the previous call); median and range of the
replays, in us. The ceiling is HBM read bandwidth measured in the same run; bytes that must
move = distinct experts touched (mean over the routings) * their w13 + w2 bytes + bf16
activations in and out (``harness.moe_bytes``). Every variant gets the same seeds, so the
same weights and routings. (Before the harness: ``do_bench_cudagraph`` with the routings
cycled by the host between calls; round 1 timed batches >= 256 eagerly, and identical code
moved +-50% there.)

Each row records the config vLLM picked (`try_get_optimal_moe_config`) and, on a tree that has
`get_fused_moe_swap_ab_config` (the patched one), whether the decode GEMMs run swapped and with
which tile. `--part gemm` instead times the two fused_moe_kernel launches alone at decode sizes,
unswapped and swapped and with a few swapped tiles (patched tree only), to tune the swap.

Writes the harness's result file ({"header": ..., "rows": [...]}, bench "swap-ab" or
"swap-ab-gemm"). Whole run: about 2 minutes per tree on an H200 (--part layer); --part gemm
about 2 minutes on the patched tree.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time

import torch

from benchmarks import harness, shapes
from vseries import results

SHAPES = shapes.MOE_SHAPES
BATCHES = [1, 2, 4, 8, 16, 32, 64, 256, 1024, 4096]
DTYPES = ["fp8_w8a8_per_tensor", "bf16"]
GEMM_BATCHES = [1, 16, 64]
# Swapped tiles tried besides the launcher's own choice (--part gemm): (BLOCK_SIZE_N, num_stages).
GEMM_SWAP_TILES = [(64, 5), (128, 4)]
FP8 = torch.float8_e4m3fn


def make_weights(e: int, h: int, i: int, dtype: str, seed: int):
    """w13 [E, 2I, H] and w2 [E, H, I], bf16 or FP8 (values randn/16, per-tensor scale 1)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    w1 = torch.randn(e, 2 * i, h, device="cuda", dtype=torch.bfloat16, generator=g) / 16
    w2 = torch.randn(e, h, i, device="cuda", dtype=torch.bfloat16, generator=g) / 16
    if dtype == "bf16":
        return w1, w2
    return w1.to(FP8), w2.to(FP8)


def quant_config_for(dtype: str, e: int):
    from vllm.model_executor.layers.fused_moe.config import (
        FUSED_MOE_UNQUANTIZED_CONFIG,
        fp8_w8a8_moe_quant_config,
    )

    if dtype == "bf16":
        return FUSED_MOE_UNQUANTIZED_CONFIG
    ones = torch.ones(e, device="cuda", dtype=torch.float32)
    # Static per-tensor activation scales, as in the design notes' baseline.
    return fp8_w8a8_moe_quant_config(
        w1_scale=ones, w2_scale=ones, a1_scale=ones[:1], a2_scale=ones[:1]
    )


def swap_choice(fm, config: dict, a_dtype: torch.dtype, b_dtype: torch.dtype, ks: tuple):
    """(swap_ab per GEMM, tile of the first swapped one) that the patched launcher picks for
    config, for the reduction sizes ks = (K of w13, K of w2); (None, None) on a base tree."""
    decide = getattr(fm, "get_fused_moe_swap_ab_config", None)
    if decide is None:
        return None, None
    dev = torch.cuda.current_device()
    swaps = [decide(dict(config), a_dtype, b_dtype, device_id=dev, K=k) for k in ks]
    keys = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "num_warps", "num_stages")
    tile = next(({k: sw[k] for k in keys} for sw in swaps if sw is not None), None)
    return [sw is not None for sw in swaps], tile


def bench_layer(args, bw: float) -> list[results.Row]:
    """Whole fused_experts call per shape, dtype and batch (bw: read bandwidth, bytes/s)."""
    from vllm.model_executor.layers.fused_moe import fused_moe as fm

    rows = []
    for s_idx, (name, (e, topk, h, i)) in enumerate(SHAPES.items()):
        for dtype in DTYPES:
            w1, w2 = make_weights(e, h, i, dtype, seed=1000 + s_idx)
            qc = quant_config_for(dtype, e)
            elem = 1 if dtype != "bf16" else 2
            for batch in args.batches:
                try:
                    g = torch.Generator(device="cuda").manual_seed(batch)
                    x = torch.randn(batch, h, device="cuda", dtype=torch.bfloat16, generator=g)
                    sets = harness.routings(batch, e, topk, args.routing_sets, 7 * batch + s_idx)
                    distinct = sum(torch.unique(ids).numel() for _, ids in sets) / len(sets)
                    nbytes = sum(harness.moe_bytes(ids, h, i, elem) for _, ids in sets) / len(sets)
                    calls = [
                        functools.partial(fm.fused_experts, x, w1, w2, tw, ti, quant_config=qc)
                        for tw, ti in sets
                    ]
                    t0 = time.time()
                    calls[0]()  # compile outside the timing
                    torch.cuda.synchronize()
                    compile_s = time.time() - t0
                    t = harness.time_graph(calls)
                    config = fm.try_get_optimal_moe_config(
                        w1.size(), w2.size(), topk, "fp8_w8a8" if dtype != "bf16" else None, batch
                    )
                    a_dtype = FP8 if dtype != "bf16" else torch.bfloat16
                    swap, tile = swap_choice(fm, config, a_dtype, w1.dtype, (h, i))
                    row = results.Row(
                        "swap-ab", name, dtype, batch, args.variant,
                        round(t.us, 2), round(t.us_min, 2), round(t.us_max, 2), int(nbytes),
                        round(harness.roofline_pct(nbytes, t.us, bw), 1),
                        dict(
                            timing="graph",
                            routing_sets=len(sets),
                            distinct_experts=distinct,
                            config={k: v for k, v in config.items() if k != "SPLIT_K"},
                            swap_ab=swap,
                            swap_config=tile,
                            first_call_s=round(compile_s, 2),
                        ),
                    )  # fmt: skip
                except Exception as exc:  # keep the other rows of a one-shot GPU run
                    row = results.failed("swap-ab", name, dtype, batch, args.variant, exc)
                rows.append(row)
                print(json.dumps(row.as_dict()), flush=True)
            del w1, w2
            torch.cuda.empty_cache()
    return rows


def bench_gemm(args, bw: float) -> list[results.Row]:
    """The two fused_moe_kernel launches of the layer alone, at decode sizes, per tile choice
    (bw: read bandwidth, bytes/s)."""
    from vllm.model_executor.layers.fused_moe import fused_moe as fm
    from vllm.triton_utils import tl

    patched = hasattr(fm, "get_fused_moe_swap_ab_config")
    rows = []
    for s_idx, (name, (e, topk, h, i)) in enumerate(SHAPES.items()):
        for dtype in DTYPES:
            w1, w2 = make_weights(e, h, i, dtype, seed=1000 + s_idx)
            fp8 = dtype != "bf16"
            elem = 1 if fp8 else 2
            for batch in GEMM_BATCHES:
                config = fm.try_get_optimal_moe_config(
                    w1.size(), w2.size(), topk, "fp8_w8a8" if fp8 else None, batch
                )
                variants = {"unswapped": (config, False)}
                if patched:
                    variants["swapped"] = (config, True)
                    for bn, st in GEMM_SWAP_TILES:
                        cfg = dict(config, BLOCK_SIZE_N=bn, num_stages=st, num_warps=4)
                        variants[f"swapped_n{bn}_s{st}"] = (cfg, True)
                sets = harness.routings(batch, e, topk, args.routing_sets, 7 * batch + s_idx)
                g = torch.Generator(device="cuda").manual_seed(batch)
                x = torch.randn(batch, h, device="cuda", generator=g)
                x_in = x.to(FP8) if fp8 else x.to(torch.bfloat16)
                a2 = torch.randn(batch * topk, i, device="cuda", generator=g)
                a2 = a2.to(FP8) if fp8 else a2.to(torch.bfloat16)
                one = torch.ones(1, device="cuda")
                scales1 = (one, torch.ones(e, device="cuda")) if fp8 else (None, None)
                c1 = torch.empty(batch, topk, 2 * i, device="cuda", dtype=torch.bfloat16)
                c2 = torch.empty(batch, topk, h, device="cuda", dtype=torch.bfloat16)
                for vname, (cfg, swap) in variants.items():
                    # the expert assignment fused_experts makes (naive for very sparse routing)
                    # (topk_weights, sorted_token_ids, expert_ids, num_tokens_post_padded) per
                    # routing, as fused_experts assigns them (naive for very sparse routing)
                    launches = [
                        (tw, *fm._prepare_expert_assignment(ti, cfg, batch, topk, e, None))
                        for tw, ti in sets
                    ]
                    for gemm in ("w13", "w2"):
                        shape, extra = f"{name}:{gemm}", {"kernel_variant": vname}
                        try:
                            first = gemm == "w13"
                            launch = functools.partial(
                                fm.invoke_fused_moe_triton_kernel,
                                x_in if first else a2,
                                w1 if first else w2,
                                c1 if first else c2,
                                *scales1,
                                mul_routed_weight=not first,
                                top_k=topk if first else 1,
                                config=cfg,
                                compute_type=tl.bfloat16,
                                use_fp8_w8a8=fp8,
                                use_int8_w8a8=False,
                                use_int8_w8a16=False,
                                use_int4_w4a16=False,
                                per_channel_quant=False,
                                **({"swap_ab": swap} if patched else {}),
                            )
                            t = harness.time_graph(
                                [functools.partial(launch, *a) for a in launches]
                            )
                            distinct = sum(torch.unique(ti).numel() for _, ti in sets) / len(sets)
                            n, k = (2 * i, h) if gemm == "w13" else (h, i)
                            a_rows = batch if gemm == "w13" else batch * topk
                            nbytes = distinct * n * k * elem + a_rows * k * elem
                            nbytes += batch * topk * n * 2  # bf16 output
                            extra.update(
                                timing="graph",
                                routing_sets=len(sets),
                                config={k: v for k, v in cfg.items() if k != "SPLIT_K"},
                                swap_ab=swap if patched else None,
                            )
                            if swap:  # the tile the launcher derives from cfg
                                tile = fm._fused_moe_swap_ab_tile_config(cfg, x_in.dtype, w1.dtype)
                                keys = ("BLOCK_SIZE_N", "num_warps", "num_stages")
                                extra["swap_config"] = {k: tile[k] for k in keys}
                            row = results.Row(
                                "swap-ab-gemm", shape, dtype, batch, args.variant,
                                round(t.us, 2), round(t.us_min, 2), round(t.us_max, 2),
                                int(nbytes), round(harness.roofline_pct(nbytes, t.us, bw), 1),
                                extra,
                            )  # fmt: skip
                        except Exception as exc:
                            row = results.failed(
                                "swap-ab-gemm", shape, dtype, batch, args.variant, exc, **extra
                            )
                        rows.append(row)
                        print(json.dumps(row.as_dict()), flush=True)
            del w1, w2
            torch.cuda.empty_cache()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", required=True, help="base or patched (recorded)")
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--part", choices=["layer", "gemm"], default="layer")
    parser.add_argument("--batches", type=int, nargs="+", default=BATCHES)
    parser.add_argument("--routing-sets", type=int, default=4)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_swap_ab: needs a CUDA GPU", file=sys.stderr)
        return 2

    import vllm

    t0 = time.time()
    bw = harness.read_bandwidth()
    print(f"read bandwidth {bw / 1e12:.2f} TB/s", flush=True)
    rows = bench_layer(args, bw) if args.part == "layer" else bench_gemm(args, bw)
    bench = "swap-ab" if args.part == "layer" else "swap-ab-gemm"
    head = harness.header(bench, args.variant, bw, vllm_file=vllm.__file__)
    head["wall_s"] = round(time.time() - t0, 1)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    results.write(args.out, head, rows)
    errors = sum("error" in r.extra for r in rows)
    print(f"wrote {args.out}: {len(rows)} rows, {errors} errors, {head['wall_s']} s")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
