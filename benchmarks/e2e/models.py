"""Model directories for the end-to-end runs, written locally: no download, deterministic.

    python3 benchmarks/e2e/models.py --out DIR [--arch qwen3-30b-a3b mixtral-8x7b deepseek-v4]
        [--flavour fp8dyn fp8static fp8block] [--layers N]

Each directory holds the model's public Hugging Face ``config.json`` (depth reduced with
``--layers``), a BPE tokenizer trained here with the ``tokenizers`` library on seeded
generated text (``tokenizer.json`` + ``tokenizer_config.json`` naming
``PreTrainedTokenizerFast``), and ``VSERIES_MODEL.json`` (what it is, how to serve it: the
engine arguments, the environment and the --max-model-len floor the model needs, file
digests). vLLM serves it with ``--load-format dummy`` (random weights), so the weights are
never needed. Without ``--flavour``, each arch gets every flavour valid for it. Per-tensor FP8
flavours (qwen3-30b-a3b, mixtral-8x7b):

- ``fp8dyn``: no ``quantization_config``; served with ``--quantization fp8``: vLLM quantises
  the bf16 dummy weights online to per-tensor FP8 with dynamic per-tensor activation scales.
- ``fp8static``: ``config.json`` carries ``{"quant_method": "fp8", "activation_scheme":
  "static"}``: vLLM creates serialized per-tensor FP8 weights with static input scales (the
  case whose MoE backend patch 2 changes on Hopper: FLASHINFER_CUTLASS on v0.21.0, TRITON with
  the series).

Block FP8 flavour (deepseek-v4 only, which has no other):

- ``fp8block``: ``quantization_config`` = 128x128 block FP8 weights, dynamic activations,
  ``scale_fmt`` ue8m0, with ``expert_dtype`` "fp8" (see DEEPSEEK_V4_FLASH); vLLM rewrites
  ``quant_method`` fp8 to ``deepseek_v4_fp8`` for this model type.

deepseek-v4 defaults to 4 decoder layers (``DEFAULT_LAYERS``), the shortest prefix of the
public layer pattern that has all three attention layer types.

The tokenizer has 32000 tokens (``<unk>``, ``<s>``, ``</s>`` = ids 0, 1, 2, as Mixtral's);
Qwen3's model vocabulary (151936) is larger than the tokenizer's, as with the real Qwen3
tokenizer, which vLLM allows. Output is byte-identical on re-run with the same
``tokenizers`` version (recorded in VSERIES_MODEL.json with the sha256 of every file).
"""

import argparse
import copy
import hashlib
import itertools
import json
import random
import sys
from pathlib import Path

# Qwen/Qwen3-30B-A3B config.json (public), as in ../shared/gpu/example_e2e_dummy.py.
QWEN3_30B_A3B = {
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

# mistralai/Mixtral-8x7B-v0.1 config.json (public).
MIXTRAL_8X7B = {
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


def _v4_flash_compress_ratios(layers: int = 43) -> list[int]:
    """``compress_ratios`` of DeepSeek-V4-Flash: one entry per decoder layer plus one for the
    MTP layer (0). Layers 0-1 are sliding-window only (0), then C4A (4: compressed by 4, with
    the top-k indexer) and C128A (128) alternate; the last decoder layer (42) is C4A.
    Source: public restatements of the V4-Flash config.json (44 entries for 43 layers).
    vLLM reads entry ``layer_id`` for each decoder layer (models/deepseek_v4.py:959) and the
    set of ratios for the FlashMLA plans (v1/attention/backends/mla/sparse_swa.py:226)."""
    return [0 if i < 2 else (4 if (i - 2) % 2 == 0 else 128) for i in range(layers)] + [0]


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
DEEPSEEK_V4_FLASH = {
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

ARCHS = {
    "qwen3-30b-a3b": QWEN3_30B_A3B,
    "mixtral-8x7b": MIXTRAL_8X7B,
    "deepseek-v4": DEEPSEEK_V4_FLASH,
}
FLAVOURS = ("fp8dyn", "fp8static", "fp8block")
# The flavours each arch can be served in. deepseek-v4 needs block FP8: its O projection
# reads wo_a.weight_scale_inv and runs DeepGEMM fp8_einsum on it
# (model_executor/layers/deepseek_v4_attention.py:336-344), which neither online per-tensor
# FP8 (fp8dyn) nor serialized per-tensor FP8 (fp8static) gives.
ARCH_FLAVOURS = {
    "qwen3-30b-a3b": ("fp8dyn", "fp8static"),
    "mixtral-8x7b": ("fp8dyn", "fp8static"),
    "deepseek-v4": ("fp8block",),
}
# Decoder layers when --layers is not given (None: full depth).
DEFAULT_LAYERS = {"deepseek-v4": 4}
STATIC_FP8 = {"quant_method": "fp8", "activation_scheme": "static"}
# V4-Flash's quantization_config (block 128x128, e4m3, dynamic activations, ue8m0 scales;
# scale_fmt ue8m0 also sets VLLM_USE_DEEP_GEMM_E8M0=1: transformers_utils/config.py:793-805).
BLOCK_FP8 = {
    "quant_method": "fp8",
    "fmt": "e4m3",
    "activation_scheme": "dynamic",
    "weight_block_size": [128, 128],
    "scale_fmt": "ue8m0",
}
# --max-model-len floor per arch (tokens): DeepSeek-V4's default is max_position_embeddings
# (1048576), which sizes its sparse-attention workspaces; the harness passes the larger of
# this and what the workloads and the probe need.
MAX_MODEL_LEN = {"deepseek-v4": 16384}
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>"]
TOKENIZER_VOCAB = 32000
TOKENIZER_SEED = 0


def check_flavour(arch: str, flavour: str) -> None:
    """Raise ValueError when ``arch`` or ``flavour`` is unknown or the pair is not servable
    (ARCH_FLAVOURS), naming the flavours the arch has."""
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; known: {', '.join(ARCHS)}")
    if flavour not in FLAVOURS:
        raise ValueError(f"unknown flavour {flavour!r}; known: {', '.join(FLAVOURS)}")
    valid = ARCH_FLAVOURS[arch]
    if flavour not in valid:
        why = (
            "it needs block FP8 with scale_fmt (DeepseekV4Attention reads "
            "quantization_config['scale_fmt'] and wo_a.weight_scale_inv)"
            if arch == "deepseek-v4"
            else "fp8block is the DeepSeek-V4 layout; this arch is served per-tensor"
        )
        raise ValueError(
            f"flavour {flavour!r} is not valid for {arch}: {why}; valid: {', '.join(valid)}"
        )


def model_config(arch: str, flavour: str, layers: int | None = None) -> dict:
    """The config.json dict of ``arch`` with ``layers`` decoder layers (None: the arch's
    DEFAULT_LAYERS, else full depth).

    Raises:
        ValueError: unknown arch or flavour, a flavour the arch cannot be served in, or a
            layer count outside 1..full depth.
    """
    check_flavour(arch, flavour)
    cfg = copy.deepcopy(ARCHS[arch])
    full = cfg["num_hidden_layers"]
    n = DEFAULT_LAYERS.get(arch, full) if layers is None else layers
    if not 1 <= n <= full:
        raise ValueError(f"--layers {n}: {arch} has 1..{full} layers")
    cfg["num_hidden_layers"] = n
    if "max_window_layers" in cfg:
        cfg["max_window_layers"] = n
    if "compress_ratios" in cfg:  # the first n layers' entries, then the MTP layer's
        cfg["compress_ratios"] = cfg["compress_ratios"][:n] + cfg["compress_ratios"][-1:]
    if flavour == "fp8static":
        cfg["quantization_config"] = dict(STATIC_FP8)
    elif flavour == "fp8block":
        cfg["quantization_config"] = copy.deepcopy(BLOCK_FP8)
    return cfg


def dir_name(arch: str, flavour: str, layers: int) -> str:
    """e.g. ``qwen3-30b-a3b-fp8static-L48``: arch, flavour and the number of layers."""
    return f"{arch}-{flavour}-L{layers}"


def serve_args(arch: str, flavour: str) -> list[str]:
    """The model's own ``vllm serve`` / engine arguments (recorded in VSERIES_MODEL.json,
    passed by serve.py before its common ones).

    - fp8dyn / fp8static: ``--quantization fp8`` (for fp8static it matches the config's
      quantization_config, as vLLM requires).
    - fp8block (deepseek-v4): no ``--quantization`` (the config's block-FP8 section decides:
      deepseek_v4_fp8); ``--kv-cache-dtype fp8`` (DeepseekV4 attention asserts an fp8 KV
      cache, deepseek_v4_attention.py:697, and turns it into fp8_ds_mla, :705-713; "auto"
      stays bf16 for this config); ``--no-enable-prefix-caching`` (the brief's setting for
      this model; serve.py sets it for every model anyway).
    """
    check_flavour(arch, flavour)
    if flavour == "fp8block":
        return ["--kv-cache-dtype", "fp8", "--no-enable-prefix-caching"]
    return ["--quantization", "fp8"]


def model_env(arch: str) -> dict[str, str]:
    """Environment the servers of ``arch`` need (strings; recorded in VSERIES_MODEL.json,
    applied by serve.py after servers.ENV_ALWAYS and before per-tree settings).

    - qwen3-30b-a3b, mixtral-8x7b: ``VLLM_USE_DEEP_GEMM=0``: on the H200 the kernel warm-up
      asked for DeepGEMM and the engine stopped (../shared/gpu/README.md, "Serving a model").
    - deepseek-v4: ``VLLM_USE_DEEP_GEMM=1`` (its default, set so that no outer setting turns
      it off): the sparse-attention indexer needs DeepGEMM (layers/sparse_attn_indexer.py:
      441-444), and only the DeepGEMM linear kernel gives wo_a the grouped 3-D form that
      fp8_einsum needs (kernels/linear/scaled_mm/deep_gemm.py:103-104); with 0,
      is_deep_gemm_supported() is False (utils/deep_gemm.py:87-92).
      ``VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER=0``: block-FP8 linears use DeepGEMM rather than
      FlashInfer's SM90 block-scale GEMM, which JIT-builds from source (envs.py:1323).
      ``VLLM_USE_FLASHINFER_MOE_FP8=0``: harmless, TRITON is chosen for block FP8 without EP
      anyway. ``VLLM_DEEP_GEMM_WARMUP=full``: DeepGEMM's linear JIT at start-up rather than
      inside the time to first token.
    """
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; known: {', '.join(ARCHS)}")
    if arch == "deepseek-v4":
        return {
            "VLLM_USE_DEEP_GEMM": "1",
            "VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER": "0",
            "VLLM_USE_FLASHINFER_MOE_FP8": "0",
            "VLLM_DEEP_GEMM_WARMUP": "full",
        }
    return {"VLLM_USE_DEEP_GEMM": "0"}


def corpus(seed: int = TOKENIZER_SEED, n_words: int = 40000, n_lines: int = 8000) -> list[str]:
    """Seeded generated text: ~29k distinct syllable words, Zipf-like frequencies, punctuation
    and numbers, 24 words a line. About 0.5 s; the same list for the same seed."""
    rng = random.Random(seed)
    cons, vow = "bcdfghjklmnprstvwz", "aeiou"
    syl = [c + v for c in cons for v in vow] + [
        c + v + c2 for c in cons[:8] for v in vow for c2 in "nrst"
    ]
    words = sorted(
        {"".join(rng.choice(syl) for _ in range(rng.randint(1, 4))) for _ in range(n_words)}
    )
    cum = list(itertools.accumulate(1.0 / (i + 1) ** 0.9 for i in range(len(words))))
    lines = []
    for _ in range(n_lines):
        ws = rng.choices(words, cum_weights=cum, k=24)
        lines.append(" ".join(ws) + rng.choice(".,!?;") + " " + str(rng.randint(0, 9999)))
    return lines


def train_tokenizer(vocab_size: int = TOKENIZER_VOCAB, seed: int = TOKENIZER_SEED) -> str:
    """Train a byte-level BPE on ``corpus(seed)``; returns tokenizer.json text (1-3 s on
    2 cores). Deterministic for a given ``tokenizers`` version."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(seed), trainer=trainer)
    return tok.to_str(pretty=True) + "\n"


def tokenizer_config(cfg: dict) -> dict:
    """tokenizer_config.json: the fast tokenizer class and its special tokens."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "model_max_length": cfg["max_position_embeddings"],
        "clean_up_tokenization_spaces": False,
    }


def _dump(obj) -> str:
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


def _write(path: Path, text: str) -> None:
    """Write only when the bytes differ (re-runs leave files and their times alone)."""
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def write_model(
    out: Path, arch: str, flavour: str, layers: int | None, tokenizer_json: str
) -> Path:
    """Write one model directory under ``out``; returns its path."""
    cfg = model_config(arch, flavour, layers)
    n = cfg["num_hidden_layers"]
    d = out / dir_name(arch, flavour, n)
    d.mkdir(parents=True, exist_ok=True)
    files = {
        "config.json": _dump(cfg),
        "tokenizer.json": tokenizer_json,
        "tokenizer_config.json": _dump(tokenizer_config(cfg)),
    }
    for name, text in files.items():
        _write(d / name, text)
    try:
        import tokenizers

        tok_version = tokenizers.__version__
    except ImportError:  # pragma: no cover - train_tokenizer needed it already
        tok_version = None
    manifest = {
        "arch": arch,
        "flavour": flavour,
        "layers": n,
        "full_layers": ARCHS[arch]["num_hidden_layers"],
        "serve_args": serve_args(arch, flavour),
        "env": model_env(arch),
        "max_model_len": MAX_MODEL_LEN.get(arch),
        "tokenizer": {"vocab": TOKENIZER_VOCAB, "seed": TOKENIZER_SEED, "tokenizers": tok_version},
        "sha256": {k: hashlib.sha256(v.encode()).hexdigest() for k, v in sorted(files.items())},
    }
    _write(d / "VSERIES_MODEL.json", _dump(manifest))
    return d


def read_manifest(model_dir: Path) -> dict:
    """VSERIES_MODEL.json of a directory written by write_model (arch, flavour, layers, ...)."""
    return json.loads((Path(model_dir) / "VSERIES_MODEL.json").read_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", type=Path, required=True, help="folder to write the model dirs into")
    ap.add_argument("--arch", nargs="+", default=list(ARCHS), choices=list(ARCHS))
    ap.add_argument(
        "--flavour",
        nargs="+",
        default=None,
        choices=list(FLAVOURS),
        help="default: every flavour valid for each arch; a named one must be valid for "
        "every arch given",
    )
    ap.add_argument(
        "--layers",
        type=int,
        default=None,
        help=f"decoder layers (default: full depth; deepseek-v4: {DEFAULT_LAYERS['deepseek-v4']})",
    )
    a = ap.parse_args(argv)
    pairs = [(arch, f) for arch in a.arch for f in (a.flavour or ARCH_FLAVOURS[arch])]
    for arch, flavour in pairs:  # every error before the tokenizer is trained
        try:
            check_flavour(arch, flavour)
        except ValueError as e:
            ap.error(str(e))
    tok = train_tokenizer()
    for arch, flavour in pairs:
        print(write_model(a.out, arch, flavour, a.layers, tok), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
