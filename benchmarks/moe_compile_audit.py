#!/usr/bin/env python3
"""Triton compiles of a whole MoE layer over a sweep of batch sizes, after start-up.

The recompile audit of one kernel (``vseries/lab/recompile.py``, patch 3) extended to a whole MoE
layer as serving runs it: vLLM's modular kernel (prepare with activation quantisation,
``TritonExperts``, finalize) for per-tensor FP8 with dynamic activation scales
(``quantization="fp8"``), Qwen3-30B-A3B and DeepSeek-V3 TP8 shapes. Start-up is modelled as
vLLM does it: ``--startup capture`` runs the batch sizes vLLM captures CUDA graphs for by
default (1, 2, 4, 8, 16, 24, ... 512), ``--startup warmup`` adds the tree's Triton MoE
warm-up when it has one (``vllm.model_executor.warmup.fused_moe_warmup``). Then every batch
size 1..``--max-tokens`` (serving's mixed prefill/decode batches reach
max_num_batched_tokens) runs once, and every Triton compile is recorded with Triton's
``jit_post_compile_hook``: kernel name, batch size, and compile time (pre- to post-hook).

    cd /root/vllm-<tree> && PYTHONPATH=/root/site:/root/vllm-<tree>:<ws> \\
        python3 -m benchmarks.moe_compile_audit --variant <tree> --out moe_compile_audit-<tree>.json

The patched tree must report zero compiles after start-up; the result JSON has the list.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from types import SimpleNamespace

import torch

from benchmarks import harness, moe_layer, shapes

FP8 = torch.float8_e4m3fn
# vLLM's default cudagraph_capture_sizes up to 512 (1, 2, 4, then steps of 8).
CAPTURE_SIZES = [1, 2, 4] + list(range(8, 513, 8))


def make_layer(e: int, topk: int, h: int, i: int):
    """A FusedMoE stand-in holding what the warm-up and the modular kernel read, with real
    FP8 weights and vLLM's own modular Triton kernel behind ``quant_method.apply``."""
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.all2all_utils import (
        maybe_make_prepare_finalize,
    )
    from vllm.model_executor.layers.fused_moe.config import fp8_w8a8_moe_quant_config
    from vllm.model_executor.layers.fused_moe.experts.triton_moe import TritonExperts
    from vllm.model_executor.layers.fused_moe.modular_kernel import FusedMoEKernel
    from vllm.v1.worker.workspace import init_workspace_manager

    init_workspace_manager(torch.device("cuda"))  # as the worker does at start-up

    moe_config = moe_layer.fused_moe_config(e, topk, h, i)
    w13 = (torch.randn(e, 2 * i, h, device="cuda") / 16).to(FP8)
    w2 = (torch.randn(e, h, i, device="cuda") / 16).to(FP8)
    ones = torch.ones(e, device="cuda")
    qc = fp8_w8a8_moe_quant_config(w1_scale=ones, w2_scale=ones, a1_scale=None, a2_scale=None)
    kernel = FusedMoEKernel(
        maybe_make_prepare_finalize(
            moe=moe_config, quant_config=qc, allow_new_interface=True, use_monolithic=False
        ),
        TritonExperts(moe_config, qc),
        inplace=False,
    )

    def apply(layer, x, topk_weights, topk_ids, shared_experts_input=None):
        return kernel.apply(
            x,
            w13,
            w2,
            topk_weights,
            topk_ids,
            activation=MoEActivation.SILU,
            global_num_experts=e,
            expert_map=None,
            apply_router_weight_on_input=False,
        )

    layer = moe_layer.stand_in(
        w13,
        w2,
        topk,
        moe_config,
        layer_name="audit",
        quant_method=SimpleNamespace(apply=apply, topk_indices_dtype=None),
    )
    return layer, kernel.impl.fused_experts


@torch.inference_mode()
def run_layer(layer, m: int) -> None:
    x = torch.randn(m, layer.w13_weight.size(2), device="cuda", dtype=torch.bfloat16)
    ids = torch.rand(m, layer.global_num_experts, device="cuda").topk(layer.top_k).indices
    w = torch.full((m, layer.top_k), 1.0 / layer.top_k, device="cuda")
    layer.quant_method.apply(layer, x, w, ids.to(torch.int32), shared_experts_input=x)


class CompileLog:
    """Every Triton JIT compile while installed: kernel name, the batch size in progress, and
    the compile's duration (Triton's pre-compile cache hook to its post-compile hook)."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.batch = 0
        self._t0: float | None = None

    def __enter__(self):
        from triton import knobs

        self._knobs = knobs
        self._prev = (knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook)

        def pre(*args, **kwargs):
            self._t0 = time.perf_counter()
            return False  # do not skip the compile

        def post(*args, **kwargs):
            fn = kwargs.get("fn")
            ms = (time.perf_counter() - self._t0) * 1e3 if self._t0 else None
            self.events.append({"kernel": getattr(fn, "name", "?"), "batch": self.batch, "ms": ms})

        knobs.runtime.jit_cache_hook = pre
        knobs.runtime.jit_post_compile_hook = post
        return self

    def __exit__(self, *exc):
        self._knobs.runtime.jit_cache_hook, self._knobs.runtime.jit_post_compile_hook = self._prev


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variant", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-tokens", type=int, default=2048)
    ap.add_argument("--shapes", nargs="*", default=["qwen3-30b-a3b", "dsv3-tp8"])
    args = ap.parse_args()

    try:
        from vllm.model_executor.warmup import fused_moe_warmup
    except ImportError:
        fused_moe_warmup = None

    result = {
        "header": harness.header("moe-compile-audit", args.variant, None),
        "shapes": {},
    }
    for shape in args.shapes:
        e, topk, h, i = shapes.MOE_SHAPES[shape]
        layer, experts = make_layer(e, topk, h, i)
        t0 = time.perf_counter()
        with CompileLog() as startup:
            for m in CAPTURE_SIZES:
                run_layer(layer, m)
            warm = []
            if fused_moe_warmup is not None:
                sizes = fused_moe_warmup.fused_moe_warmup_batch_sizes(
                    layer, experts, args.max_tokens
                )
                warm = sorted(sizes.values())
                for m in warm:
                    run_layer(layer, m)
            torch.cuda.synchronize()
        startup_s = time.perf_counter() - t0
        with CompileLog() as serving:
            for m in range(1, args.max_tokens + 1):
                serving.batch = m
                run_layer(layer, m)
            torch.cuda.synchronize()
        result["shapes"][shape] = {
            "startup_compiles": len(startup.events),
            "startup_s": round(startup_s, 2),
            "warmup_batch_sizes": warm,
            "serving_compiles": serving.events,
            "sweep": f"1..{args.max_tokens}",
        }
        print(
            f"{args.variant} {shape}: {len(startup.events)} compiles at start-up, "
            f"{len(serving.events)} during the sweep: {serving.events}",
            flush=True,
        )
    Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
