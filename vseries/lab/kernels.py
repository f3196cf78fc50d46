"""Where the audited Triton kernels live in each vLLM release, and the audit table.

Kernel locations are by release layout (upstream moved the DeepSeek-V4 ops in v0.22.0 and
wrapped the rope kernel in a class later); ``AUDIT`` lists every Triton kernel of the
DeepSeek-V4 and MoE paths with its integer arguments that follow the token count, read from
the v0.21.0 sources (docs/recompile-audit.md).
"""

import dataclasses

# The sweep of the rope patch's brief: warm up at one token, then token counts that hit every
# specialisation class of the base kernel (1, multiple of 16, other; rounded up to 4 or not).
WARMUP = 1

SWEEP = (2, 3, 5, 16, 17, 31, 33, 128, 1000, 4096, 40000)

# v0.21.0's names (the pin's; the benchmarks import them).
ROPE_MODULE = "vllm.v1.attention.ops.deepseek_v4_ops.fused_inv_rope_fp8_quant"

ROPE_KERNEL = "_fused_inv_rope_fp8_quant_per_head"


@dataclasses.dataclass(frozen=True)
class KernelLocation:
    """Where one release layout of vLLM keeps a Triton kernel.

    Attributes:
        module: dotted module name.
        attr: attribute path of the ``JITFunction`` in that module: a name, or
            ``Class.attribute`` for a kernel held by a class (a staticmethod).
        since: the first release known to use this layout (for messages only).
    """

    module: str
    attr: str
    since: str

    def __str__(self) -> str:
        return f"{self.module}:{self.attr} ({self.since} layout)"


# Module prefixes upstream moved after the pin: (old, new, release that moved them).
MOVES = (
    ("vllm.v1.attention.ops.deepseek_v4_ops.", "vllm.models.deepseek_v4.common.ops.", "v0.22.0"),
)

_DSV4_V22 = MOVES[0][1]

# The rope kernel, oldest layout first. v0.22.0 moved the module (and stopped specialising
# num_tokens); by v0.33.0 the kernel is the staticmethod `kernel` of FusedInvRopeFP8QuantKernel,
# launched through vLLM's VllmTritonJitKernel (and scale_stride_k is unspecialised too). Every
# layout keeps the host function `fused_inv_rope_fp8_quant` in the kernel's module.
ROPE_LOCATIONS = (
    KernelLocation(ROPE_MODULE, ROPE_KERNEL, "v0.21.0"),
    KernelLocation(_DSV4_V22 + "fused_inv_rope_fp8_quant", ROPE_KERNEL, "v0.22.0"),
    KernelLocation(
        _DSV4_V22 + "fused_inv_rope_fp8_quant", "FusedInvRopeFP8QuantKernel.kernel", "v0.33.0"
    ),
)

QUANT_INSERT_KERNEL = "quantize_and_insert_k_kernel"

QUANT_INSERT_LOCATIONS = (
    KernelLocation(MOVES[0][0] + "cache_utils", QUANT_INSERT_KERNEL, "v0.21.0"),
    KernelLocation(_DSV4_V22 + "cache_utils", QUANT_INSERT_KERNEL, "v0.22.0"),
)


@dataclasses.dataclass(frozen=True)
class KernelAudit:
    """One Triton kernel of the audited paths and the integer arguments that follow T.

    Attributes:
        module: dotted module that defines the kernel (vLLM v0.21.0 layout).
        kernel: the ``@triton.jit`` function's name in that module.
        token_args: its non-constexpr integer arguments whose value follows the token count.
        evidence: how the host code derives them from the token count (file:function).
        action: what the rope-nospec patch does about them, or why it leaves them.
        path: where the kernel runs ("decode+prefill", "prefill", "not on the serving path"...).
    """

    module: str
    kernel: str
    token_args: tuple[str, ...]
    evidence: str
    action: str
    path: str

    def locations(self) -> tuple[KernelLocation, ...]:
        """Where the kernel may live in the vLLM under test: the pin's location, then the
        locations of later releases (``MOVES``; ``ROPE_LOCATIONS`` for the rope kernel)."""
        if (self.module, self.kernel) == (ROPE_MODULE, ROPE_KERNEL):
            return ROPE_LOCATIONS
        found = [KernelLocation(self.module, self.kernel, "v0.21.0")]
        for old, new, since in MOVES:
            if self.module.startswith(old):
                found.append(KernelLocation(new + self.module[len(old) :], self.kernel, since))
        return tuple(found)


_DSV4 = "vllm.v1.attention.ops.deepseek_v4_ops."

_MOE = "vllm.model_executor.layers.fused_moe."

PATCHED = "do_not_specialize (rope-nospec)"

_LEFT_MOE = "left: fused_moe.py belongs to the swap-AB patch"

_LEFT_OTHER = "left: MoE kernel, outside the rope patch's scope"

# Read from the v0.21.0 sources (call sites named in `evidence`); see docs/recompile-audit.md.
AUDIT: tuple[KernelAudit, ...] = (
    KernelAudit(
        _DSV4 + "fused_inv_rope_fp8_quant",
        ROPE_KERNEL,
        ("num_tokens", "scale_stride_group", "scale_stride_k"),
        "num_tokens = o.shape[0]; scale strides = scale_inner * round_up(T, 4) and "
        "round_up(T, 4) (_fused_inv_rope_fp8_quant_kernel_impl). fp8_stride_group = "
        "T * d also follows T, but d is a multiple of 128: its key never changes and "
        "its hint gives 16-byte fp8 stores, so it stays specialised",
        PATCHED,
        "decode+prefill",
    ),
    KernelAudit(
        _DSV4 + "cache_utils",
        "quantize_and_insert_k_kernel",
        ("num_tokens",),
        "num_tokens = slot_mapping.shape[0] (quantize_and_insert_k_cache)",
        PATCHED,
        "tests only in v0.21.0 (no caller in vllm/)",
    ),
    KernelAudit(
        _DSV4 + "cache_utils",
        "_dequantize_and_gather_k_kernel",
        (),
        "offset is 0 or N (compressed length); strides from a fixed-size workspace",
        "none needed",
        "prefill",
    ),
    KernelAudit(
        _DSV4 + "cache_utils",
        "_compute_global_topk_indices_and_lens_kernel",
        (),
        "T only sets the grid; strides, topk, block_size are fixed",
        "none needed",
        "decode",
    ),
    KernelAudit(
        _DSV4 + "cache_utils",
        "_combine_topk_swa_indices_kernel",
        (),
        "M = N + window + max_num_batched_tokens, N from max_model_len: fixed",
        "none needed",
        "prefill",
    ),
    KernelAudit(
        _DSV4 + "fused_qk_rmsnorm",
        "_fused_q_kv_rmsnorm_kernel",
        (),
        "T only sets the grid; row strides are fixed",
        "none needed",
        "decode+prefill",
    ),
    KernelAudit(
        _DSV4 + "fused_indexer_q",
        "_fused_indexer_q_rope_quant_kernel",
        (),
        "T only sets the grid; strides are fixed",
        "none needed",
        "decode+prefill",
    ),
    KernelAudit(
        _DSV4 + "fused_indexer_q",
        "_fused_indexer_q_rope_mxfp4_kernel",
        (),
        "T only sets the grid; strides are fixed",
        "none needed",
        "decode+prefill (when CuTe DSL is absent)",
    ),
    KernelAudit(
        _DSV4 + "fused_compress_quant_cache",
        "_fused_kv_compress_norm_rope_insert_sparse_attn",
        (),
        "T only sets the grid; block sizes and strides are fixed",
        "none needed",
        "decode+prefill",
    ),
    KernelAudit(
        _DSV4 + "fused_compress_quant_cache",
        "_fused_kv_compress_norm_rope_insert_indexer_attn",
        (),
        "T only sets the grid; block sizes and strides are fixed",
        "none needed",
        "decode+prefill",
    ),
    KernelAudit(
        _DSV4 + "fused_compress_quant_cache",
        "_fused_kv_compress_norm_rope_insert_indexer_mxfp4_attn",
        (),
        "T only sets the grid; block sizes and strides are fixed",
        "none needed",
        "decode+prefill",
    ),
    # DeepSeek-V4 metadata kernels outside deepseek_v4_ops (reported, not changed).
    KernelAudit(
        "vllm.v1.attention.backends.mla.flashmla_sparse",
        "_build_c128a_topk_metadata_kernel",
        ("num_decode_tokens",),
        "num_decode_tokens of the batch (build_c128a_topk_metadata)",
        "left: outside deepseek_v4_ops (attention metadata builder)",
        "every step",
    ),
    KernelAudit(
        "vllm.v1.attention.backends.mla.sparse_swa",
        "_compute_prefill_metadata_kernel",
        ("num_prefills", "num_decodes"),
        "request counts of the batch; BLOCK_SIZE=next_power_of_2(num_prefills) is a "
        "constexpr and compiles per power of two anyway",
        "left: outside deepseek_v4_ops (attention metadata builder)",
        "steps with prefills",
    ),
    # MoE path.
    KernelAudit(
        _MOE + "fused_moe",
        "fused_moe_kernel",
        ("EM", "num_valid_tokens"),
        "EM = sorted_token_ids.size(0) = T*top_k + E*(BLOCK_SIZE_M-1) (moe_align_"
        "block_size), or min(that, T*top_k*BLOCK_SIZE_M) when T < BLOCK_SIZE_M; "
        "num_valid_tokens = T*top_k (invoke_fused_moe_triton_kernel). vLLM's own "
        "_fused_moe_lora_kernel already puts both in do_not_specialize",
        _LEFT_MOE,
        "decode+prefill",
    ),
    KernelAudit(
        _MOE + "fused_moe",
        "fused_moe_kernel_gptq_awq",
        ("EM", "num_valid_tokens"),
        "as fused_moe_kernel (invoke_fused_moe_wna16_triton_kernel)",
        _LEFT_MOE,
        "decode+prefill (GPTQ/AWQ)",
    ),
    KernelAudit(
        _MOE + "fused_moe",
        "compute_identity_kernel",
        ("num_tokens",),
        "num_tokens = expert_indices.numel()... (zero_experts_compute_triton); "
        "annotated `int`, which Triton still specialises",
        _LEFT_MOE,
        "zero-expert routers only",
    ),
    KernelAudit(
        _MOE + "moe_fused_mul_sum",
        "moe_fused_mul_sum_kernel",
        ("num_tokens",),
        "num_tokens = inputs.shape[0] (moe_fused_mul_sum)",
        _LEFT_OTHER,
        "humming MoE only",
    ),
    KernelAudit(
        _MOE + "utils",
        "_count_expert_num_tokens",
        ("topk_numel",),
        "topk_numel = topk_ids.numel() = T*top_k; BLOCK_SIZE constexpr = "
        "next_power_of_2(min(numel, 1024))",
        _LEFT_OTHER,
        "DeepGEMM MoE",
    ),
    KernelAudit(
        _MOE + "deep_gemm_utils",
        "_fwd_kernel_ep_scatter_2",
        ("total_token_num",),
        "total_token_num = recv_topk.shape[0] (ep_scatter)",
        _LEFT_OTHER,
        "DeepGEMM MoE",
    ),
    KernelAudit(
        _MOE + "deep_gemm_utils",
        "_fwd_kernel_ep_gather",
        ("total_token_num",),
        "total_token_num = output_tensor.shape[0] (ep_gather)",
        _LEFT_OTHER,
        "DeepGEMM MoE",
    ),
    KernelAudit(
        _MOE + "fused_batched_moe",
        "batched_triton_kernel",
        (),
        "max_num_tokens is the fixed per-rank buffer size",
        "none needed",
        "batched (DP/EP) MoE",
    ),
    KernelAudit(
        _MOE + "experts.batched_deep_gemm_moe",
        "_silu_mul_fp8_quant_deep_gemm",
        (),
        "strides of fixed-size (E, T_max, ...) buffers",
        "none needed",
        "batched DeepGEMM MoE",
    ),
)
