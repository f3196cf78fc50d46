"""One record per model architecture: everything the annex knows of a model shape.

To add a model shape, add one ``ModelShape`` to ``SHAPES`` below; every part reads it there:
the kernel benchmarks (``moe``: ``MOE_SHAPES``, the default ``--shapes``), and, when it has a
``config``, the end-to-end harness (``benchmarks/e2e``): the model directory (``config``,
``flavours``, ``default_layers``), the servers (``env``, ``max_model_len``, the memory plan's
``weight_bytes``), the sizing of the runs (``cost``), the probe (``probe_lengths``) and what a
host must have staged (``host_needs``, checked by ``benchmarks/e2e/host.py``). An
architecture that has no record is an error everywhere (``get``), never another model's
figures. The flavours (how the weights are quantised) are in ``benchmarks/e2e/models.py``.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True)
class Cost:
    """Rough H200 costs at full depth, to size runs before one was measured (good to a factor
    of ~2): a decode step takes ``a_ms + b_ms * batch``, a prefill ``p_ms`` per prompt token."""

    a_ms: float
    b_ms: float
    p_ms: float


@dataclass(frozen=True)
class HostNeed:
    """Something a host must have staged for a model: a ``site`` path (glob, under the extra
    wheels folder), a ``tree`` path (glob, under each staged tree), or a ``module`` importable
    with that folder first. ``what`` is said when it is missing."""

    what: str
    site: str = ""
    tree: str = ""
    module: str = ""


def per_tensor_weight_bytes(cfg: dict) -> int:
    """Device bytes of a Qwen3-MoE / Mixtral config served as per-tensor FP8: linear and
    expert weights 1 byte per parameter, embeddings, LM head and router in bf16."""
    h, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or h // heads
    experts = cfg.get("num_experts") or cfg.get("num_local_experts")
    inter = cfg.get("moe_intermediate_size") or cfg["intermediate_size"]
    attn = h * heads * hd * 2 + h * kv * hd * 2
    moe = experts * 3 * h * inter
    router = h * experts * 2
    embed = cfg["vocab_size"] * h * 2 * (1 if cfg.get("tie_word_embeddings") else 2)
    return layers * (attn + moe + router) + embed


def deepseek_v4_weight_bytes(cfg: dict) -> int:
    """Device bytes of a DeepSeek-V4 config with block-FP8 linears and experts
    (``expert_dtype`` fp8: 1 byte per parameter; the 128x128 block scales, norms, mHC and the
    hash-routing table add < 1%), embeddings and LM head in bf16. Per layer: wq_a (h x
    q_lora), wq_b (q_lora x heads * head_dim), wkv (h x head_dim), wo_a (heads * head_dim x
    o_lora), wo_b (o_groups * o_lora x h), the indexer's wq_b (q_lora x index heads x index
    head_dim) as an upper bound for every layer, routed + shared experts (3 x h x
    moe_intermediate each), router (h x experts, bf16). 4 layers: ~28.5 GB (26.5 GiB)."""
    h, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    qd = cfg["num_attention_heads"] * cfg["head_dim"]
    q_lora, o_lora = cfg["q_lora_rank"], cfg["o_lora_rank"]
    attn = (
        h * q_lora
        + q_lora * qd
        + h * cfg["head_dim"]
        + qd * o_lora
        + cfg["o_groups"] * o_lora * h
        + q_lora * cfg["index_n_heads"] * cfg["index_head_dim"]
    )
    experts = cfg["n_routed_experts"] + (cfg.get("n_shared_experts") or 0)
    moe = experts * 3 * h * cfg["moe_intermediate_size"]
    router = h * cfg["n_routed_experts"] * 2
    embed = cfg["vocab_size"] * h * 2 * (1 if cfg.get("tie_word_embeddings") else 2)
    return layers * (attn + moe + router) + embed


# Probe: single requests at prompt lengths the warm-up did not use (tokens).
PROBE_LENGTHS = (3, 17, 100, 129, 257, 511, 777, 1000, 1500, 2047)
# The servers' environment of a per-tensor FP8 model: on the H200 the kernel warm-up asked for
# DeepGEMM and the engine stopped (../shared/gpu/README.md, "Serving a model").
PER_TENSOR_ENV = MappingProxyType({"VLLM_USE_DEEP_GEMM": "0"})


@dataclass(frozen=True)
class ModelShape:
    """A model architecture. ``moe``: one MoE layer as the kernel benchmarks time it (experts,
    top-k, hidden size, intermediate size of one rank); ``kernel_bench``: in their default
    shapes. The rest is for serving it end to end, and only where ``config`` (its public
    Hugging Face config.json, or a stand-in's, whose comment says what it leaves out) is
    given: ``flavours`` it can be served in (``why_flavours``:
    why the others are refused), decoder layers by default (None: full depth), the
    --max-model-len floor, the servers' environment (``env``: see ``benchmarks/e2e/README.md``),
    the sizing ``cost``, the probe's prompt lengths, the weights' device bytes, and what a host
    needs staged beyond the other models (``host_needs``; ``stage_args``: stage.py's extra
    arguments for it; ``host_wheels``: the list of the extra wheels). The first of
    ``flavours`` is the one served when none is named."""

    name: str
    title: str
    moe: tuple[int, int, int, int]
    kernel_bench: bool = True
    config: Mapping | None = None
    flavours: tuple[str, ...] = ()
    why_flavours: str = ""
    default_layers: int | None = None
    max_model_len: int | None = None
    env: Mapping[str, str] = field(default_factory=lambda: PER_TENSOR_ENV)
    cost: Cost | None = None
    probe_lengths: tuple[int, ...] = PROBE_LENGTHS
    weight_bytes: Callable[[dict], int] = per_tensor_weight_bytes
    host_needs: tuple[HostNeed, ...] = ()
    stage_args: str = ""
    host_wheels: str = ""


def _v4_flash_compress_ratios(layers: int = 43) -> list[int]:
    """``compress_ratios`` of DeepSeek-V4-Flash: one entry per decoder layer plus one for the
    MTP layer (0). Layers 0-1 are sliding-window only (0), then C4A (4: compressed by 4, with
    the top-k indexer) and C128A (128) alternate; the last decoder layer (42) is C4A.
    Source: public restatements of the V4-Flash config.json (44 entries for 43 layers).
    vLLM reads entry ``layer_id`` for each decoder layer (models/deepseek_v4.py:959) and the
    set of ratios for the FlashMLA plans (v1/attention/backends/mla/sparse_swa.py:226)."""
    return [0 if i < 2 else (4 if (i - 2) % 2 == 0 else 128) for i in range(layers)] + [0]


QWEN3_30B_A3B = ModelShape(
    name="qwen3-30b-a3b",
    title="Qwen3-30B-A3B",
    moe=(128, 8, 2048, 768),
    # Qwen/Qwen3-30B-A3B config.json (public), as in ../shared/gpu/example_e2e_dummy.py.
    config=MappingProxyType(
        {
            "architectures": ["Qwen3MoeForCausalLM"],
            "attention_bias": False,
            "attention_dropout": 0.0,
            "bos_token_id": 151643,
            "eos_token_id": 151645,
            "decoder_sparse_step": 1,
            "head_dim": 128,
            "hidden_act": "silu",
            "hidden_size": 2048,
            "initializer_range": 0.02,
            "intermediate_size": 6144,
            "max_position_embeddings": 40960,
            "max_window_layers": 48,
            "mlp_only_layers": [],
            "model_type": "qwen3_moe",
            "moe_intermediate_size": 768,
            "norm_topk_prob": True,
            "num_attention_heads": 32,
            "num_experts": 128,
            "num_experts_per_tok": 8,
            "num_hidden_layers": 48,
            "num_key_value_heads": 4,
            "output_router_logits": False,
            "rms_norm_eps": 1e-06,
            "rope_scaling": None,
            "rope_theta": 1000000.0,
            "router_aux_loss_coef": 0.001,
            "sliding_window": None,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "use_cache": True,
            "use_sliding_window": False,
            "vocab_size": 151936,
        }
    ),
    flavours=("fp8static", "fp8dyn"),
    why_flavours="fp8block is the DeepSeek-V4 layout; this arch is served per-tensor",
    cost=Cost(a_ms=7.0, b_ms=0.10, p_ms=0.02),
)

# One rank of DeepSeek-V3 under tensor parallelism 8: its routed experts (256, top-8, hidden
# 7168, intermediate 2048 / 8) as the kernel benchmarks time them. Served on one GPU as a
# stand-in, not DeepSeek-V3's own architecture: Qwen3-MoE decoder layers with that MoE layer,
# 16 attention heads (DeepSeek-V3's 128 / 8; GQA with 2 KV heads of 128 in place of MLA's
# 576-wide latent cache), the rank's share of the vocabulary (129280 / 8) in the embeddings
# and LM head, as many layers as DeepSeek-V3 has MoE layers (58; its 3 dense ones, the shared
# expert and the all-reduces are left out). What it measures is the MoE layer's share of one
# rank's decode step, not a TP8 deployment's TPOT.
DSV3_TP8 = ModelShape(
    name="dsv3-tp8",
    title="DeepSeek-V3 TP8",
    moe=(256, 8, 7168, 256),
    config=MappingProxyType(
        {
            **QWEN3_30B_A3B.config,
            "bos_token_id": 0,
            "eos_token_id": 1,
            "hidden_size": 7168,
            "intermediate_size": 2304,
            "max_window_layers": 58,
            "moe_intermediate_size": 256,
            "num_attention_heads": 16,
            "num_experts": 256,
            "num_hidden_layers": 58,
            "num_key_value_heads": 2,
            "rope_theta": 10000.0,
            "vocab_size": 16160,
        }
    ),
    flavours=("fp8static", "fp8dyn"),
    why_flavours="a per-tensor stand-in; DeepSeek-V3's own checkpoints are block FP8",
    # 1.45 GB a layer as per-tensor FP8: 16 layers (23.6 GB) let two engines share an H100
    default_layers=16,
    cost=Cost(a_ms=6.0, b_ms=0.15, p_ms=0.03),
)

MIXTRAL_8X7B = ModelShape(
    name="mixtral-8x7b",
    title="Mixtral-8x7B",
    moe=(8, 2, 4096, 14336),
    # mistralai/Mixtral-8x7B-v0.1 config.json (public).
    config=MappingProxyType(
        {
            "architectures": ["MixtralForCausalLM"],
            "attention_dropout": 0.0,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "hidden_act": "silu",
            "hidden_size": 4096,
            "initializer_range": 0.02,
            "intermediate_size": 14336,
            "max_position_embeddings": 32768,
            "model_type": "mixtral",
            "num_attention_heads": 32,
            "num_experts_per_tok": 2,
            "num_hidden_layers": 32,
            "num_key_value_heads": 8,
            "num_local_experts": 8,
            "output_router_logits": False,
            "rms_norm_eps": 1e-05,
            "rope_theta": 1000000.0,
            "router_aux_loss_coef": 0.02,
            "sliding_window": None,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "use_cache": True,
            "vocab_size": 32000,
        }
    ),
    flavours=("fp8static", "fp8dyn"),
    why_flavours="fp8block is the DeepSeek-V4 layout; this arch is served per-tensor",
    cost=Cost(a_ms=9.0, b_ms=0.10, p_ms=0.05),
)

# deepseek-ai/DeepSeek-V4-Flash geometry (public config.json as restated publicly; the
# checkpoint's own file is not in this workspace). Each field and its reader in vLLM v0.21.0
# (paths under vllm/vllm/):
# - hidden_size 4096, vocab_size 129280, rms_norm_eps, rope_*, compress_rope_theta, yarn
#   rope_scaling: V4-Flash; DeepseekV4Attention (model_executor/models/deepseek_v4.py:942-1018)
# - num_attention_heads 64, head_dim 512, qk_rope_head_dim 64 (nope 448), q_lora_rank 1024,
#   o_lora_rank 1024, o_groups 8, sliding_window 128: V4-Flash; the same attention class and
#   model_executor/layers/deepseek_v4_attention.py (FlashMLA sparse: head dim 512, 64 heads)
# - num_key_value_heads 1: MLA-style single latent KV head (vLLM treats it as use_mla)
# - compress_ratios: _v4_flash_compress_ratios (deepseek_v4.py:959 indexes it by layer)
# - index_n_heads 64, index_head_dim 128, index_topk 512: V4-Flash; the indexer built for
#   compress ratio 4 (deepseek_v4_attention.py:1107-1109)
# - hc_mult 4, hc_sinkhorn_iters 20, hc_eps: V4-Flash's mHC; DeepseekV4DecoderLayer
# - n_routed_experts 256, num_experts_per_tok 6, moe_intermediate_size 2048, n_shared_experts
#   1, routed_scaling_factor 1.5, scoring_func sqrtsoftplus, topk_method noaux_tc,
#   num_hash_layers 3, swiglu_limit 10: V4-Flash; DeepseekV4MoE (deepseek_v4.py:732-791)
# - expert_dtype "fp8": NOT V4-Flash's ("fp4", MXFP4 experts, whose dummy weights are
#   uninitialised uint8 with e8m0 scales: NaN-prone); "fp8" is the V4-Flash-Base layout, block
#   FP8 experts (deepseek_v4.py:129-177), served by TRITON on SM90 without EP
#   (fused_moe/oracle/fp8.py, the block-FP8 rule)
# - max_position_embeddings 1048576: V4-Flash; the harness always passes --max-model-len
# - quantization_config: the flavour (fp8block) adds it; scale_fmt is read unconditionally
#   (deepseek_v4.py:1011, KeyError without it)
# Served in fp8block only: its O projection reads wo_a.weight_scale_inv and runs DeepGEMM
# fp8_einsum on it (model_executor/layers/deepseek_v4_attention.py:336-344), which neither
# online per-tensor FP8 (fp8dyn) nor serialized per-tensor FP8 (fp8static) gives. 4 decoder
# layers by default: the shortest prefix of the layer pattern with all three attention types.
# --max-model-len at least 16384: its default is max_position_embeddings, which sizes its
# sparse-attention workspaces. Environment: see model_env in benchmarks/e2e/models.py.
# Probe: what patch 3 changes is _fused_inv_rope_fp8_quant_per_head's specialisation on
# num_tokens and scale_stride_k = num_tokens rounded up to 4 (Triton keys an int on "== 1"
# and "divisible by 16"; v1/attention/ops/deepseek_v4_ops/fused_inv_rope_fp8_quant.py
# :198-214). Start-up meets (1, -), (-, -) and (16, 16); (-, 16) first comes with an eager
# prefill of L = 13, 14 or 15 (mod 16) tokens. Every other length of a new size bucket would
# confound it: mHC's n_splits = f(cdiv(L, 64)) (model_executor/layers/mhc.py:273, 665) is a
# new tilelang / DeepGEMM JIT per 64-token bucket. So every length is in the bucket 961..1024
# (n_splits 8 on 132 SMs, not met at start-up), above the largest CUDA-graph capture size
# (eager, exact L tokens). Order: 968 first (== 8 mod 16: no new rope variant; pays the
# bucket's JIT), 1000 (== 8: a control), then 1021 (== 13: the base tree's new variant), 1022
# and 1023 (== 14, 15: the same key, no second compile), 973 (== 13), 1008 (== 0: a control).
DEEPSEEK_V4 = ModelShape(
    name="deepseek-v4",
    title="DeepSeek-V4-Flash",
    moe=(256, 6, 4096, 2048),
    kernel_bench=False,
    config=MappingProxyType(
        {
            "architectures": ["DeepseekV4ForCausalLM"],
            "model_type": "deepseek_v4",
            "torch_dtype": "bfloat16",
            "bos_token_id": 0,
            "eos_token_id": 1,
            "vocab_size": 129280,
            "hidden_size": 4096,
            "num_hidden_layers": 43,
            "num_attention_heads": 64,
            "num_key_value_heads": 1,
            "head_dim": 512,
            "qk_rope_head_dim": 64,
            "q_lora_rank": 1024,
            "o_lora_rank": 1024,
            "o_groups": 8,
            "hidden_act": "silu",
            "swiglu_limit": 10.0,
            "rms_norm_eps": 1e-06,
            "attention_bias": False,
            "attention_dropout": 0.0,
            "tie_word_embeddings": False,
            "max_position_embeddings": 1048576,
            "rope_theta": 10000,
            "compress_rope_theta": 160000,
            "rope_scaling": {
                "type": "yarn",
                "factor": 16,
                "original_max_position_embeddings": 65536,
                "beta_fast": 32,
                "beta_slow": 1,
            },
            "sliding_window": 128,
            "compress_ratios": _v4_flash_compress_ratios(43),
            "index_n_heads": 64,
            "index_head_dim": 128,
            "index_topk": 512,
            "hc_mult": 4,
            "hc_sinkhorn_iters": 20,
            "hc_eps": 1e-06,
            "moe_intermediate_size": 2048,
            "n_routed_experts": 256,
            "n_shared_experts": 1,
            "num_experts_per_tok": 6,
            "norm_topk_prob": True,
            "routed_scaling_factor": 1.5,
            "scoring_func": "sqrtsoftplus",
            "topk_method": "noaux_tc",
            "num_hash_layers": 3,
            "num_nextn_predict_layers": 1,
            "expert_dtype": "fp8",
        }
    ),
    flavours=("fp8block",),
    why_flavours="it needs block FP8 with scale_fmt (DeepseekV4Attention reads "
    "quantization_config['scale_fmt'] and wo_a.weight_scale_inv)",
    default_layers=4,
    max_model_len=16384,
    # VLLM_USE_DEEP_GEMM=1 (its default, set so that no outer setting turns it off): the
    # sparse-attention indexer needs DeepGEMM (layers/sparse_attn_indexer.py:441-444), and only
    # the DeepGEMM linear kernel gives wo_a the grouped 3-D form fp8_einsum needs
    # (kernels/linear/scaled_mm/deep_gemm.py:103-104). VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER=0:
    # block-FP8 linears use DeepGEMM, not FlashInfer's SM90 block-scale GEMM, which JIT-builds
    # from source (envs.py:1323). VLLM_USE_FLASHINFER_MOE_FP8=0: harmless, TRITON is chosen for
    # block FP8 without EP anyway. VLLM_DEEP_GEMM_WARMUP=full: DeepGEMM's linear JIT at
    # start-up rather than inside the time to first token.
    env=MappingProxyType(
        {
            "VLLM_USE_DEEP_GEMM": "1",
            "VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER": "0",
            "VLLM_USE_FLASHINFER_MOE_FP8": "0",
            "VLLM_DEEP_GEMM_WARMUP": "full",
        }
    ),
    # a guess (nothing measured): 43 layers of 4096 wide, 6 of 256 experts, sparse attention
    cost=Cost(a_ms=15.0, b_ms=0.15, p_ms=0.06),
    probe_lengths=(968, 1000, 1021, 1022, 1023, 973, 1008),
    weight_bytes=deepseek_v4_weight_bytes,
    # every decoder layer imports tilelang (vllm mhc.py raises without it); DeepGEMM (the
    # indexer, the wo_a einsum) and FlashMLA (its only attention backend) in each tree
    host_needs=(
        HostNeed("tilelang in {site}", site="tilelang"),
        HostNeed("z3-solver in {site} (tilelang's libtvm loads libz3)", site="z3"),
        HostNeed(
            "ml-dtypes (neither in {site} nor in {python}'s own packages)", module="ml_dtypes"
        ),
        HostNeed(
            "apache-tvm-ffi 0.1.9 in {site} (tilelang 0.1.9 fails to import with other versions)",
            site="apache_tvm_ffi-0.1.9.dist-info",
        ),
        HostNeed(
            "DeepGEMM in {tree} (vllm/third_party/deep_gemm/_C*.so)",
            tree="vllm/third_party/deep_gemm/_C*.so",
        ),
        HostNeed("FlashMLA in {tree} (vllm/_flashmla_C.abi3.so)", tree="vllm/_flashmla_C.abi3.so"),
    ),
    stage_args="--deepgemm",
    # tilelang==0.1.9, z3-solver==4.15.4.0, ml-dtypes, apache-tvm-ffi==0.1.9
    host_wheels="benchmarks/h200/host-wheels-dsv4.txt",
)

SHAPES = {s.name: s for s in (QWEN3_30B_A3B, DSV3_TP8, MIXTRAL_8X7B, DEEPSEEK_V4)}
# name: (experts E, top-k, hidden H, intermediate I): the kernel benchmarks' shapes
MOE_SHAPES = {s.name: s.moe for s in SHAPES.values() if s.kernel_bench}
# the shapes the end-to-end harness serves
SERVED = {s.name: s for s in SHAPES.values() if s.config is not None}


def get(name: str | None, served: bool = False) -> ModelShape:
    """The record of ``name`` (with ``served``: one the end-to-end harness can serve).

    Raises:
        ValueError: no such record, naming the known ones and where to add one.
    """
    known = SERVED if served else SHAPES
    if name not in known:
        raise ValueError(
            f"unknown arch {name!r}; known: {', '.join(known)} (a new one is a ModelShape "
            "record in benchmarks/shapes.py)"
        )
    return known[name]
