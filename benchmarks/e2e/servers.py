"""vLLM servers for the runner: memory plan, command line, environment, start, ready, stop.

Several servers (one per tree) share one GPU. vLLM v0.21.0 checks at worker start that the
free memory is at least ``--gpu-memory-utilization`` x total (vllm/v1/worker/utils.py
``request_memory``), and without ``--kv-cache-memory-bytes`` it profiles and asserts that
the free memory did not grow meanwhile (vllm/v1/worker/gpu_worker.py
``determine_available_memory``), which another server starting or stopping breaks. So every
server gets ``--kv-cache-memory-bytes`` (profiling and that assertion are skipped; the KV cache
is exactly that size) and a ``--gpu-memory-utilization`` share of 0.9 / servers per GPU,
which passes the free-memory check whatever the others have loaded as long as the memory
plan holds (each server's weights + KV + overhead <= its share).
"""

import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from benchmarks import gpu

GIB = 1 << 30
OVERHEAD_BYTES = 6 * GIB  # activations, CUDA graphs, CUDA context, workspaces (a guess)
# Every server, whatever the model. Model-specific settings (VLLM_USE_DEEP_GEMM: 0 for the
# per-tensor models, 1 for deepseek-v4) come from models.model_env via VSERIES_MODEL.json.
ENV_ALWAYS = {
    "NCCL_NVLS_ENABLE": "0",  # NVLink multicast off (device notes)
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "HF_HUB_OFFLINE": "1",  # no network on the host: never wait on the hub
    "TRANSFORMERS_OFFLINE": "1",
    "NO_COLOR": "1",  # plain log lines for logparse
    "VLLM_LOGGING_COLOR": "0",
    "PYTHONUNBUFFERED": "1",
}


def weight_bytes(cfg: dict) -> int:
    """Device bytes of the weights of a Qwen3-MoE / Mixtral config served as per-tensor FP8:
    linear and expert weights 1 byte per parameter, embeddings, LM head and router in bf16.
    DeepSeek-V4 configs: ``weight_bytes_deepseek_v4``."""
    if cfg.get("model_type") == "deepseek_v4":
        return weight_bytes_deepseek_v4(cfg)
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


def weight_bytes_deepseek_v4(cfg: dict) -> int:
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
    cfg: dict,
    n_servers: int,
    tp: int,
    gpus: list[str],
    kv_bytes: int,
    total_bytes: int = gpu.H200_BYTES,
) -> dict:
    """Per-GPU memory plan of ``n_servers`` concurrent servers (bytes, GiB in the printout).

    Returns: ``servers_per_gpu``, ``per_server_bytes`` (weights / tp + KV + overhead on one
    GPU), ``share`` (the --gpu-memory-utilization of each server), ``fits`` (the servers on
    one GPU need at most 0.9 x its memory), and ``text`` (one line for the log).
    """
    groups = max(1, len(gpus) // tp)
    per_gpu = math.ceil(n_servers / groups)
    per = weight_bytes(cfg) // tp + kv_bytes + OVERHEAD_BYTES
    share = math.floor(0.9 / per_gpu * 100) / 100
    fits = per * per_gpu <= 0.9 * total_bytes
    text = (
        f"memory plan: {per_gpu} server(s) per GPU x ({weight_bytes(cfg) / tp / GIB:.1f} GiB "
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


def server_command(
    python: str,
    model_dir: Path,
    port: int,
    *,
    quant_args: list[str],
    max_model_len: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    share: float,
    kv_bytes: int,
    tp: int,
    capture_sizes: list[int] | None,
    extra: list[str] = (),
) -> list[str]:
    """``vllm serve`` (through ``python3 -m vllm.entrypoints.cli.main``) on 127.0.0.1.
    ``quant_args`` are the model's own arguments (VSERIES_MODEL.json ``serve_args``: the
    quantisation, and for deepseek-v4 the KV-cache dtype); prefix caching is always off."""
    cmd = [
        python, "-m", "vllm.entrypoints.cli.main", "serve", str(model_dir),
        "--host", "127.0.0.1", "--port", str(port),
        "--load-format", "dummy", *quant_args,
        "--max-model-len", str(max_model_len),
        "--max-num-seqs", str(max_num_seqs),
        "--max-num-batched-tokens", str(max_num_batched_tokens),
        "--gpu-memory-utilization", f"{share:.2f}",
        "--kv-cache-memory-bytes", str(kv_bytes),
        "--tensor-parallel-size", str(tp),
        "--seed", "0",
        *([] if "--no-enable-prefix-caching" in quant_args else ["--no-enable-prefix-caching"]),
        "--disable-uvicorn-access-log",
    ]  # fmt: skip
    if capture_sizes:
        cmd += ["--compilation-config", json.dumps({"cudagraph_capture_sizes": capture_sizes})]
    return cmd + list(extra)


def server_env(
    base: dict,
    *,
    pythonpath: list[str],
    compile_dir: Path | None,
    gpus: list[str] | None,
    extra: dict | None = None,
    model_env: dict | None = None,
) -> dict:
    """The environment of one server: ``pythonpath`` first (the hook folder, /root/site, the
    tree), the settings in ENV_ALWAYS, then ``model_env`` (the model's own, from
    VSERIES_MODEL.json, e.g. VLLM_USE_DEEP_GEMM), the compile-log folder,
    CUDA_VISIBLE_DEVICES when ``gpus`` is given, then ``extra`` (the caller's per-tree
    variables) last."""
    env = dict(base)
    env["PYTHONPATH"] = ":".join(str(p) for p in pythonpath if p)
    env.update(ENV_ALWAYS)
    env.update(model_env or {})
    if compile_dir is not None:
        env["VSERIES_COMPILE_LOG_DIR"] = str(compile_dir)
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    env.update(extra or {})
    return env


def free_port(preferred: int, taken: set[int] = frozenset()) -> int:
    """``preferred`` when nothing listens there (a server left over from a killed call would),
    else a free port from the OS."""
    for port in (preferred, 0):
        if port in taken:
            continue
        with socket.socket() as sock:
            # as uvicorn binds: a port in TIME_WAIT after the last process is free
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return sock.getsockname()[1]
    raise OSError("no free port")


def health(port: int, timeout: float = 2.0) -> bool:
    """True when GET /health on 127.0.0.1:port answers 200."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=timeout) as r:
            return r.status == 200
    except OSError:
        return False


class Server:
    """One ``vllm serve`` process group: spawned in its own session, so stop() ends the API
    server, EngineCore and any TP workers (all started by it) and nothing else."""

    def __init__(self, tree: str, port: int, cmd: list[str], env: dict, work: Path):
        self.tree, self.port, self.cmd, self.env, self.work = tree, port, cmd, env, work
        self.proc: subprocess.Popen | None = None
        self.t_spawn: float | None = None  # Unix time (s)
        self.t_ready: float | None = None
        self.log_path = work / "server.log"
        self.compile_dir = work / "compiles"

    def start(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        self.compile_dir.mkdir(exist_ok=True)
        (self.work / "command.json").write_text(
            json.dumps(
                {
                    "cmd": self.cmd,
                    "env": {
                        k: v
                        for k, v in self.env.items()
                        if k in ENV_ALWAYS
                        or k.startswith(
                            (
                                "VLLM",
                                "CUDA",
                                "PYTHONPATH",
                                "VSERIES",
                                "TRITON",
                                "FLASHINFER",
                                "NCCL",
                            )
                        )
                    },
                },
                indent=1,
            )
        )
        self.t_spawn = time.time()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.cmd,
                env=self.env,
                cwd=self.work,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def exited(self) -> int | None:
        """The exit code when the server process has ended, else None."""
        return None if self.proc is None else self.proc.poll()

    def check_ready(self) -> bool:
        """Poll /health once; records t_ready the first time it answers."""
        if self.t_ready is None and self.exited() is None and health(self.port):
            self.t_ready = time.time()
        return self.t_ready is not None

    def startup_s(self) -> float | None:
        """Spawn to first healthy answer (s)."""
        return None if self.t_ready is None else round(self.t_ready - self.t_spawn, 2)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM the process group, SIGKILL it when still alive after ``grace_s`` s."""
        if self.proc is None:
            return
        _signal_group(self.proc.pid, signal.SIGTERM)
        if not _wait_group(self.proc, grace_s):
            _signal_group(self.proc.pid, signal.SIGKILL)
            _wait_group(self.proc, 10.0)


def stop_all(group: list[Server], grace_s: float = 20.0) -> None:
    """Stop several servers at once: SIGTERM to every group, then wait, SIGKILL what is left."""
    for s in group:
        if s.proc is not None:
            _signal_group(s.proc.pid, signal.SIGTERM)
    deadline = time.time() + grace_s
    for s in group:
        if s.proc is None:
            continue
        if not _wait_group(s.proc, max(0.5, deadline - time.time())):
            _signal_group(s.proc.pid, signal.SIGKILL)
            _wait_group(s.proc, 10.0)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _wait_group(proc: subprocess.Popen, timeout: float) -> bool:
    """Reap the leader and wait until no live (non-zombie) process of its group is left;
    True when done."""
    deadline = time.time() + timeout
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    while time.time() < deadline:
        if not group_alive(proc.pid):
            return True
        time.sleep(0.2)
    return False


def group_alive(pgid: int) -> bool:
    """True while a process of group ``pgid`` runs. Zombies do not count: orphans whose
    reaper is slow (or absent, in some containers) would otherwise look alive forever."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        entries = None
    if entries is None:
        try:
            os.killpg(pgid, 0)
            return True
        except ProcessLookupError:
            return False
    for e in entries:
        if not e.isdigit():
            continue
        try:
            with open(f"/proc/{e}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # after "pid (comm)": state, ppid, pgrp
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False
