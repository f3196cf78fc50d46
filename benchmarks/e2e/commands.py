"""The command lines and environments of a plan: each tree's server, the bench client, one
``vllm bench serve`` run, one ``vllm bench throughput`` process; the line a dry run prints."""

import json
import os
import shlex
from pathlib import Path

from benchmarks.e2e import schedule, servers
from benchmarks.e2e.plan import Plan


def server_env(plan: Plan, tree: str, tree_dir: Path, gpus, compile_dir, work: Path) -> dict:
    """A server's environment (servers.server_env): the hook folder, the site and the tree on
    PYTHONPATH, the model's settings, the tree's own (``--tree-env``, a fresh Triton cache, a
    torch.compile cache per tree)."""
    extra = dict(plan.tree_env.get(tree, {}))
    if plan.fresh_triton_cache:
        extra.setdefault("TRITON_CACHE_DIR", str(work / "triton-cache"))
    if plan.cache_root is not None:
        extra.setdefault("VLLM_CACHE_ROOT", str(plan.cache_root / tree))
    return servers.server_env(
        os.environ,
        pythonpath=[str(work / "hook"), plan.site, str(tree_dir)],
        compile_dir=compile_dir,
        gpus=gpus,
        extra=extra,
        model_env=dict(plan.model.env),
    )


def server_cmd(plan: Plan, port: int) -> list[str]:
    return servers.server_command(
        plan.python,
        plan.model.dir,
        port,
        quant_args=list(plan.model.serve_args),
        max_model_len=plan.max_model_len,
        max_num_seqs=plan.max_num_seqs,
        max_num_batched_tokens=plan.max_num_batched_tokens,
        share=plan.mem["share"],
        kv_bytes=plan.kv_bytes,
        tp=plan.tp,
        capture_sizes=list(plan.capture_sizes),
    )


def client_env(plan: Plan, tree_dir: Path) -> dict:
    """The bench client's environment: the site and the tree (the first) on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = ":".join(p for p in [plan.site, str(tree_dir)] if p)
    env.update(servers.ENV_ALWAYS)
    return env


def bench_argv(plan: Plan, tree: str, port: int, run: schedule.Run, n_prompts: int) -> list[str]:
    """Arguments of ``vllm bench serve`` for one run of ``n_prompts`` prompts (the same for
    every tree of a repetition, and so are the prompts: the seed depends on process and
    repetition only)."""
    w = schedule.WORKLOADS[run.workload]
    c = run.concurrency
    return [
        "--backend", "openai", "--endpoint", "/v1/completions",
        "--host", "127.0.0.1", "--port", str(port),
        "--model", str(plan.model.dir), "--tokenizer", str(plan.model.dir),
        *w.bench_args(),
        "--num-prompts", str(n_prompts),
        "--max-concurrency", str(c), "--request-rate", "inf",
        "--seed", str(1000 + 100 * run.process + run.rep),
        "--temperature", "0", "--ignore-eos",
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
        "--num-warmups", str(min(c, 8)), "--ready-check-timeout-sec", "60",
        "--disable-tqdm", "--label", tree,
    ]  # fmt: skip


def offline_argv(plan: Plan, w: str, out_json: Path) -> list[str]:
    """``vllm bench throughput`` for one workload. v0.21.0's throughput tool passes
    --random-range-ratio to the dataset unparsed, so it gets one float (the larger ratio)."""
    wl = schedule.WORKLOADS[w]
    return [
        plan.python, "-m", "vllm.entrypoints.cli.main", "bench", "throughput",
        "--model", str(plan.model.dir), "--tokenizer", str(plan.model.dir),
        "--dataset-name", "random", "--random-input-len", str(wl.input_len),
        "--random-output-len", str(wl.output_len),
        "--random-range-ratio", str(max(wl.input_ratio, wl.output_ratio)),
        "--num-prompts", str(plan.offline_prompts), "--seed", "0",
        "--load-format", "dummy",
        *[x for x in plan.model.serve_args if x != "--no-enable-prefix-caching"],
        "--max-model-len", str(plan.max_model_len), "--max-num-seqs", str(plan.max_num_seqs),
        "--max-num-batched-tokens", str(plan.max_num_batched_tokens),
        "--gpu-memory-utilization", "0.85", "--kv-cache-memory-bytes", str(plan.kv_bytes),
        "--tensor-parallel-size", str(plan.tp), "--no-enable-prefix-caching",
        *compilation_args(plan),
        "--output-json", str(out_json),
    ]  # fmt: skip


def compilation_args(plan: Plan) -> list[str]:
    sizes = list(plan.capture_sizes)
    return ["--compilation-config", json.dumps({"cudagraph_capture_sizes": sizes})] if sizes else []


def envline(env: dict, shown: tuple = ()) -> str:
    """``KEY=VALUE ...`` of the settings the runner makes: the fixed ones, ``shown`` (the
    model's), and any other key that is not in this process's environment."""
    keys = [
        "PYTHONPATH",
        "CUDA_VISIBLE_DEVICES",
        "VSERIES_COMPILE_LOG_DIR",
        "TRITON_CACHE_DIR",
        *servers.ENV_ALWAYS,
        *shown,
    ]
    extra = [k for k in env if k not in os.environ and k not in keys]
    return " ".join(f"{k}={shlex.quote(env[k])}" for k in [*keys, *extra] if k in env)
