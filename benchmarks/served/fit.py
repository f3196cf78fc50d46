"""Which engine processes of a served wave fit on the GPU together.

A process's footprint: its model's weights at its depth (per-tensor FP8 linear layers, bf16
embeddings, router and norms), its KV cache, and an allowance for the CUDA context,
activations, CUDA graphs and the compile workspace (``OVERHEAD_GIB``; on the H200 a 24-layer
Qwen3-30B-A3B-shaped engine ran in 20 GiB). A wave whose processes do not fit together runs
in parts of equal length, in the order given, each a wave of its own (``3a``, ``3b``, ...):
processes are only compared inside a wave, so a wave lists its processes in pairs.

    python -m benchmarks.served.fit --gpu-mib 81559 --kv-gib 2 3 bd4:base:fp8dyn ...

prints one line per part: its wave name, then its specs (``served.sh`` reads them), and on
stderr why the wave was split. A spec is
``name:tree:flavour[:trace[:backend[:layers[:arch]]]]`` (arch: a record of
``benchmarks/shapes.py``, ``--arch`` where a spec names none).
"""

from __future__ import annotations

import argparse
import math
import sys

from benchmarks.e2e import models

OVERHEAD_GIB = 3.0
USABLE = 0.92  # of the GPU's memory: the other processes' contexts, fragmentation
DEFAULT_LAYERS = 24  # a spec's depth, and the engine's, when none is given


def weights_gib(cfg: dict) -> float:
    """The model's weights (GiB) as vLLM loads it with ``--quantization fp8``: FP8 linear
    layers (experts, attention projections), bf16 embeddings, LM head and router. MLA
    attention is counted as its GQA equivalent (an estimate, within a few percent)."""
    h, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    experts = cfg.get("num_experts") or cfg.get("n_routed_experts") or cfg.get("num_local_experts")
    inter = cfg.get("moe_intermediate_size") or cfg["intermediate_size"]
    heads = cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or h // heads
    kv_heads = cfg.get("num_key_value_heads") or heads
    attn = h * head_dim * (2 * heads + 2 * kv_heads)  # q, o, k, v (FP8: one byte each)
    moe = (experts + (cfg.get("n_shared_experts") or 0)) * 3 * h * inter
    router = 2 * h * experts
    embed = 2 * 2 * cfg["vocab_size"] * h  # embeddings and LM head, bf16
    return (layers * (attn + moe + router) + embed) / 2**30


def footprint_gib(arch: str, flavour: str, layers: int, kv_gib: float) -> float:
    return weights_gib(models.model_config(arch, flavour, layers)) + kv_gib + OVERHEAD_GIB


def spec_layers(spec: str) -> int:
    fields = spec.split(":")
    return int(fields[5]) if len(fields) > 5 and fields[5] else DEFAULT_LAYERS


def spec_arch(spec: str, arch: str) -> str:
    """The spec's model (its seventh field), else ``arch``."""
    fields = spec.split(":")
    return fields[6] if len(fields) > 6 and fields[6] else arch


def spec_need(spec: str, kv_gib: float, arch: str) -> float:
    """The footprint of one spec; a spec that names no flavour, a model, flavour or depth
    that is not served, or a depth that is not a number stops with what is wrong."""
    fields = spec.split(":")
    try:
        if len(fields) < 3 or not all(fields[:3]) or len(fields) > 7:
            raise ValueError("expected name:tree:flavour[:trace[:backend[:layers[:arch]]]]")
        return footprint_gib(spec_arch(spec, arch), fields[2], spec_layers(spec), kv_gib)
    except ValueError as exc:
        raise SystemExit(f"fit: spec {spec!r}: {exc}") from None


def parts(specs: list[str], gpu_gib: float, kv_gib: float, arch: str) -> list[list[str]]:
    """The specs in order, in the fewest parts of equal length (the last may be shorter) of
    which each fits: a wave ordered in pairs (base, series, base, series) keeps its pairs
    together when it halves."""
    need = [spec_need(s, kv_gib, arch) for s in specs]
    for spec, n in zip(specs, need, strict=True):
        if n > gpu_gib:
            raise SystemExit(
                f"fit: {spec} needs about {n:.0f} GiB, the GPU has {gpu_gib:.0f} GiB: "
                "fewer layers (the spec's sixth field) or a GPU with more memory"
            )
    for k in range(1, len(specs) + 1):
        size = -(-len(specs) // k)
        cuts = [(i, i + size) for i in range(0, len(specs), size)]
        if all(sum(need[a:b]) <= gpu_gib for a, b in cuts):
            return [specs[a:b] for a, b in cuts]
    raise AssertionError("unreachable: one spec per part always fits")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu-mib", type=float, required=True, help="the GPU's memory (nvidia-smi)")
    ap.add_argument("--kv-gib", type=float, default=2.0)
    ap.add_argument("--arch", default="qwen3-30b-a3b")
    ap.add_argument("wave")
    ap.add_argument("specs", nargs="+")
    a = ap.parse_args(argv)
    if not (math.isfinite(a.gpu_mib) and a.gpu_mib > 0):
        ap.error(f"--gpu-mib {a.gpu_mib}: the GPU's memory in MiB, a positive number")
    if not (math.isfinite(a.kv_gib) and a.kv_gib >= 0):
        ap.error(f"--kv-gib {a.kv_gib}: an engine's KV cache in GiB, 0 or more")
    gpu_gib = USABLE * a.gpu_mib / 1024
    cut = parts(a.specs, gpu_gib, a.kv_gib, a.arch)
    if len(cut) > 1:
        need = sum(spec_need(s, a.kv_gib, a.arch) for s in a.specs)
        print(
            f"fit: wave {a.wave} needs about {need:.0f} GiB together, {gpu_gib:.0f} GiB of the "
            f"GPU's are usable: it runs in {len(cut)} parts",
            file=sys.stderr,
        )
    for i, part in enumerate(cut):
        name = a.wave if len(cut) == 1 else f"{a.wave}{chr(ord('a') + i)}"
        print(name, *part)
    return 0


if __name__ == "__main__":
    sys.exit(main())
