"""Contract of the fused-MoE warm-up patch: no Triton compile while serving a MoE model.

``fused_moe_kernel`` compiles a variant per launch config (tiles, stages, warps, SWAP_AB) and
block assignment, and v0.21.0 specialised its batch-size integers (``EM``,
``num_valid_tokens``) too, so new variants compiled whenever a batch of a new size class
arrived while serving; ``_compute_slot_mapping_kernel`` (KV-cache slot mapping, reached by
real batches only) likewise specialised ``num_tokens``. vLLM's JIT monitor logged
"Triton kernel JIT compilation during inference: fused_moe_kernel" on the H200 in both trees.

The patch's promise, against whichever vLLM imports first:
- CPU: the batch-size integers of both kernels are not specialised (read from the kernels'
  own JIT metadata); the start-up warm-up covers, over 1..8192 tokens, every
  ``fused_moe_kernel`` launch the layer selects (config file lookup + SWAP_AB rule, computed
  here per batch size with the release's own lookup) on a mocked SM90 H200 with the tuned
  Qwen3-30B-A3B per-tensor FP8 file where the release has one: each batch size launches
  what its warm-up representative launched, with one representative per distinct launch.
- CUDA (skipped elsewhere): after the warm-up, a sweep over 1..512 tokens of a per-tensor FP8
  MoE layer through vLLM's modular kernel compiles no ``fused_moe_kernel`` variant (Triton's
  compile hook).
- Guard (``@pytest.mark.guard``: with the patch only, since on the base it compares the kernel
  with itself): giving the two hints up changes no instruction of the sm_90 PTX of the
  decode (swap-AB), naive-assignment and prefill launches.

Where the warm-up lives depends on the release (the test finds it):
- v0.21.0 + the old patch: ``vllm/model_executor/warmup/fused_moe_warmup.py``
  (``fused_moe_warmup_batch_sizes``, ``TritonExperts.jit_variant_key``, ``_run_layer``).
- v0.34.0 + the port: upstream's JIT warm-up framework; ``FusedMoETritonKernel`` in
  ``fused_moe.py`` owns the kernel's launches and compile keys, ``TritonExperts`` registers a
  per-layer plan (``jit_warmup_plan``, ``register_jit_warmup``).
v0.34.0 keeps its slot mapping in ``vllm/v1/worker/gpu/block_table.py``
(``_compute_slot_mappings_kernel``), whose integers do not follow the batch (the token count
is read from ``query_start_loc`` on the device; ``max_num_tokens`` is the persistent buffer's
width): that id then checks that the kernel still has no batch-size argument.

Base v0.21.0 and plain v0.34.0 fail: ``EM``/``num_valid_tokens`` are specialised and there is
no Triton fused-MoE warm-up. Run from the workspace root:
``PYTHONPATH=<vllm tree> python -P -m pytest -m contract tests/contract/test_moe_warmup.py``.
"""

from __future__ import annotations

import importlib
import inspect
from types import SimpleNamespace

import pytest
import torch

pytestmark = pytest.mark.contract

triton = pytest.importorskip("triton")

from vseries.lab import recompile  # noqa: E402  (after importorskip)

recompile.use_vllm_tree()

FUSED_MOE = "vllm.model_executor.layers.fused_moe.fused_moe"
# (kernel id, [(module, kernel, batch-size args)] in release order: the first that imports)
BATCH_ARGS = {
    "fused_moe_kernel-EM": [(FUSED_MOE, "fused_moe_kernel", ["EM"])],
    "fused_moe_kernel-num_valid_tokens": [(FUSED_MOE, "fused_moe_kernel", ["num_valid_tokens"])],
    "_compute_slot_mapping_kernel-num_tokens": [
        ("vllm.v1.worker.block_table", "_compute_slot_mapping_kernel", ["num_tokens"]),
        # v0.34.0: no batch-size integer (see the module docstring)
        ("vllm.v1.worker.gpu.block_table", "_compute_slot_mappings_kernel", []),
    ],
}
FP8 = torch.float8_e4m3fn
MAX_TOKENS = 8192


@pytest.mark.parametrize("locations", list(BATCH_ARGS.values()), ids=list(BATCH_ARGS))
def test_batch_size_arg_not_specialised(locations):
    tried = []
    for module, kernel, args in locations:
        try:
            jit = recompile.load_kernel(module, kernel)
        except recompile.NotATritonKernel:
            raise
        except LookupError as e:
            tried.append(str(e))
            continue
        if not args:  # no batch-size argument in this release: it must stay so
            names = [p.name for p in jit.params]
            assert "num_tokens" not in names and "num_reqs" not in names, names
        assert recompile.specialised_token_args(jit, args) == [], (
            f"{module}.{kernel}: {args} follow the batch size and are still specialised"
        )
        return
    raise LookupError("; ".join(tried))


def _warmup_api():
    """("module", the old patch's warm-up module) or ("framework", fused_moe) for the port."""
    try:
        return "module", importlib.import_module("vllm.model_executor.warmup.fused_moe_warmup")
    except ImportError:
        pass
    fm = importlib.import_module(FUSED_MOE)
    if hasattr(fm, "FusedMoETritonKernel"):
        return "framework", fm
    pytest.fail("this vLLM has no Triton fused-MoE warm-up")


def _qwen3_layer(device: str):
    """What the warm-up reads of a Qwen3-30B-A3B FusedMoE layer (per-tensor FP8, dynamic
    activation scales, as quantization="fp8" serves it) and its TritonExperts."""
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import (
        FusedMoEConfig,
        FusedMoEParallelConfig,
        RoutingMethodType,
        fp8_w8a8_moe_quant_config,
    )
    from vllm.model_executor.layers.fused_moe.experts.triton_moe import TritonExperts

    e, topk, h, i = 128, 8, 2048, 768
    kwargs = dict(
        num_experts=e, experts_per_token=topk, hidden_dim=h,
        intermediate_size_per_partition=i, num_local_experts=e, num_logical_experts=e,
        moe_parallel_config=FusedMoEParallelConfig.make_no_parallel(),
        activation=MoEActivation.SILU, in_dtype=torch.bfloat16, device="cuda",
        routing_method=RoutingMethodType.TopK, max_num_tokens=MAX_TOKENS,
    )  # fmt: skip
    params = inspect.signature(FusedMoEConfig).parameters
    if "intermediate_size" in params:  # v0.34.0
        kwargs["intermediate_size"] = i
    kwargs = {k: v for k, v in kwargs.items() if k in params}
    moe_config = FusedMoEConfig(**kwargs)
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
        quant_method=SimpleNamespace(topk_indices_dtype=None),
    )  # fmt: skip
    return layer, TritonExperts(moe_config, qc), qc


def _swap_ab(fm, cfg) -> bool:
    """The release's SWAP_AB rule for a config (v0.34.0: fused_moe/utils.py)."""
    utils = importlib.import_module("vllm.model_executor.layers.fused_moe.utils")
    return bool(utils.enable_swap_ab(cfg["BLOCK_SIZE_M"], cfg["BLOCK_SIZE_N"]))


TILE = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps",
        "num_stages")  # fmt: skip


def test_warmup_covers_every_launch(monkeypatch, mock_sm90):
    kind, warmup = _warmup_api()
    fm = importlib.import_module(FUSED_MOE)
    mock_sm90()
    # fused_moe_kernel's launches only (the series' decode path has its own variant)
    monkeypatch.setenv("VLLM_USE_TRITON_MOE_FP8_DECODE", "0")
    fm.get_moe_configs.cache_clear()
    layer, experts, _ = _qwen3_layer("meta")
    if kind == "module":
        _covers_old_module(warmup, fm, layer, experts)
    else:
        _covers_framework(fm, layer, experts)
    fm.get_moe_configs.cache_clear()


def _covers_old_module(warmup, fm, layer, experts):
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


def _covers_framework(fm, layer, experts):
    plan = experts.jit_warmup_plan(layer)
    assert plan is not None, "no warm-up plan for a per-tensor FP8 Triton layer"
    keys = fm._FUSED_MOE_TRITON_KERNEL.get_warmup_keys(
        plan=plan, min_num_tokens=1, max_num_tokens=MAX_TOKENS
    )
    assert keys, "the warm-up selects no compile key for a per-tensor FP8 Triton layer"

    def launch(meta, naive):  # what Triton compiles, in the release-neutral terms used here
        return tuple(meta[t] for t in TILE), bool(meta["SWAP_AB"]), naive

    warmed: dict = {}
    for k in keys:
        gemm = 1 if k.launch is plan.launches[1] else 0
        warmed.setdefault((gemm, launch(dict(k.meta), k.naive_block_assignment)), k.num_tokens)
    # every batch size, from the release's own config lookup and SWAP_AB rule
    distinct: dict = {}
    for m in range(1, MAX_TOKENS + 1):
        cfg = fm.try_get_optimal_moe_config(
            layer.w13_weight.size(), layer.w2_weight.size(), 8, "fp8_w8a8", m
        )
        meta = {**cfg, "SWAP_AB": _swap_ab(fm, cfg)}
        for gemm in (0, 1):
            key = (gemm, launch(meta, m * 8 * 4 <= 128))
            distinct.setdefault(key, m)
            assert key in warmed, f"batch {m}: GEMM {gemm} launch {key} is not warmed up"
            assert warmed[key] <= m
    assert warmed == distinct, "the warm-up compiles launches no batch size selects"


def _modular_kernel(layer, experts, qc):
    from vllm.model_executor.layers.fused_moe.all2all_utils import maybe_make_prepare_finalize
    from vllm.model_executor.layers.fused_moe.modular_kernel import FusedMoEKernel

    prepare_finalize = maybe_make_prepare_finalize(
        moe=layer.moe_config, quant_config=qc, allow_new_interface=True, use_monolithic=False
    )
    if "inplace" in inspect.signature(FusedMoEKernel).parameters:  # v0.21.0
        return FusedMoEKernel(prepare_finalize, experts, inplace=False)
    return FusedMoEKernel(prepare_finalize, experts)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (SM89+ for FP8)")
def test_no_compile_after_warmup_cuda():
    from triton import knobs
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.v1.worker.workspace import init_workspace_manager

    kind, warmup = _warmup_api()
    init_workspace_manager(torch.device("cuda"))  # as the worker does at start-up
    layer, experts, qc = _qwen3_layer("cuda")
    layer.w13_weight.copy_(torch.randn(layer.w13_weight.shape, device="cuda") / 16)
    layer.w2_weight.copy_(torch.randn(layer.w2_weight.shape, device="cuda") / 16)
    kernel = _modular_kernel(layer, experts, qc)

    def apply(layer_, x, w, ids, shared_experts_input=None):
        return kernel.apply(
            x, layer.w13_weight, layer.w2_weight, w, ids, activation=MoEActivation.SILU,
            global_num_experts=128, expert_map=None, apply_router_weight_on_input=False,
        )  # fmt: skip

    def run_layer(m):
        x = torch.randn(m, 2048, device="cuda", dtype=torch.bfloat16)
        ids = torch.rand(m, 128, device="cuda").topk(8, dim=-1).indices.to(torch.int32)
        apply(layer, x, torch.full((m, 8), 1.0 / 8, device="cuda"), ids)

    if kind == "module":
        layer.quant_method = SimpleNamespace(apply=apply, topk_indices_dtype=None)
        for m in sorted(warmup.fused_moe_warmup_batch_sizes(layer, experts, 512).values()):
            warmup._run_layer(layer, m)
    else:
        from vllm.model_executor.warmup.jit_warmup import JitWarmupRegistry

        registry = JitWarmupRegistry(vllm_config=None)
        with registry.activate():
            experts.register_jit_warmup(layer, 1, 512)
        assert len(registry) == 1
        registry.warmup()
    torch.cuda.synchronize()
    compiled = []
    previous = knobs.runtime.jit_post_compile_hook
    knobs.runtime.jit_post_compile_hook = lambda **kw: compiled.append(kw.get("fn").name)
    try:
        for m in range(1, 513):
            run_layer(m)
        torch.cuda.synchronize()
    finally:
        knobs.runtime.jit_post_compile_hook = previous
    assert "fused_moe_kernel" not in compiled, compiled


@pytest.mark.guard
@pytest.mark.parametrize("m", [2, 32, 1024], ids=["naive", "decode-swap", "prefill"])
def test_ptx_unchanged_without_batch_hints(m, mock_sm90):
    """Guard, not a base/patched difference: at a launch where EM and num_valid_tokens are
    multiples of 16 the fully specialised variant has both divisibility hints; the kernel as
    shipped must compile to the same sm_90 instructions (the hints fed no vectorised access
    and no address arithmetic)."""
    fm = importlib.import_module(FUSED_MOE)
    mock_sm90()
    fm.get_moe_configs.cache_clear()
    e, topk, h, i = 128, 8, 2048, 768
    w1 = torch.empty(e, 2 * i, h, dtype=FP8)
    cfg = fm.try_get_optimal_moe_config(w1.size(), (e, h, i), topk, "fp8_w8a8", m)
    naive = m * topk * 4 <= e
    rows = -(-(m * topk + e * (cfg["BLOCK_SIZE_M"] - 1)) // 16) * 16
    sorted_ids = None if naive else torch.zeros(rows, dtype=torch.int32)
    expert_ids = torch.zeros(m * topk if naive else rows, dtype=torch.int32)
    kernel = fm.fused_moe_kernel
    with recompile.capture_launches(kernel) as launches:
        fm.invoke_fused_moe_triton_kernel(
            torch.empty(m, h, dtype=FP8), w1, torch.empty(m, topk, 2 * i, dtype=torch.bfloat16),
            torch.ones(1), torch.ones(e), None, sorted_ids, expert_ids,
            torch.ones(1, dtype=torch.int32), False, topk, cfg,
            compute_type=triton.language.bfloat16, use_fp8_w8a8=True, use_int8_w8a8=False,
            use_int8_w8a16=False, use_int4_w4a16=False, per_channel_quant=False,
        )  # fmt: skip
    fm.get_moe_configs.cache_clear()
    (launch,) = launches
    bound = dict(zip([p.name for p in kernel.params], launch.args, strict=False)) | launch.kwargs
    assert bound["EM"] % 16 == 0 and bound["num_valid_tokens"] % 16 == 0, bound["EM"]
    shipped = recompile.ptx_code(recompile.ptx(kernel, launch))
    specialised = recompile.ptx_code(recompile.ptx(triton.jit(kernel.fn), launch))
    assert recompile.global_accesses(shipped) == recompile.global_accesses(specialised)
    assert shipped == specialised, "sm_90 PTX differs from the fully specialised one"
