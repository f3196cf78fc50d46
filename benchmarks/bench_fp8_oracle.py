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
import math
import sys
import time
import traceback
import types
from dataclasses import dataclass

import torch

from benchmarks import harness, shapes
from vseries import results

DECODE_BATCHES = harness.DECODE_BATCHES
PREFILL_BATCHES = (512, 2048, 8192)
NUMERICS_BATCH = 4
CALIBRATION_BATCH = 256  # tokens used to set the static activation scales
SEED = 0

# Tolerance on max_rel_err (max |out - ref| / max |ref|) against the float32 reference of the
# quantised layer. Both kernels round the first GEMM's output and the SiLU-and-mul result to
# bf16 before the static FP8 quantisation of the intermediate; a bf16 rounding that crosses an
# FP8 rounding boundary moves that element by one FP8 step (up to 2^-3 relative), and the
# output is bf16. A CPU emulation of exactly these rounding points on these shapes gave
# 1.6-1.7e-2; 5e-2 leaves 3x headroom, while a wrong scale, layout or expert mapping gives
# errors of order 1.
MAX_REL_ERR_TOL = 5e-2

FP8 = torch.float8_e4m3fn


@dataclass(frozen=True)
class Shape:
    """An MoE layer shape: E experts, top-k routing, hidden size K, intermediate size N."""

    name: str
    num_experts: int
    topk: int
    hidden: int
    intermediate: int


SHAPES = {
    name: Shape(shapes.get(name).title, *shapes.get(name).moe)
    for name in ("qwen3-30b-a3b", "mixtral-8x7b")
}

VARIANTS = ("triton", "flashinfer_cutlass", "vllm_cutlass")


def qdq(t: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Static per-tensor FP8 (e4m3) quantise-dequantise in float32, saturating at +-448.

    t: any shape, float32; scale: 1-element float32. Returns float32 of t's shape.
    """
    fmax = torch.finfo(FP8).max
    return (t / scale).clamp(-fmax, fmax).to(FP8).to(torch.float32) * scale


@dataclass
class Layer:
    """Per-tensor FP8 MoE weights (vLLM layout) and static activation scales.

    w1: [E, 2N, K] float8_e4m3fn (gate rows then up rows), w1_scale: [E] float32;
    w2: [E, K, N] float8_e4m3fn, w2_scale: [E] float32; a1_scale, a2_scale: [1] float32.
    """

    shape: Shape
    w1: torch.Tensor
    w2: torch.Tensor
    w1_scale: torch.Tensor
    w2_scale: torch.Tensor
    a1_scale: torch.Tensor | None = None
    a2_scale: torch.Tensor | None = None


def quantize_per_expert(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[E, R, C] bf16 -> ([E, R, C] float8_e4m3fn, [E] float32 per-tensor scales)."""
    fmax = torch.finfo(FP8).max
    q = torch.empty(w.shape, dtype=FP8, device=w.device)
    s = torch.empty(w.shape[0], dtype=torch.float32, device=w.device)
    for e in range(w.shape[0]):  # one expert at a time: bounded float32 temporaries
        we = w[e].float()
        s[e] = we.abs().max() / fmax
        q[e] = (we / s[e]).clamp(-fmax, fmax).to(FP8)
    return q, s


def make_layer(shape: Shape, gen: torch.Generator, device: str = "cuda") -> Layer:
    """Random bf16 weights with unit-variance outputs, quantised to per-tensor FP8."""
    e, k, n = shape.num_experts, shape.hidden, shape.intermediate
    w1 = torch.randn((e, 2 * n, k), generator=gen, device=device, dtype=torch.bfloat16)
    w1 /= math.sqrt(k)
    w1_q, w1_s = quantize_per_expert(w1)
    del w1
    w2 = torch.randn((e, k, n), generator=gen, device=device, dtype=torch.bfloat16)
    w2 /= math.sqrt(n)
    w2_q, w2_s = quantize_per_expert(w2)
    del w2
    return Layer(shape, w1_q, w2_q, w1_s, w2_s)


def route(x: torch.Tensor, shape: Shape, gen: torch.Generator):
    """Softmax top-k routing with renormalisation (as Qwen3 and Mixtral route), from random
    router logits; the same semantics as vLLM's fused_topk(renormalize=True).

    x: [M, K] bf16. Returns topk_weights [M, topk] float32, topk_ids [M, topk] int32.
    """
    logits = torch.randn(
        (x.shape[0], shape.num_experts), generator=gen, device=x.device, dtype=torch.float32
    )
    topk_weights, topk_ids = logits.softmax(dim=-1).topk(shape.topk, dim=-1)
    topk_weights = topk_weights / topk_weights.sum(dim=-1, keepdim=True)
    return topk_weights.contiguous(), topk_ids.to(torch.int32).contiguous()


def reference(
    layer: Layer,
    x: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    a1_scale: torch.Tensor | None,
    a2_scale: torch.Tensor | None,
) -> tuple[torch.Tensor, float]:
    """Float32 reference of the per-tensor FP8 MoE layer.

    x: [M, K] bf16; topk_weights [M, topk] float32; topk_ids [M, topk] int. With a1_scale and
    a2_scale ([1] float32) the activations are quantised and dequantised as the kernels do;
    with None they are left in float32. Returns the [M, K] float32 output and the largest
    |SiLU-and-mul output| (to calibrate a2_scale).
    """
    n = layer.shape.intermediate
    xf = x.float()
    if a1_scale is not None:
        xf = qdq(xf, a1_scale)
    out = torch.zeros_like(xf)
    act_max = 0.0
    for e in topk_ids.unique().tolist():
        rows, slots = (topk_ids == e).nonzero(as_tuple=True)
        h = xf[rows] @ (layer.w1[e].float() * layer.w1_scale[e]).t()
        act = torch.nn.functional.silu(h[:, :n]) * h[:, n:]
        act_max = max(act_max, act.abs().max().item())
        if a2_scale is not None:
            act = qdq(act, a2_scale)
        y = act @ (layer.w2[e].float() * layer.w2_scale[e]).t()
        out.index_add_(0, rows, y * topk_weights[rows, slots].unsqueeze(1))
    return out, act_max


def calibrate(layer: Layer, gen: torch.Generator) -> None:
    """Set the static activation scales (max |value| / 448) from a calibration batch."""
    fmax = torch.finfo(FP8).max
    device = layer.w1.device
    x = torch.randn(
        (CALIBRATION_BATCH, layer.shape.hidden), generator=gen, device=device, dtype=torch.bfloat16
    )
    topk_weights, topk_ids = route(x, layer.shape, gen)
    a1 = x.float().abs().max() / fmax
    _, act_max = reference(layer, x, topk_weights, topk_ids, a1.reshape(1), None)
    layer.a1_scale = a1.reshape(1).to(torch.float32)
    layer.a2_scale = torch.tensor([act_max / fmax], dtype=torch.float32, device=device)


def make_kernel(layer: Layer, variant: str):
    """The FusedMoEKernel the FP8 MoE layer builds for `variant`, via the oracle's helpers.

    Raises whatever vLLM raises when the backend cannot run here (e.g. no CUTLASS grouped GEMM
    support on this device).
    """
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import (
        FusedMoEConfig,
        FusedMoEParallelConfig,
        RoutingMethodType,
    )
    from vllm.model_executor.layers.fused_moe.oracle.fp8 import (
        Fp8MoeBackend,
        convert_to_fp8_moe_kernel_format,
        make_fp8_moe_kernel,
        make_fp8_moe_quant_config,
    )

    s = layer.shape
    if variant == "triton":
        from vllm.model_executor.layers.fused_moe.experts.triton_moe import TritonExperts

        backend, experts_cls = Fp8MoeBackend.TRITON, TritonExperts
    elif variant == "flashinfer_cutlass":
        from vllm.model_executor.layers.fused_moe.experts.flashinfer_cutlass_moe import (
            FlashInferExperts,
        )
        from vllm.utils.flashinfer import has_flashinfer_cutlass_fused_moe

        if not has_flashinfer_cutlass_fused_moe():
            raise RuntimeError("flashinfer.fused_moe.cutlass_fused_moe is not importable")
        backend, experts_cls = Fp8MoeBackend.FLASHINFER_CUTLASS, FlashInferExperts
    else:
        from vllm.model_executor.layers.fused_moe.experts.cutlass_moe import CutlassExpertsFp8

        from vllm import _custom_ops as ops

        cap = torch.cuda.get_device_capability()
        if not ops.cutlass_group_gemm_supported(cap[0] * 10 + cap[1]):
            raise RuntimeError(f"CUTLASS grouped GEMM not supported on sm_{cap[0]}{cap[1]}")
        backend, experts_cls = Fp8MoeBackend.VLLM_CUTLASS, CutlassExpertsFp8

    moe_config = FusedMoEConfig(
        num_experts=s.num_experts,
        experts_per_token=s.topk,
        hidden_dim=s.hidden,
        intermediate_size_per_partition=s.intermediate,
        num_local_experts=s.num_experts,
        num_logical_experts=s.num_experts,
        moe_parallel_config=FusedMoEParallelConfig.make_no_parallel(),
        activation=MoEActivation.SILU,
        in_dtype=torch.bfloat16,
        device="cuda",
        routing_method=RoutingMethodType.Renormalize,
        max_num_tokens=max(PREFILL_BATCHES),
    )
    # The weight layout each backend wants, as the FP8 MoE method prepares it after loading
    # (FlashInfer: gate/up halves swapped to [up; gate], padding to its alignment).
    holder = types.SimpleNamespace(moe_config=moe_config, activation=MoEActivation.SILU)
    w1, w2, w1_scale, w2_scale = convert_to_fp8_moe_kernel_format(
        backend,
        holder,
        layer.w1,
        layer.w2,
        layer.w1_scale,
        layer.w2_scale,
        layer.a1_scale,
        layer.a2_scale,
    )
    # vLLM's FP8 MoE method keeps per-tensor input scales 0-D (the max over shards), which
    # FlashInfer's binding requires; the other kernels take either.
    a1_scale, a2_scale = layer.a1_scale.reshape(()), layer.a2_scale.reshape(())
    quant_config = make_fp8_moe_quant_config(backend, w1_scale, w2_scale, a1_scale, a2_scale)
    kernel = make_fp8_moe_kernel(quant_config, moe_config, experts_cls, backend)

    def run(x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor):
        return kernel.apply(
            hidden_states=x,
            w1=w1,
            w2=w2,
            topk_weights=topk_weights,
            topk_ids=topk_ids,
            activation=MoEActivation.SILU,
            global_num_experts=s.num_experts,
            expert_map=None,
            apply_router_weight_on_input=False,
        )

    return run, type(kernel.fused_experts).__name__


def check_numerics(layer: Layer, kernels: dict, gen: torch.Generator) -> dict:
    """Each backend vs the float32 reference on a fresh random batch of NUMERICS_BATCH tokens."""
    s = layer.shape
    x = torch.randn(
        (NUMERICS_BATCH, s.hidden), generator=gen, device=layer.w1.device, dtype=torch.bfloat16
    )
    topk_weights, topk_ids = route(x, s, gen)
    ref, _ = reference(layer, x, topk_weights, topk_ids, layer.a1_scale, layer.a2_scale)
    ref_max = ref.abs().max().item()
    result = {}
    for variant, (run, _) in kernels.items():
        try:
            out = run(x, topk_weights, topk_ids).float()
            torch.cuda.synchronize()
            abs_err = (out - ref).abs().max().item()
            rel_err = abs_err / ref_max
            result[variant] = {
                "max_abs_err": abs_err,
                "max_rel_err": rel_err,
                "numerics_ok": bool(rel_err <= MAX_REL_ERR_TOL),
            }
        except Exception as e:  # recorded, not fatal: the other backend still runs
            result[variant] = {"numerics_error": f"{type(e).__name__}: {e}"}
    return result


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
