#!/usr/bin/env python3
"""A tuned TRITON baseline at decode batches: vLLM's own fused-MoE tuner for one model shape
on one GPU, over its CUDA search space cut by its own rule for the rows an expert receives.

vLLM's ``benchmarks/kernels/benchmark_moe.py --tune`` times every configuration of its CUDA
search space (1920) per batch size in Ray workers, one per GPU; each configuration is a Triton
compile first (about a second), so one shape takes more than an hour on one GPU. At a decode
batch of M tokens an expert receives at most ceil(M * top-k / E) rows, and upstream's own
``prune_xpu_search_space`` keeps the tiles of at most next_power_of_2(those rows) rows, 16 at
least: at M <= 16 on a 128-expert top-8 layer that is BLOCK_SIZE_M = 16, 384 configurations
(every BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, warp and stage count of the CUDA space). This
applies that rule on CUDA (``--no-prune`` keeps the whole space), compiles the configurations in
``--jobs`` processes first (they fill Triton's cache), then times each one per batch in one
process as ``BenchmarkWorker.tune`` does (``benchmark_config(..., num_iters=20)``: CUDA-graph
replay of 10 calls), and writes vLLM's config file after each batch (``save_configs``:
``E=<E>,N=<N>,device_name=<GPU>,dtype=fp8_w8a8.json``) into ``--save-dir``; a tree with it in
``vllm/model_executor/layers/fused_moe/configs/`` (or ``VLLM_TUNED_CONFIG_FOLDER`` naming the
folder) runs it. The layer is the one ``benchmark_moe.py --dtype fp8_w8a8`` builds: per-tensor
FP8 weights, static per-tensor activation scales, the model's bfloat16.

The result file (``--out``) has per batch the configuration v0.34.0 takes without the file
(``default``: ``get_moe_configs``, else ``get_default_config``, as ``BenchmarkWorker.benchmark``
picks it) and the tuned one, both timed again with ``num_iters=100`` (the tuner's ``benchmark``
mode), each with its configuration.

    cd /root/vllm-base && PYTHONPATH=/root/site:/root/tsite:/root/vllm-base:<ws> \\
        python3 -m benchmarks.tune_fused_moe --shape qwen3-30b-a3b --batches 1 2 3 4 8 16 \\
        --save-dir /root/r/tuned --out /root/r/tune-qwen3-30b-a3b.json

Needs Ray importable (vLLM's tuner imports it; no cluster is started) and a CUDA GPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing
import os
import sys
import time
from pathlib import Path

from benchmarks import shapes

BATCHES = (1, 2, 3, 4, 8, 16)
# benchmark_moe.py's own replay counts: BenchmarkWorker.tune and BenchmarkWorker.benchmark
TUNE_ITERS = 20
BENCH_ITERS = 100


def kernels_dir() -> Path:
    """vLLM's ``benchmarks/kernels`` of the tree this runs in (the working directory)."""
    return Path.cwd() / "benchmarks" / "kernels"


def load_tuner():
    """vLLM's ``benchmark_moe`` module from the tree's ``benchmarks/kernels``.

    Raises:
        RuntimeError: the tree has no such file, or Ray (which it imports) is missing.
    """
    d = kernels_dir()
    if not (d / "benchmark_moe.py").is_file():
        raise RuntimeError(
            f"tune_fused_moe: no {d}/benchmark_moe.py: run from a vLLM tree that has "
            "benchmarks/kernels (stage.py stages it)"
        )
    # by its path: the tree's benchmarks/ is not a package, and it imports only vllm
    spec = importlib.util.spec_from_file_location("benchmark_moe", d / "benchmark_moe.py")
    benchmark_moe = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(benchmark_moe)
    except ModuleNotFoundError as exc:
        if exc.name == "ray" or (exc.name or "").startswith("ray."):
            raise RuntimeError(
                "tune_fused_moe: vLLM's benchmark_moe.py imports Ray: install it (on the GPU "
                "host: parts pt1, pt2 of benchmarks/h200/stage_tune.sh)"
            ) from exc
        raise
    return benchmark_moe


def search_space(tuner, batches: list[int], topk: int, experts: int,
                 prune: bool = True) -> list[dict]:  # fmt: skip
    """The configurations timed at every batch: the tuner's CUDA space, with ``prune`` cut by
    its own ``prune_xpu_search_space`` at the largest batch (one list for all batches: compiled
    once)."""
    space = tuner.get_configs_compute_bound(False, None)
    if not prune:
        return space
    return tuner.prune_xpu_search_space(max(batches), space, topk, experts)


def layer_args(shape: str) -> dict:
    """benchmark_config's layer arguments for a model shape at tensor parallel 1."""
    experts, topk, hidden, inter = shapes.MOE_SHAPES[shape]
    return {"E": experts, "shard": 2 * inter, "hidden": hidden, "topk": topk}


def _setup(tuner) -> None:
    """What ``BenchmarkWorker.__init__`` sets: the default device and the seed."""
    import torch

    torch.set_default_device("cuda")
    tuner.set_random_seed(0)


def _time(tuner, config: dict, m: int, la: dict, iters: int) -> float:
    import torch

    return tuner.benchmark_config(
        config, m, la["E"], la["shard"], la["hidden"], la["topk"], torch.bfloat16,
        True, False, num_iters=iters,
    )  # fmt: skip


def _compile(job: tuple[str, list[dict], list[int]]) -> int:
    """A compile worker: run each configuration once at each batch (Triton's cache keeps the
    kernels); the count that failed (too many resources, as the tuner skips them)."""
    shape, configs, batches = job
    os.chdir(os.environ["TUNE_TREE"])
    tuner = load_tuner()
    _setup(tuner)
    la, bad = layer_args(shape), 0
    for c in configs:
        for m in batches:
            try:
                _time(tuner, c, m, la, 1)
            except Exception:  # the timing pass skips and reports these
                bad += 1
    return bad


def compile_all(shape: str, configs: list[dict], batches: list[int], jobs: int) -> int:
    """Fill Triton's cache with every configuration in ``jobs`` processes on the one GPU.
    A batch per class of Triton's integer specialisation suffices: the token counts' parity
    decides whether M * top-k and the padded length are multiples of 16."""
    reps = sorted({min(b for b in batches if b % 2 == p) for p in (0, 1) if
                   any(b % 2 == p for b in batches)})  # fmt: skip
    chunks = [configs[i::jobs] for i in range(jobs)]
    os.environ["TUNE_TREE"] = os.getcwd()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(jobs) as pool:
        return sum(pool.map(_compile, [(shape, ch, reps) for ch in chunks if ch]))


def tune(tuner, shape: str, configs: list[dict], m: int) -> tuple[dict, float, int]:
    """The fastest configuration at M (``BenchmarkWorker.tune``'s loop); failures skipped and
    counted."""
    import triton

    la, best, best_t, skipped = layer_args(shape), None, float("inf"), 0
    for i, c in enumerate(configs):
        try:
            t = _time(tuner, c, m, la, TUNE_ITERS)
        except (triton.runtime.autotuner.OutOfResources, RuntimeError):
            skipped += 1
            continue
        if t < best_t:
            best, best_t = c, t
        if (
            tuner.TRITON_CACHE_CLEAR_INTERVAL > 0
            and i
            and i % tuner.TRITON_CACHE_CLEAR_INTERVAL == 0
        ):
            tuner.clear_triton_cache()
    if best is None:
        raise RuntimeError(f"no configuration of {len(configs)} ran at M={m}")
    return best, best_t, skipped


def default_config(tuner, shape: str, m: int) -> dict:
    """The configuration v0.34.0 takes at M (``BenchmarkWorker.benchmark``'s choice)."""
    la = layer_args(shape)
    op = tuner.get_moe_configs(la["E"], la["shard"] // 2, "fp8_w8a8", None, None)
    if op is None:
        return tuner.get_default_config(
            m, la["E"], la["shard"], la["hidden"], la["topk"], "fp8_w8a8", None
        )
    return op[min(op.keys(), key=lambda x: abs(x - m))]


def arguments() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", required=True, choices=list(shapes.MOE_SHAPES))
    ap.add_argument("--batches", nargs="+", type=int, default=list(BATCHES))
    ap.add_argument("--save-dir", required=True, help="where vLLM's config file goes")
    ap.add_argument("--out", required=True, help="the result file (default and tuned per batch)")
    ap.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1),
                    help="compile processes (0: compile while timing)")  # fmt: skip
    ap.add_argument("--no-prune", action="store_true", help="the whole CUDA search space")
    return ap


def main(argv: list[str] | None = None) -> int:
    a = arguments().parse_args(argv)
    if min(a.batches) < 1:
        print("tune_fused_moe: batches are token counts of at least 1", file=sys.stderr)
        return 2
    try:
        tuner = load_tuner()
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print("tune_fused_moe: needs a CUDA GPU", file=sys.stderr)
        return 2
    from benchmarks import harness
    from vseries import results

    experts, topk = shapes.MOE_SHAPES[a.shape][:2]
    configs = search_space(tuner, a.batches, topk, experts, not a.no_prune)
    t0 = time.time()
    print(f"{len(configs)} configurations, batches {a.batches}", flush=True)
    if a.jobs > 0:
        bad = compile_all(a.shape, configs, a.batches, a.jobs)
        print(f"compiled in {time.time() - t0:.0f}s ({bad} runs failed)", flush=True)
    _setup(tuner)
    head = harness.header("tune_fused_moe", "tuned", None, configurations=len(configs),
                          pruned=not a.no_prune)  # fmt: skip
    best: dict[int, dict] = {}
    rows: list[results.Row] = []
    la = layer_args(a.shape)
    for m in a.batches:
        best[m], t, skipped = tune(tuner, a.shape, configs, m)
        for arm, c in (("default", default_config(tuner, a.shape, m)), ("tuned", best[m])):
            us = _time(tuner, c, m, la, BENCH_ITERS)
            rows.append(results.Row("tune_fused_moe", a.shape, "fp8_w8a8", m, arm, round(us, 2),
                                    None, None, 0, None, {"config": dict(c)}))  # fmt: skip
            print(f"M={m} {arm}: {us:.2f} us {c}", flush=True)
        print(f"M={m}: tuned over {len(configs) - skipped} ({skipped} skipped), "
              f"{time.time() - t0:.0f}s", flush=True)  # fmt: skip
        results.write(a.out, head, rows)
        # after each batch: a call that runs out of time keeps the batches it tuned
        tuner.save_configs(
            {k: tuner.sort_config(c) for k, c in best.items()}, la["E"], la["shard"],
            la["hidden"], la["topk"], torch.bfloat16, True, False, False, None, a.save_dir,
        )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
