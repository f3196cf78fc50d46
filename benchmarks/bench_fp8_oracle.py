# h200-trees: patched
"""Benchmark of the fp8-oracle patch: per-tensor FP8 fused MoE, TRITON vs FLASHINFER_CUTLASS.

The patch makes TRITON the default FP8 MoE backend on SM90 for per-tensor FP8 (it was
FLASHINFER_CUTLASS). Variants (rows' "variant"; "backend (tree)" when run on the base tree):
- "triton": `TritonExperts` (`fused_moe_kernel`), what the TRITON backend runs. On the patched
  tree it includes patch 0001 (swap-AB at decode); on the base tree it does not.
- "flashinfer_cutlass": `FlashInferExperts`, what FLASHINFER_CUTLASS runs (FlashInfer's CUTLASS
  `cutlass_fused_moe`). FlashInfer JIT-builds its SM90 MoE module from 181 CUDA sources, too
  many for one hold of the GPU host; the host gets a reduced build holding only the
  FP8 x FP8 -> bf16 kernels (`benchmarks/h200/flashinfer_fp8_build.py`), loaded from
  FlashInfer's AOT folder. Autotuned at the largest batch, as vLLM's `flashinfer_autotune`
  warm-up does, and again at each timed batch (FlashInfer profiles one bucket per call).
  With ``--no-autotune`` it runs FlashInfer's default tactics instead, as vLLM v0.21.0 does at
  its default -O2 (``enable_flashinfer_autotune`` off), and its rows are labelled
  "flashinfer_cutlass untuned" (``row_label``). Run it in a process of its own: FlashInfer's
  tuner keeps its choices for the life of the process.
- "vllm_cutlass": `CutlassExpertsFp8`, vLLM's own CUTLASS FP8 MoE (backend VLLM_CUTLASS), the
  stand-in of the first run, kept as a third point.

Both are built the way the FP8 MoE layer builds them (`make_fp8_moe_quant_config` and
`make_fp8_moe_kernel` of the oracle): the whole layer after routing (activation quantisation,
both grouped GEMMs, SiLU-and-mul, intermediate quantisation, top-k weighted reduction), with
static per-tensor FP8 weights and activations (the case whose default changes), the same
weights, inputs and routing for both. Shapes: Qwen3-30B-A3B (E=128, top-8, hidden 2048,
intermediate 768) and Mixtral-8x7B (E=8, top-2, hidden 4096, intermediate 14336); batches
1..64 tokens and prefill 512/2048/8192 tokens, every row under CUDA-graph replay
(`benchmarks/harness.py`, shared by every benchmark): at decode sizes 8 routings with
different experts are captured in one graph and cycled, so that no expert's weights stay in L2
from the previous call; a prefill batch touches every expert, one routing. Bytes, roofline and
the result file are the harness's too.

Numerics: per shape, every backend on a fresh random batch of NUMERICS_BATCH tokens against a
float32 reference of the same quantised layer (dequantised FP8 weights, activations
quantised and dequantised at the same points with the same static scales). Rows carry
max_abs_err and max_rel_err (= max |out - ref| / max |ref|) of their backend.

Exit status: 0; 1 when a backend failed (its rows carry "error") or a numerics check is out
of tolerance (the JSON is written either way); 2 without CUDA. A backend that fails at one
batch is not retried at the larger ones.

Run from inside a staged tree (one invocation emits rows for every backend; --variant labels
the tree), about 1.5-2.5 minutes on an H200, most of it Triton compiles on a cold cache:

    cd /root/vllm-patched && PYTHONPATH=/root/site:/root/vllm-patched:<ws> \\
        python3 -m benchmarks.bench_fp8_oracle --variant patched --out fp8_oracle.json
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
import traceback

import torch

from benchmarks import harness
from benchmarks.fp8_oracle_layer import (
    MAX_REL_ERR_TOL,
    NUMERICS_BATCH,
    PREFILL_BATCHES,
    SHAPES,
    VARIANTS,
    Shape,
    calibrate,
    check_numerics,
    make_kernel,
    make_layer,
    route,
)
from vseries import results

DECODE_BATCHES = harness.DECODE_BATCHES
SEED = 0


def autotune_flashinfer(run, shape: Shape, m: int) -> None:
    """Let FlashInfer pick its CUTLASS tactics, as vLLM's warm-up does (`flashinfer_autotune`
    runs one dummy batch of max_num_batched_tokens under `autotune()`; FlashInfer then tunes
    every token bucket up to m)."""
    import vllm.utils.flashinfer as fi_utils

    gen = torch.Generator(device="cuda").manual_seed(SEED + 7)
    x = torch.randn((m, shape.hidden), generator=gen, device="cuda", dtype=torch.bfloat16)
    topk_weights, topk_ids = route(x, shape, gen)
    with torch.inference_mode(), fi_utils.autotune():
        run(x, topk_weights, topk_ids)
    torch.cuda.synchronize()


def row_label(variant: str, tree: str, autotune: bool = True) -> str:
    """A row's "variant": the backend, " untuned" for FlashInfer without its autotune, and
    " (tree)" off the patched tree."""
    label = variant + (" untuned" if variant == "flashinfer_cutlass" and not autotune else "")
    return label if tree == "patched" else f"{label} ({tree})"


def bench_shape(
    shape: Shape,
    batches: list[int],
    tree: str,
    log,
    bw: float,
    variants: tuple[str, ...] = VARIANTS,
    autotune: bool = True,
) -> list[results.Row]:
    """All rows of one shape: every variant at every batch, with their numerics fields (bw:
    read bandwidth, bytes/s); ``autotune`` False: FlashInfer's default tactics."""
    gen = torch.Generator(device="cuda").manual_seed(SEED)
    layer = make_layer(shape, gen)
    calibrate(layer, gen)

    kernels, build_errors = {}, {}
    for variant in variants:
        try:
            kernels[variant] = make_kernel(layer, variant)
            if variant == "flashinfer_cutlass" and autotune:
                t = time.monotonic()
                autotune_flashinfer(kernels[variant][0], shape, max(batches))
                log(f"  flashinfer autotune at M={max(batches)}: {time.monotonic() - t:.1f} s")
        except Exception as e:
            traceback.print_exc()
            build_errors[variant] = f"{type(e).__name__}: {e}"
            log(f"  {variant}: cannot build: {build_errors[variant]}")

    numerics = check_numerics(layer, kernels, torch.Generator(device="cuda").manual_seed(SEED + 1))
    for variant, fields in numerics.items():
        log(f"  numerics {variant}: {fields}")

    from vllm.utils.flashinfer import autotune as fi_autotune

    rows = []
    failed = dict(build_errors)
    dtype = "fp8_w8a8 per-tensor static"
    for m in batches:
        # Same inputs and routings for every variant at this batch; decode sizes cycle
        # several routings inside the graph (no expert stays in L2), prefill touches all.
        bgen = torch.Generator(device="cuda").manual_seed(SEED + 1000 + m)
        x = torch.randn((m, shape.hidden), generator=bgen, device="cuda", dtype=torch.bfloat16)
        sets = [route(x, shape, bgen) for _ in range(harness.ROUTINGS if m <= 64 else 1)]
        nbytes = sum(
            harness.moe_bytes(ids, shape.hidden, shape.intermediate) for _, ids in sets
        ) / len(sets)
        distinct = sum(int(ids.unique().numel()) for _, ids in sets) / len(sets)
        flops = 2 * m * shape.topk * 3 * shape.intermediate * shape.hidden
        for variant in variants:
            label = row_label(variant, tree, autotune)
            extra = {
                "backend": variant,
                "tree": tree,
                "E": shape.num_experts,
                "topk": shape.topk,
                "hidden": shape.hidden,
                "intermediate": shape.intermediate,
                "distinct_experts": distinct,
                "routing_sets": len(sets),
                "numerics_batch": NUMERICS_BATCH,
                "numerics_tol": MAX_REL_ERR_TOL,
                "flashinfer_autotune": autotune,
                **numerics.get(variant, {}),
            }
            if variant in failed:
                rows.append(
                    results.failed(
                        "fp8-oracle", shape.name, dtype, m, label, failed[variant], **extra
                    )
                )
                continue
            run, experts_cls = kernels[variant]
            extra["experts_cls"] = experts_cls
            try:
                calls = [functools.partial(run, x, tw, ti) for tw, ti in sets]
                if variant == "flashinfer_cutlass" and autotune:
                    # FlashInfer profiles one token bucket per autotune call (its log: "1/1
                    # profile"), so each batch gets its own, on top of vLLM's warm-up at the
                    # largest batch: FlashInfer runs its best tactic at every size.
                    with torch.inference_mode(), fi_autotune():
                        calls[0]()
                calls[0]()  # compiles Triton, sizes the workspace
                torch.cuda.synchronize()
                t = harness.time_graph(calls)
                extra.update(timing="graph", tflops=flops / (t.us * 1e-6) / 1e12)
                row = results.Row(
                    "fp8-oracle", shape.name, dtype, m, label, t.us, t.us_min, t.us_max,
                    int(nbytes), harness.roofline_pct(nbytes, t.us, bw), extra,
                )  # fmt: skip
            except Exception as e:
                failed[variant] = f"{type(e).__name__}: {e}"
                traceback.print_exc()
                row = results.failed("fp8-oracle", shape.name, dtype, m, label, e, **extra)
            rows.append(row)
            log(f"  M={m:5d} {variant:16s} {row.us or float('nan'):10.1f} us")
    del layer, kernels
    torch.cuda.empty_cache()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--variant", default="patched", help="label of the tree (base / patched)")
    p.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=list(SHAPES))
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    p.add_argument(
        "--batches",
        type=int,
        nargs="+",
        default=list(DECODE_BATCHES + PREFILL_BATCHES),
        help="token counts (default: 1..64 graphed, 512 2048 8192 prefill)",
    )
    p.add_argument(
        "--no-autotune",
        action="store_true",
        help="FlashInfer's default tactics, as vLLM v0.21.0 at -O2 (rows: "
        "'flashinfer_cutlass untuned'); run in its own process",
    )
    args = p.parse_args(argv)
    t0 = time.monotonic()

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - t0:6.1f}s] {msg}", flush=True)

    about = {
        "variants": {
            "triton": "TritonExperts (fused_moe_kernel), backend TRITON",
            "flashinfer_cutlass": "FlashInferExperts (FlashInfer cutlass_fused_moe, reduced "
            "FP8-only SM90 build), backend FLASHINFER_CUTLASS, "
            + ("default tactics (no autotune)" if args.no_autotune else "autotuned"),
            "vllm_cutlass": "CutlassExpertsFp8 (vLLM's cutlass_moe_mm), backend VLLM_CUTLASS",
        },
        "numerics_tol": MAX_REL_ERR_TOL,
    }
    if not torch.cuda.is_available():
        error = "CUDA is not available: this benchmark needs an NVIDIA GPU"
        results.write(args.out, harness.header("fp8-oracle", args.variant, None, error=error), [])
        print(error, file=sys.stderr)
        return 2

    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.v1.worker.workspace import init_workspace_manager

    import vllm

    bw = harness.read_bandwidth()
    head = harness.header("fp8-oracle", args.variant, bw, vllm_file=vllm.__file__, **about)
    log(f"read bandwidth {bw / 1e12:.2f} TB/s on {head['gpu']}")

    rows: list[results.Row] = []
    init_workspace_manager(torch.device("cuda:0"))
    with set_current_vllm_config(VllmConfig()):
        for key in args.shapes:
            log(f"shape {SHAPES[key]}")
            rows += bench_shape(
                SHAPES[key],
                args.batches,
                args.variant,
                log,
                bw,
                tuple(args.variants),
                autotune=not args.no_autotune,
            )
            results.write(args.out, head, rows)  # partial results survive a later failure

    head["wall_s"] = time.monotonic() - t0
    results.write(args.out, head, rows)
    log(f"wrote {args.out}")
    bad = [r for r in rows if "error" in r.extra or r.extra.get("numerics_ok") is False]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
