"""Model directories for the end-to-end runs, written locally: no download, deterministic.

    python3 benchmarks/e2e/models.py --out DIR [--arch qwen3-30b-a3b mixtral-8x7b]
        [--flavour fp8dyn fp8static] [--layers N]

Each directory holds the model's public Hugging Face ``config.json`` (depth reduced with
``--layers``), a BPE tokenizer trained here with the ``tokenizers`` library on seeded
generated text (``tokenizer.json`` + ``tokenizer_config.json`` naming
``PreTrainedTokenizerFast``), and ``VSERIES_MODEL.json`` (what it is, how to serve it, file
digests). vLLM serves it with ``--load-format dummy`` (random weights), so the weights are
never needed. Two FP8 flavours:

- ``fp8dyn``: no ``quantization_config``; served with ``--quantization fp8``: vLLM quantises
  the bf16 dummy weights online to per-tensor FP8 with dynamic per-tensor activation scales.
- ``fp8static``: ``config.json`` carries ``{"quant_method": "fp8", "activation_scheme":
  "static"}``: vLLM creates serialized per-tensor FP8 weights with static input scales (the
  case whose MoE backend patch 2 changes on Hopper: FLASHINFER_CUTLASS on v0.21.0, TRITON with
  the series).

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

ARCHS = {"qwen3-30b-a3b": QWEN3_30B_A3B, "mixtral-8x7b": MIXTRAL_8X7B}
FLAVOURS = ("fp8dyn", "fp8static")
STATIC_FP8 = {"quant_method": "fp8", "activation_scheme": "static"}
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>"]
TOKENIZER_VOCAB = 32000
TOKENIZER_SEED = 0


def model_config(arch: str, flavour: str, layers: int | None = None) -> dict:
    """The config.json dict of ``arch`` with ``layers`` decoder layers (None: full depth)."""
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; known: {', '.join(ARCHS)}")
    if flavour not in FLAVOURS:
        raise ValueError(f"unknown flavour {flavour!r}; known: {', '.join(FLAVOURS)}")
    cfg = copy.deepcopy(ARCHS[arch])
    full = cfg["num_hidden_layers"]
    n = full if layers is None else layers
    if not 1 <= n <= full:
        raise ValueError(f"--layers {n}: {arch} has 1..{full} layers")
    cfg["num_hidden_layers"] = n
    if "max_window_layers" in cfg:
        cfg["max_window_layers"] = n
    if flavour == "fp8static":
        cfg["quantization_config"] = dict(STATIC_FP8)
    return cfg


def dir_name(arch: str, flavour: str, layers: int) -> str:
    """e.g. ``qwen3-30b-a3b-fp8static-L48``: arch, flavour and the number of layers."""
    return f"{arch}-{flavour}-L{layers}"


def serve_args(flavour: str) -> list[str]:
    """The quantisation arguments vLLM gets for this flavour (both: ``--quantization fp8``;
    for fp8static it matches the config's quantization_config, as vLLM requires)."""
    return ["--quantization", "fp8"]


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
        "serve_args": serve_args(flavour),
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
    ap.add_argument("--flavour", nargs="+", default=list(FLAVOURS), choices=list(FLAVOURS))
    ap.add_argument("--layers", type=int, default=None, help="decoder layers (default: full depth)")
    a = ap.parse_args(argv)
    tok = train_tokenizer()
    for arch in a.arch:
        for flavour in a.flavour:
            print(write_model(a.out, arch, flavour, a.layers, tok), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
