"""Read a vLLM v0.21.0 server (or ``vllm bench throughput``) log: start-up phases, the MoE
backend, JIT-compile warnings, errors.

Lines look like ``(EngineCore_DP0 pid=4242) INFO 12-01 10:11:12 [fp8.py:327] <message>``
(the ``(name pid=N)`` prefix on child processes, vllm/utils/system_utils.py ``_add_prefix``;
level, ``%m-%d %H:%M:%S`` time and ``[file:line]`` from vllm/logger.py ``_FORMAT``). Messages
are matched anywhere in a line, so a prefix or colour codes do not matter. Every pattern below
names the v0.21.0 source that logs it; tests/workspace/test_e2e_harness.py checks that each
template is still in that source.
"""

import re
from datetime import datetime

# The release whose log formats this module reads (the v0.21.0 line; v0.34.0 logs other
# messages from other files: not parsed yet). The template test checks them in that source.
LOG_FORMATS = "v0.21.0"

ANSI = re.compile(r"\x1b\[[0-9;]*m")
HEADER = re.compile(
    r"(?:\((?P<proc>[^()]*?) pid=(?P<pid>\d+)\)\s+)?"
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<ts>\d\d-\d\d \d\d:\d\d:\d\d)"
)

# name -> (regex, source that logs it); the groups become floats, named by _GROUPS.
PHASES = {
    # vllm/model_executor/model_loader/default_loader.py (not logged by the dummy loader)
    "weights_load_s": (re.compile(r"Loading weights took ([\d.]+) seconds"), "default_loader.py"),
    # vllm/v1/worker/gpu_model_runner.py load_model
    "model_load": (
        re.compile(r"Model loading took ([\d.]+) GiB memory and ([\d.]+) seconds"),
        "gpu_model_runner.py",
    ),
    # vllm/compilation/backends.py
    "dynamo_s": (re.compile(r"Dynamo bytecode transform time: ([\d.]+) s"), "backends.py"),
    # vllm/compilation/backends.py (one line per compile range; summed)
    "compile_range_s": (
        re.compile(r"Compiling a graph for compile range (.*?) takes ([\d.]+) s"),
        "backends.py",
    ),
    # vllm/compilation/monitor.py
    "torch_compile_s": (re.compile(r"torch\.compile took ([\d.]+) s in total"), "monitor.py"),
    # vllm/v1/worker/gpu_model_runner.py capture_model
    "graph_capture": (
        re.compile(r"Graph capturing finished in ([\d.]+) secs, took ([\d.]+) GiB"),
        "gpu_model_runner.py",
    ),
    # vllm/v1/engine/core.py _initialize_kv_caches
    "init_engine_s": (
        re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s"),
        "core.py",
    ),
    # vllm/v1/core/kv_cache_utils.py
    "kv_cache_tokens": (re.compile(r"GPU KV cache size: ([\d,]+) tokens"), "kv_cache_utils.py"),
    # not in v0.21.0: the series' patch 0004 (vllm/model_executor/warmup/kernel_warmup.py)
    "moe_warmup": (
        re.compile(
            r"Triton fused-MoE warmup: (\d+) layer calls over 1\.\.(\d+) tokens in ([\d.]+) s"
        ),
        "kernel_warmup.py (patch 0004)",
    ),
}
# vllm/model_executor/layers/fused_moe/oracle/fp8.py select_fp8_moe_backend: v0.21.0 logs
# "Using X Fp8 MoE backend out of potential backends: [...]", the series adds "(reason)".
BACKEND = re.compile(
    r"Using (\w+) Fp8 MoE backend(?: \((.*?)\))? out of potential backends: \[(.*?)\]"
)
# vllm/triton_utils/jit_monitor.py: once per kernel name, after warm-up
JIT_MONITOR = re.compile(r"Triton kernel JIT compilation during inference: (.+?)\. This causes")
JIT_MONITOR_ON = re.compile(r"Kernel JIT monitor activated")
# triton/runtime/autotuner.py (printed once jit_monitor sets knobs.autotuning.print)
AUTOTUNE = re.compile(r"Triton autotuning for function (\S+?),")
# vllm/v1/worker/gpu_worker.py compile_or_warm_up_model, vllm/model_executor/warmup/*: any
# line about warming up ("Compile and warming up model for size %d", "Warming up FlashInfer
# attention.", FlashInfer autotune, DeepGEMM warm-up)
WARM = re.compile(r"warm", re.I)
ERROR = re.compile(r"\b(ERROR|CRITICAL)\b|Traceback \(most recent call last\)")


def timestamp(line: str, year: int | None = None) -> float | None:
    """Unix time (s) of a vLLM log line (second resolution; the log has no year: this one's
    or ``year``), or None when the line has no vLLM header."""
    m = HEADER.search(ANSI.sub("", line))
    if not m:
        return None
    y = year or datetime.now().year
    return datetime.strptime(f"{y}-{m.group('ts')}", "%Y-%m-%d %H:%M:%S").timestamp()


def parse(text: str, max_lines: int = 12) -> dict:
    """Start-up phases and events of one log.

    Returns a dict with (None / empty when not logged): ``weights_load_s``, ``model_load_s``,
    ``model_load_gib``, ``dynamo_s``, ``compile_range_s`` (sum over ranges), ``torch_compile_s``,
    ``graph_capture_s``, ``graph_capture_gib``, ``init_engine_s``, ``kv_cache_tokens``,
    ``moe_warmup_calls`` and ``moe_warmup_s`` (the series' fused-MoE warm-up);
    ``warmup_lines`` (first ``max_lines``), ``warmup_count``, ``warmup_span_s`` (first to last
    warm-up line, from the log's second-resolution times); ``moe_backends`` (distinct, in
    order), ``moe_backend_reasons``; ``jit_monitor_kernels`` (in order, one per kernel name as
    vLLM logs them), ``jit_monitor_active``; ``autotune_kernels``; ``errors`` (first
    ``max_lines`` error lines).
    """
    out: dict = {
        "weights_load_s": None,
        "model_load_s": None,
        "model_load_gib": None,
        "dynamo_s": None,
        "compile_range_s": None,
        "torch_compile_s": None,
        "graph_capture_s": None,
        "graph_capture_gib": None,
        "init_engine_s": None,
        "kv_cache_tokens": None,
        "moe_warmup_calls": None,
        "moe_warmup_s": None,
        "warmup_lines": [],
        "warmup_count": 0,
        "warmup_span_s": None,
        "moe_backends": [],
        "moe_backend_reasons": [],
        "jit_monitor_kernels": [],
        "jit_monitor_active": False,
        "autotune_kernels": [],
        "errors": [],
    }
    warm_ts = []
    for raw in text.splitlines():
        line = ANSI.sub("", raw).rstrip("\r")
        for name, (rx, _src) in PHASES.items():
            m = rx.search(line)
            if not m:
                continue
            if name == "model_load":
                out["model_load_gib"], out["model_load_s"] = float(m[1]), float(m[2])
            elif name == "graph_capture":
                out["graph_capture_s"], out["graph_capture_gib"] = float(m[1]), float(m[2])
            elif name == "compile_range_s":
                out[name] = round((out[name] or 0.0) + float(m[2]), 3)
            elif name == "moe_warmup":
                out["moe_warmup_calls"], out["moe_warmup_s"] = int(m[1]), float(m[3])
            elif name == "kv_cache_tokens":
                out[name] = int(m[1].replace(",", ""))
            else:
                out[name] = float(m[1])
        if (m := BACKEND.search(line)) and m[1] not in out["moe_backends"]:
            out["moe_backends"].append(m[1])
            out["moe_backend_reasons"].append(m[2] or "")
        if m := JIT_MONITOR.search(line):
            out["jit_monitor_kernels"].append(m[1])
        if JIT_MONITOR_ON.search(line):
            out["jit_monitor_active"] = True
        if m := AUTOTUNE.search(line):
            out["autotune_kernels"].append(m[1])
        hdr = HEADER.search(line)
        skip = JIT_MONITOR.search(line) or PHASES["init_engine_s"][0].search(line)
        if WARM.search(line) and hdr and not skip:
            out["warmup_count"] += 1
            if len(out["warmup_lines"]) < max_lines:
                out["warmup_lines"].append(line[hdr.start("level") :])
            warm_ts.append(timestamp(line))
        if ERROR.search(line) and len(out["errors"]) < max_lines:
            out["errors"].append(line[:500])
    if warm_ts:
        out["warmup_span_s"] = max(warm_ts) - min(warm_ts)
    return out


def backend(parsed: dict) -> str | None:
    """The MoE backend of a parsed log: one name, ``A+B`` when layers logged several, or None."""
    b = parsed.get("moe_backends") or []
    return "+".join(b) if b else None
