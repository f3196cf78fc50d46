"""Contract of the fused-MoE warm-up patch: no Triton compile while serving a MoE model.

``fused_moe_kernel`` compiles a variant per launch config (tiles, stages, warps, SWAP_AB) and
block assignment, and v0.21.0 specialised its batch-size integers (``EM``,
``num_valid_tokens``) too, so new variants compiled whenever a batch of a new size class
arrived while serving; ``_compute_slot_mapping_kernel`` (KV-cache slot mapping, reached by
real batches only) likewise specialised ``num_tokens``. vLLM's JIT monitor logged
"Triton kernel JIT compilation during inference: fused_moe_kernel" on the H200 in both trees.

The patch's promise, against whichever vLLM imports first:
- CPU: the batch-size integers of both kernels are not specialised (read from the kernels'
  own JIT metadata); the start-up warm-up's batch sizes cover, over 1..8192 tokens, every
  ``fused_moe_kernel`` launch the layer selects (config file lookup + SWAP_AB rule, computed
  with the launcher's own functions) on a mocked SM90 H200 with the tuned Qwen3-30B-A3B
  per-tensor FP8 file: each batch size launches exactly what its warm-up representative
  launched, with one representative per distinct launch.
- CUDA (skipped elsewhere): after the warm-up, a sweep over 1..512 tokens of a per-tensor FP8
  MoE layer through vLLM's modular kernel compiles nothing (Triton's compile hook).

Base v0.21.0 fails: the integers are specialised and there is no warm-up. Run from the
workspace root: ``PYTHONPATH=<vllm tree> python -P -m pytest -m contract
tests/contract/test_moe_warmup.py``.
"""

from __future__ import annotations

import importlib

import pytest
import torch

pytestmark = pytest.mark.contract

triton = pytest.importorskip("triton")

from vseries.lab import recompile  # noqa: E402  (after importorskip)

recompile.use_vllm_tree()

BATCH_ARGS = [
    ("vllm.model_executor.layers.fused_moe.fused_moe", "fused_moe_kernel", "EM"),
    ("vllm.model_executor.layers.fused_moe.fused_moe", "fused_moe_kernel", "num_valid_tokens"),
    ("vllm.v1.worker.block_table", "_compute_slot_mapping_kernel", "num_tokens"),
]
FP8 = torch.float8_e4m3fn
MAX_TOKENS = 8192


@pytest.mark.parametrize(
    "module,kernel,arg", BATCH_ARGS, ids=[f"{k}-{a}" for _, k, a in BATCH_ARGS]
)
def test_batch_size_arg_not_specialised(module, kernel, arg):
    jit = recompile.load_kernel(module, kernel)
    assert recompile.specialised_token_args(jit, [arg]) == [], (
        f"{module}.{kernel}: {arg} follows the batch size and is still specialised"
    )


def _warmup_module():
    try:
        return importlib.import_module("vllm.model_executor.warmup.fused_moe_warmup")
    except ImportError as e:
        pytest.fail(f"this vLLM has no Triton fused-MoE warm-up: {e}")


def _qwen3_layer(device: str):
    """What the warm-up reads of a Qwen3-30B-A3B FusedMoE layer (per-tensor FP8, dynamic
    activation scales, as quantization="fp8" serves it) and its TritonExperts."""
    from types import SimpleNamespace

    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import (
        FusedMoEConfig,
        FusedMoEParallelConfig,
        RoutingMethodType,
        fp8_w8a8_moe_quant_config,
    )
    from vllm.model_executor.layers.fused_moe.experts.triton_moe import TritonExperts

    e, topk, h, i = 128, 8, 2048, 768
    moe_config = FusedMoEConfig(
        num_experts=e, experts_per_token=topk, hidden_dim=h,
        intermediate_size_per_partition=i, num_local_experts=e, num_logical_experts=e,
        moe_parallel_config=FusedMoEParallelConfig.make_no_parallel(),
        activation=MoEActivation.SILU, in_dtype=torch.bfloat16, device="cuda",
        routing_method=RoutingMethodType.TopK, max_num_tokens=MAX_TOKENS,
    )  # fmt: skip
    scale_device = "cpu" if device == "meta" else device
    qc = fp8_w8a8_moe_quant_config(
        w1_scale=torch.ones(e, device=scale_device),
        w2_scale=torch.ones(e, device=scale_device),
        a1_scale=None,
        a2_scale=None,
    )
    layer = SimpleNamespace(
        w13_weight=torch.empty(e, 2 * i, h, dtype=FP8, device=device),
        w2_weight=torch.empty(e, h, i, dtype=FP8, device=device),
        top_k=topk, global_num_experts=e, expert_map=None, moe_config=moe_config,
        activation=MoEActivation.SILU, layer_name="contract",
        apply_router_weight_on_input=False,
    )  # fmt: skip
    return layer, TritonExperts(moe_config, qc), qc


def test_warmup_covers_every_launch(monkeypatch, mock_sm90):
    warmup = _warmup_module()
    fm = importlib.import_module("vllm.model_executor.layers.fused_moe.fused_moe")
    mock_sm90()
    # fused_moe_kernel's launches only (the series' decode path has its own variant)
    monkeypatch.setenv("VLLM_USE_TRITON_MOE_FP8_DECODE", "0")
    fm.get_moe_configs.cache_clear()
    layer, experts, _ = _qwen3_layer("meta")
    first = warmup.fused_moe_warmup_batch_sizes(layer, experts, MAX_TOKENS)
    assert first, "the warm-up selects no batch size for a per-tensor FP8 Triton layer"

    def launches(m):
        cfg = fm.try_get_optimal_moe_config(
            layer.w13_weight.size(), layer.w2_weight.size(), 8, "fp8_w8a8", m
        )
        per_gemm = tuple(
            tuple(
                sorted(fm.fused_moe_kernel_launch_config(cfg, FP8, FP8, 0, k, False, None).items())
            )
            for k in (2048, 768)
        )
        return per_gemm, m * 8 * 4 <= 128

    distinct: dict = {}
    for m in range(1, MAX_TOKENS + 1):
        distinct.setdefault(launches(m), m)
        key = experts.jit_variant_key(
            m, layer.w13_weight, layer.w2_weight, 8, torch.bfloat16, 128, None
        )
        assert launches(first[key]) == launches(m), f"batch {m} is not covered"
    assert sorted(first.values()) == sorted(distinct.values())
    fm.get_moe_configs.cache_clear()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (SM89+ for FP8)")
def test_no_compile_after_warmup_cuda():
    from triton import knobs
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.all2all_utils import maybe_make_prepare_finalize
    from vllm.model_executor.layers.fused_moe.modular_kernel import FusedMoEKernel
    from vllm.v1.worker.workspace import init_workspace_manager

    warmup = _warmup_module()
    init_workspace_manager(torch.device("cuda"))  # as the worker does at start-up
    layer, experts, qc = _qwen3_layer("cuda")
    layer.w13_weight.copy_(torch.randn(layer.w13_weight.shape, device="cuda") / 16)
    layer.w2_weight.copy_(torch.randn(layer.w2_weight.shape, device="cuda") / 16)
    kernel = FusedMoEKernel(
        maybe_make_prepare_finalize(
            moe=layer.moe_config, quant_config=qc, allow_new_interface=True,
            use_monolithic=False,
        ),
        experts,
        inplace=False,
    )  # fmt: skip

    def apply(layer_, x, w, ids, shared_experts_input=None):
        return kernel.apply(
            x, layer.w13_weight, layer.w2_weight, w, ids, activation=MoEActivation.SILU,
            global_num_experts=128, expert_map=None, apply_router_weight_on_input=False,
        )  # fmt: skip

    from types import SimpleNamespace

    layer.quant_method = SimpleNamespace(apply=apply, topk_indices_dtype=None)
    for m in sorted(warmup.fused_moe_warmup_batch_sizes(layer, experts, 512).values()):
        warmup._run_layer(layer, m)
    torch.cuda.synchronize()
    compiled = []
    previous = knobs.runtime.jit_post_compile_hook
    knobs.runtime.jit_post_compile_hook = lambda **kw: compiled.append(kw.get("fn").name)
    try:
        for m in range(1, 513):
            warmup._run_layer(layer, m)
        torch.cuda.synchronize()
    finally:
        knobs.runtime.jit_post_compile_hook = previous
    assert compiled == []
