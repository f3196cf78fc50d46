"""The memory plan of the servers that share the GPUs: KV-cache bytes, GPU groups, and
whether the weights, KV cache and overhead of every server fit.

Several servers (one per tree) share one GPU. vLLM v0.21.0 checks at worker start that the
free memory is at least ``--gpu-memory-utilization`` x total (vllm/v1/worker/utils.py
``request_memory``), and without ``--kv-cache-memory-bytes`` it profiles and asserts that
the free memory did not grow meanwhile (vllm/v1/worker/gpu_worker.py
``determine_available_memory``), which another server starting or stopping breaks. So every
server gets ``--kv-cache-memory-bytes`` (profiling and that assertion are skipped; the KV cache
is exactly that size) and a ``--gpu-memory-utilization`` share of 0.9 / servers per GPU,
which passes the free-memory check whatever the others have loaded as long as the memory
plan holds (each server's weights + KV + overhead <= its share). The weights' bytes are the
model record's (``benchmarks/shapes.py`` ``weight_bytes``).
"""

import math

from benchmarks import gpu

GIB = 1 << 30
OVERHEAD_BYTES = 6 * GIB  # activations, CUDA graphs, CUDA context, workspaces (a guess)


def kv_bytes_per_token(cfg: dict, tp: int = 1) -> int:
    """bf16 KV cache bytes per token on one GPU (K and V, every layer, kv heads / tp). For
    DeepSeek-V4 (1 latent head of 512, fp8_ds_mla: 656 bytes a token in a full layer, less in
    compressed ones) this is a generous bound of 2048 bytes a token a layer."""
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    kv = max(1, cfg["num_key_value_heads"] // tp)
    return cfg["num_hidden_layers"] * 2 * kv * hd * 2


def kv_cache_bytes(cfg: dict, tokens: int, tp: int = 1) -> int:
    """--kv-cache-memory-bytes for ``tokens`` tokens, rounded up to 256 MiB."""
    step = 256 << 20
    return int(math.ceil(kv_bytes_per_token(cfg, tp) * tokens / step) * step)


def assign_gpus(n_servers: int, tp: int, gpus: list[str]) -> list[list[str]]:
    """The GPUs of each server: disjoint groups of ``tp`` while there are enough, else
    servers share groups round-robin.

    Raises:
        ValueError: fewer GPUs than ``tp``.
    """
    if len(gpus) < tp:
        raise ValueError(f"--tensor-parallel-size {tp} needs {tp} GPUs, have {gpus}")
    groups = len(gpus) // tp
    return [gpus[(i % groups) * tp : (i % groups) * tp + tp] for i in range(n_servers)]


def memory_plan(
    weights: int,
    n_servers: int,
    tp: int,
    gpus: list[str],
    kv_bytes: int,
    total_bytes: int = gpu.H200_BYTES,
) -> dict:
    """Per-GPU memory plan of ``n_servers`` concurrent servers of a model whose weights take
    ``weights`` bytes (its record's ``weight_bytes``; bytes, GiB in the printout).

    Returns: ``servers_per_gpu``, ``per_server_bytes`` (weights / tp + KV + overhead on one
    GPU), ``share`` (the --gpu-memory-utilization of each server), ``fits`` (the servers on
    one GPU need at most 0.9 x its memory), and ``text`` (one line for the log).
    """
    groups = max(1, len(gpus) // tp)
    per_gpu = math.ceil(n_servers / groups)
    per = weights // tp + kv_bytes + OVERHEAD_BYTES
    share = math.floor(0.9 / per_gpu * 100) / 100
    fits = per * per_gpu <= 0.9 * total_bytes
    text = (
        f"memory plan: {per_gpu} server(s) per GPU x ({weights / tp / GIB:.1f} GiB "
        f"weights + {kv_bytes / GIB:.1f} GiB KV + {OVERHEAD_BYTES / GIB:.0f} GiB overhead) = "
        f"{per * per_gpu / GIB:.1f} of {total_bytes / GIB:.1f} GiB; "
        f"--gpu-memory-utilization {share:.2f} each; {'fits' if fits else 'DOES NOT FIT'}"
    )
    return {
        "servers_per_gpu": per_gpu,
        "per_server_bytes": per,
        "share": share,
        "fits": fits,
        "text": text,
    }
