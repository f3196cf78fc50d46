"""Model directories for the end-to-end runs, written locally: no download, deterministic.

    python -m benchmarks.e2e.models --out DIR [--arch NAME ...] [--flavour fp8dyn fp8static
        fp8block] [--layers N]

``--arch`` takes the served records of ``benchmarks/shapes.py`` (``SERVED``: those with a
``config``; ``--help`` lists them), all of them by default.

Each directory holds the model's public Hugging Face ``config.json`` (its record in
``benchmarks/shapes.py``; depth reduced with ``--layers``), a BPE tokenizer trained here with
the ``tokenizers`` library on seeded generated text (``tokenizer.json`` +
``tokenizer_config.json`` naming ``PreTrainedTokenizerFast``), and ``VSERIES_MODEL.json``
(what it is, how to serve it: the engine arguments, the environment and the --max-model-len
floor the model needs, file digests). vLLM serves it with ``--load-format dummy`` (random
weights), so the weights are never needed. Without ``--flavour``, each arch gets every flavour
valid for it (its record's ``flavours``). The flavours (``FLAVOURS``):

- ``fp8dyn``: no ``quantization_config``; served with ``--quantization fp8``: vLLM quantises
  the bf16 dummy weights online to per-tensor FP8 with dynamic per-tensor activation scales.
- ``fp8static``: ``config.json`` carries ``{"quant_method": "fp8", "activation_scheme":
  "static"}``: vLLM creates serialized per-tensor FP8 weights with static input scales (the
  case whose MoE backend patch 2 changes on Hopper: FLASHINFER_CUTLASS on v0.21.0, TRITON with
  the series).
- ``fp8block`` (DeepSeek-V4's): ``quantization_config`` = 128x128 block FP8 weights, dynamic
  activations, ``scale_fmt`` ue8m0, with ``expert_dtype`` "fp8" (see the record); vLLM
  rewrites ``quant_method`` fp8 to ``deepseek_v4_fp8`` for this model type.

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
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from benchmarks import shapes

# The patch that makes TRITON the per-tensor FP8 MoE backend on SM90 (patch 2 of the v0.21.0
# line, whose logs the harness reads: logparse.LOG_FORMATS): a tree with fewer patches picks
# its flavour's ``backend_before``.
ORACLE_PATCH = 2


@dataclass(frozen=True)
class Flavour:
    """How a model's weights are quantised: the config's ``quantization_config`` (None: none),
    the engine arguments it is served with (recorded in VSERIES_MODEL.json, passed by the
    runner before its common ones), and the MoE backend vLLM picks for it on SM90 without EP
    in a tree without the oracle patch (with it: TRITON)."""

    name: str
    quantization_config: Mapping | None
    serve_args: tuple[str, ...]
    backend_before: str = "TRITON"

    def backend(self, patches: int | None) -> str:
        """The MoE backend a tree carrying ``patches`` patches logs (None: all of them)."""
        return self.backend_before if patches is not None and patches < ORACLE_PATCH else "TRITON"


FLAVOURS = {
    f.name: f
    for f in (
        # --quantization fp8: for fp8static it matches the config's quantization_config, as
        # vLLM requires
        Flavour("fp8dyn", None, ("--quantization", "fp8")),
        Flavour(
            "fp8static",
            {"quant_method": "fp8", "activation_scheme": "static"},
            ("--quantization", "fp8"),
            backend_before="FLASHINFER_CUTLASS",
        ),
        # V4-Flash's quantization_config (block 128x128, e4m3, dynamic activations, ue8m0
        # scales; scale_fmt ue8m0 also sets VLLM_USE_DEEP_GEMM_E8M0=1:
        # transformers_utils/config.py:793-805). No --quantization (the config's block-FP8
        # section decides: deepseek_v4_fp8); --kv-cache-dtype fp8 (DeepseekV4 attention
        # asserts an fp8 KV cache, deepseek_v4_attention.py:697, and turns it into
        # fp8_ds_mla, :705-713; "auto" stays bf16 for this config); no prefix caching (the
        # runner turns it off for every model anyway).
        Flavour(
            "fp8block",
            {
                "quant_method": "fp8",
                "fmt": "e4m3",
                "activation_scheme": "dynamic",
                "weight_block_size": [128, 128],
                "scale_fmt": "ue8m0",
            },
            ("--kv-cache-dtype", "fp8", "--no-enable-prefix-caching"),
        ),
    )
}
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>"]
TOKENIZER_VOCAB = 32000
TOKENIZER_SEED = 0


def check_flavour(arch: str, flavour: str) -> shapes.ModelShape:
    """The record of ``arch``, once the pair is servable (its ``flavours``).

    Raises:
        ValueError: an unknown arch or flavour, or a flavour the arch is not served in,
            naming the ones it has and why.
    """
    shape = shapes.get(arch, served=True)
    if flavour not in FLAVOURS:
        raise ValueError(f"unknown flavour {flavour!r}; known: {', '.join(FLAVOURS)}")
    if flavour not in shape.flavours:
        raise ValueError(
            f"flavour {flavour!r} is not valid for {arch}: {shape.why_flavours}; "
            f"valid: {', '.join(shape.flavours)}"
        )
    return shape


def model_config(arch: str, flavour: str, layers: int | None = None) -> dict:
    """The config.json dict of ``arch`` with ``layers`` decoder layers (None: the record's
    ``default_layers``, else full depth).

    Raises:
        ValueError: unknown arch or flavour, a flavour the arch cannot be served in, or a
            layer count outside 1..full depth.
    """
    shape = check_flavour(arch, flavour)
    cfg = copy.deepcopy(dict(shape.config))
    full = cfg["num_hidden_layers"]
    n = (shape.default_layers or full) if layers is None else layers
    if not 1 <= n <= full:
        raise ValueError(f"--layers {n}: {arch} has 1..{full} layers")
    cfg["num_hidden_layers"] = n
    if "max_window_layers" in cfg:
        cfg["max_window_layers"] = n
    if "compress_ratios" in cfg:  # the first n layers' entries, then the MTP layer's
        cfg["compress_ratios"] = cfg["compress_ratios"][:n] + cfg["compress_ratios"][-1:]
    quant = FLAVOURS[flavour].quantization_config
    if quant is not None:
        cfg["quantization_config"] = copy.deepcopy(dict(quant))
    return cfg


def dir_name(arch: str, flavour: str, layers: int) -> str:
    """e.g. ``qwen3-30b-a3b-fp8static-L48``: arch, flavour and the number of layers."""
    return f"{arch}-{flavour}-L{layers}"


def serve_args(arch: str, flavour: str) -> list[str]:
    """The model's own ``vllm serve`` / engine arguments: its flavour's (``FLAVOURS``)."""
    check_flavour(arch, flavour)
    return list(FLAVOURS[flavour].serve_args)


def model_env(arch: str) -> dict[str, str]:
    """Environment the servers of ``arch`` need (its record's ``env`` in benchmarks/shapes.py,
    which says why; recorded in VSERIES_MODEL.json, applied by the runner after
    servers.ENV_ALWAYS and before per-tree settings).

    Raises:
        ValueError: an arch without a record.
    """
    return dict(shapes.get(arch, served=True).env)


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
    shape = shapes.get(arch, served=True)
    manifest = {
        "arch": arch,
        "flavour": flavour,
        "layers": n,
        "full_layers": shape.config["num_hidden_layers"],
        "serve_args": serve_args(arch, flavour),
        "env": model_env(arch),
        "max_model_len": shape.max_model_len,
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
    ap.add_argument("--arch", nargs="+", default=list(shapes.SERVED), choices=list(shapes.SERVED))
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
        help="decoder layers (default: full depth, or the record's default_layers: "
        + ", ".join(
            f"{s.name} {s.default_layers}" for s in shapes.SERVED.values() if s.default_layers
        )
        + ")",
    )
    a = ap.parse_args(argv)
    pairs = [(arch, f) for arch in a.arch for f in (a.flavour or shapes.SERVED[arch].flavours)]
    for arch, flavour in pairs:  # every error (a depth too, for each arch) before any write
        try:
            model_config(arch, flavour, a.layers)
        except ValueError as e:
            ap.error(str(e))
    tok = train_tokenizer()
    for arch, flavour in pairs:
        print(write_model(a.out, arch, flavour, a.layers, tok), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
