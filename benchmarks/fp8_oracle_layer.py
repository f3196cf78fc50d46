"""The per-tensor FP8 MoE layer that ``bench_fp8_oracle.py`` times: random weights quantised
per expert, static activation scales calibrated on a batch, softmax top-k routing, a float32
reference of the quantised layer, the modular kernel vLLM's FP8 oracle builds for each backend
(TRITON, FLASHINFER_CUTLASS, VLLM_CUTLASS), and each backend's numerics against the reference.
Runs on a CUDA host with vLLM (imported by the functions that build kernels)."""

from __future__ import annotations

import math
import types
from dataclasses import dataclass

import torch

from benchmarks import moe_layer, shapes

PREFILL_BATCHES = (512, 2048, 8192)  # timed by the benchmark; the largest sizes the kernels
NUMERICS_BATCH = 4
CALIBRATION_BATCH = 256  # tokens used to set the static activation scales

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

    moe_config = moe_layer.fused_moe_config(
        s.num_experts, s.topk, s.hidden, s.intermediate, max(PREFILL_BATCHES), "Renormalize"
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
