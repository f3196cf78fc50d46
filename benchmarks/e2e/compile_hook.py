"""Log every Triton JIT compile of a process, one JSON line each (installed as sitecustomize).

The runner (serve.py) copies this file as ``sitecustomize.py`` into a folder it puts first on
each vLLM server's PYTHONPATH and sets ``VSERIES_COMPILE_LOG_DIR``; Python then imports it at
start-up in every process of the server (API server, EngineCore, TP workers: vLLM spawns them
with the same environment). Without that variable it does nothing.

Triton 3.6 API (triton/knobs.py ``runtime_knobs``, triton/runtime/jit.py
``JITFunction._do_compile``): on an in-memory kernel-cache miss, ``_do_compile`` calls
``knobs.runtime.jit_cache_hook`` before compiling (a truthy return value would SKIP the
compile, so this hook returns only what a hook it replaced returned) and
``knobs.runtime.jit_post_compile_hook`` after, both with keyword arguments ``key`` (the
specialisation cache key: argument types, specialised integer properties such as ==1 or
divisible by 16, constexpr values, options), ``repr``, ``fn`` (``JitFunctionInfo``: module,
name, jit_function), ``compile`` (signature, constants, num_warps, ...), ``is_manual_warmup``
and ``already_compiled``. A "compile" here is one such miss in this process: a real compile
with a cold Triton disk cache, or a cubin load (milliseconds) when the disk cache has it;
``duration_ms`` tells them apart. Kernels that Inductor generates go through
``triton.compile`` directly, not these hooks. vLLM v0.21.0's ``jit_monitor`` replaces
``jit_post_compile_hook`` after warm-up with one that calls the hook it found, so this one
keeps logging.

Each line (file ``compiles-<pid>.jsonl`` in the folder): ``t`` (Unix time, s, after the
compile), ``pid``, ``rank`` (torch.distributed rank when initialised, else env RANK /
LOCAL_RANK, else null), ``kernel`` (function name), ``module``, ``spec`` (the cache key's
specialisation part, see ``spec``), ``constants`` (constexpr and specialised values), ``num_warps``,
``num_stages``, ``duration_ms`` (pre- to post-hook), ``warmup`` (Triton's manual-warmup flag),
``triton_cache_dir`` (the disk cache folder Triton used for that compile: ``knobs.cache.dir``,
i.e. ``TRITON_CACHE_DIR`` at that moment or Triton's default; vLLM and PyTorch Inductor set
that variable during start-up in some processes and not in others, which decides whether a
later process finds the kernel on disk),
and the forward pass in progress when the compile happened, from vLLM v0.21.0's
``vllm/forward_context.py`` module global ``_forward_context`` (set by
``set_forward_context`` around every model forward, ``_dummy_run`` included):
``fc_num_tokens`` = ``ForwardContext.batch_descriptor.num_tokens`` (the padded token count of
the batch, set by ``GPUModelRunner.execute_model`` from the cudagraph dispatcher),
``fc_num_actual_tokens`` = ``num_actual_tokens`` of the first attention layer's metadata
(``FlashAttentionMetadata.num_actual_tokens``, tokens without padding; only when it is a
Python int), ``fc_cudagraph_mode``; all null when no forward context is set (e.g. a compile
in the sampler, which runs outside it).
"""

import json
import os
import re
import sys
import threading
import time


def _forward_info() -> dict:
    fc = sys.modules.get("vllm.forward_context")
    ctx = getattr(fc, "_forward_context", None) if fc is not None else None
    info = {"fc_num_tokens": None, "fc_num_actual_tokens": None, "fc_cudagraph_mode": None}
    if ctx is None:
        return info
    bd = getattr(ctx, "batch_descriptor", None)
    n = getattr(bd, "num_tokens", None)
    info["fc_num_tokens"] = n if isinstance(n, int) else None
    mode = getattr(ctx, "cudagraph_runtime_mode", None)
    info["fc_cudagraph_mode"] = getattr(mode, "name", None)
    am = getattr(ctx, "attn_metadata", None)
    if isinstance(am, list):
        am = am[0] if am else None
    if isinstance(am, dict) and am:
        n = getattr(next(iter(am.values())), "num_actual_tokens", None)
        info["fc_num_actual_tokens"] = n if isinstance(n, int) else None
    return info


def _rank():
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist.get_rank()
    except Exception:
        pass
    for var in ("RANK", "LOCAL_RANK"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return None


def _plain(v):
    """JSON-safe form of a constexpr value (dtypes and other objects as str)."""
    if v is None or isinstance(v, bool | int | float | str):
        return v
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    return str(v)


def spec(key) -> str:
    """The specialisation part of Triton's cache key (argument types, specialised integer
    properties, constexpr values), without the compile options it ends with (``key =
    str(specialization) + str(options)``, triton/runtime/jit.py ``compute_cache_key``;
    Triton 3.8 passes the hooks a tuple whose first item is that string); at most 2000
    characters."""
    key = str(key[0] if isinstance(key, tuple) and key else key)
    m = re.search(r"[A-Za-z]+Options\(", key)
    return (key[: m.start()] if m else key)[:2000]


def make_hooks(path: str, prev_pre=None, prev_post=None):
    """(pre, post) hooks that append one JSON line per compile to ``path``."""
    pending: dict = {}
    lock = threading.Lock()

    def _cache_dir():
        try:
            from triton import knobs

            return str(knobs.cache.dir)
        except Exception:  # another Triton: the variable, if any
            return os.environ.get("TRITON_CACHE_DIR")

    def pre(**kw):
        fn = kw.get("fn")
        pending[(id(getattr(fn, "jit_function", fn)), str(kw.get("key")))] = time.perf_counter()
        return prev_pre(**kw) if prev_pre is not None else None

    def post(**kw):
        t1 = time.perf_counter()
        try:
            fn = kw.get("fn")
            t0 = pending.pop((id(getattr(fn, "jit_function", fn)), str(kw.get("key"))), None)
            comp = kw.get("compile") or {}
            consts = comp.get("constants") or {}
            rec = {
                "t": time.time(),
                "pid": os.getpid(),
                "rank": _rank(),
                "kernel": getattr(fn, "name", None),
                "module": getattr(fn, "module", None),
                "spec": spec(kw.get("key")),
                "constants": {str(k): _plain(v) for k, v in consts.items()},
                "num_warps": comp.get("num_warps"),
                "num_stages": comp.get("num_stages"),
                "duration_ms": None if t0 is None else round((t1 - t0) * 1e3, 3),
                "warmup": bool(kw.get("is_manual_warmup")),
                "triton_cache_dir": _cache_dir(),
                **_forward_info(),
            }
            with lock, open(path, "a") as f:
                f.write(json.dumps(rec) + "\n")
        except Exception as e:  # never break a compile because of the log
            with lock, open(path, "a") as f:
                f.write(
                    json.dumps({"t": time.time(), "pid": os.getpid(), "hook_error": repr(e)}) + "\n"
                )
        return prev_post(**kw) if prev_post is not None else None

    return pre, post


def install(log_dir: str) -> None:
    """Register the hooks in Triton's runtime knobs, chaining any hooks already set."""
    path = os.path.join(log_dir, f"compiles-{os.getpid()}.jsonl")
    try:
        from triton import knobs

        rt = knobs.runtime
        rt.jit_cache_hook, rt.jit_post_compile_hook = make_hooks(
            path, rt.jit_cache_hook, rt.jit_post_compile_hook
        )
    except Exception as e:  # say so in the log the runner reads
        os.makedirs(log_dir, exist_ok=True)
        with open(path, "a") as f:
            f.write(
                json.dumps({"t": time.time(), "pid": os.getpid(), "hook_error": repr(e)}) + "\n"
            )


if os.environ.get("VSERIES_COMPILE_LOG_DIR") and __name__ == "sitecustomize":
    install(os.environ["VSERIES_COMPILE_LOG_DIR"])
