#!/usr/bin/env python3
"""Re-tune fused_moe_kernel's H200 decode configs for per-tensor FP8, unswapped and swapped.

v0.21.0 ships no tuned H200 config for per-tensor FP8 at the Qwen3-30B-A3B shape
(E=128, N=768) or the DeepSeek-V3 TP8 slice (E=256, N=256): only block-FP8 files exist there,
so these layers run `get_default_config`. This script times the whole `fused_experts` call
(as vLLM's `benchmarks/kernels/benchmark_moe.py` does) for each candidate config of a reduced
search space, at each decode batch, on the patched tree, and writes:

- a result file of ``benchmarks/harness.py`` whose header also holds every (shape, batch,
  config) time ("candidates") and the winners ("best"), and whose rows are, per batch,
  v0.21.0's default config run as base runs it (SWAP_AB false,
  "default_base") and as the patched launcher decides ("default_patched"), the best unswapped
  ("tuned_unswapped") and the best swapped ("tuned_swapped") config, with roofline %;
- with ``--configs-out DIR``, vLLM-format config files
  (``E=..,N=..,device_name=NVIDIA_H200,dtype=fp8_w8a8.json``) holding the winner per batch,
  with ``"SWAP_AB": true`` where the swapped tile won.

Why not benchmark_moe.py itself: it needs Ray, and its CUDA search space is 1920 configs per
batch (BLOCK_SIZE_M 5 x N 4 x K 3 x GROUP_SIZE_M 4 x warps 2 x stages 4), hours of Triton
compiles on one GPU against 30 minutes of device time per session. The reduced space keeps
the decode-relevant axes (BLOCK_SIZE_M 16, BLOCK_SIZE_N, BLOCK_SIZE_K, num_stages; GROUP_SIZE_M
1 and 4 warps, as the default config uses at these sizes) and adds SWAP_AB. Timing is the
harness's: CUDA-graph replay of the layer with --routing-sets routings of different experts
cycled inside the graph, so that small batches do not find their weights in L2; median in us.

    cd /root/vllm-patched && PYTHONPATH=/root/site:/root/vllm-patched:<ws> \\
        python3 -m benchmarks.tune_swap_ab --out tune.json --configs-out cfg/

About 4 minutes on an H200, most of it Triton compiles. Exit 2 without CUDA or on a tree
without the swap-AB patch.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import sys
import time

import torch

from benchmarks import bench_swap_ab as bench  # the layer's weights and quant config
from benchmarks import harness
from vseries import results

TUNE_SHAPES = ("qwen3-30b-a3b", "dsv3-tp8")
BATCHES = (1, 2, 4, 8, 16, 32, 64)
UNSWAPPED = [
    dict(BLOCK_SIZE_M=16, BLOCK_SIZE_N=n, BLOCK_SIZE_K=k, num_stages=s, SWAP_AB=False)
    for n, k, s in itertools.product((32, 64, 128), (128, 256), (3, 4, 5))
]
SWAPPED = [
    dict(BLOCK_SIZE_M=16, BLOCK_SIZE_N=n, BLOCK_SIZE_K=k, num_stages=s, SWAP_AB=True)
    for n, k, s in itertools.product((64, 128), (128, 256), (3, 4, 5))
]
COMMON = dict(GROUP_SIZE_M=1, num_warps=4)
# vLLM picks the config of the nearest batch key, so a file holding only decode keys would run
# prefill with a 16-row decode tile (measured: Qwen3 shape, 2048 tokens, 2x slower). Batches
# above the tuned ones get v0.21.0's own default config (what they ran before the file
# existed), at the batch keys vLLM's benchmark_moe.py tunes.
FILL_BATCHES = (96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096)


def key(cfg: dict) -> str:
    return ",".join(f"{k}={cfg[k]}" for k in sorted(cfg))


def time_config(fm, override_config, x, w1, w2, qc, sets, cfg: dict | None) -> harness.Timing:
    """fused_experts under cfg (None: the config vLLM itself picks), the routings ``sets``
    cycled in one graph (harness.time_graph; compiles happen before the timing)."""
    calls = [
        functools.partial(fm.fused_experts, x, w1, w2, tw, ti, quant_config=qc) for tw, ti in sets
    ]
    if cfg is None:
        return harness.time_graph(calls)
    with override_config(cfg):
        return harness.time_graph(calls)


def config_files(result: dict, device_name: str) -> dict[str, dict]:
    """vLLM config files from a tuning result: {file name: {batch key: config}}.

    Tuned batches get their winner ("SWAP_AB" true or false); FILL_BATCHES above the largest
    tuned batch get `get_default_config` (no "SWAP_AB" key: the launcher's rule decides).
    """
    from vllm.model_executor.layers.fused_moe.fused_moe import get_default_config

    files: dict[str, dict] = {}
    for best in result["best"]:
        e, topk, h, i = bench.SHAPES[best["case"]]
        cfgs = files.setdefault(f"E={e},N={i},device_name={device_name},dtype=fp8_w8a8.json", {})
        win = best["best_swapped"] if best["winner"] == "swapped" else best["best_unswapped"]
        cfgs[str(best["batch"])] = {k: v for k, v in win.items() if k != "SWAP_AB"}
        cfgs[str(best["batch"])]["SWAP_AB"] = win["SWAP_AB"]
        top = max(int(b) for b in cfgs)
        for m in FILL_BATCHES:
            if m > top:
                cfg = get_default_config(m, e, i, h, topk, "fp8_w8a8")
                cfgs[str(m)] = {k: v for k, v in cfg.items() if k != "SPLIT_K"}
    return files


# key order of vLLM's tuned files (benchmark_moe.py's sort_config), SWAP_AB last
KEY_ORDER = (
    "BLOCK_SIZE_M",
    "BLOCK_SIZE_N",
    "BLOCK_SIZE_K",
    "GROUP_SIZE_M",
    "num_warps",
    "num_stages",
    "SWAP_AB",
)


def write_configs(result: dict, out_dir: str, device_name: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    for name, cfgs in config_files(result, device_name).items():
        ordered = {
            m: {k: cfgs[m][k] for k in KEY_ORDER if k in cfgs[m]} for m in sorted(cfgs, key=int)
        }
        with open(os.path.join(out_dir, name), "w") as f:
            json.dump(ordered, f, indent=4)
            f.write("\n")


def patched_moe(bench_name: str, variant: str = "patched"):
    """(vLLM's fused_moe module, its override_config, a result header) on a CUDA host whose
    vLLM has the swap-AB patch; None, after saying why on stderr, otherwise.

    The header is the harness's (bench name, command line, GPU, versions, the read bandwidth
    measured now, bytes/s).
    """
    if not torch.cuda.is_available():
        print("CUDA is not available: this needs an NVIDIA GPU", file=sys.stderr)
        return None
    from vllm.model_executor.layers.fused_moe import fused_moe as fm
    from vllm.model_executor.layers.fused_moe import override_config

    if not hasattr(fm, "get_fused_moe_swap_ab_config"):
        print("this tree has no swap-AB patch (get_fused_moe_swap_ab_config)", file=sys.stderr)
        return None
    return fm, override_config, harness.header(bench_name, variant, harness.read_bandwidth())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--configs-out", help="folder for the vLLM-format tuned config files")
    ap.add_argument("--shapes", nargs="+", default=list(TUNE_SHAPES), choices=list(bench.SHAPES))
    ap.add_argument("--batches", nargs="+", type=int, default=list(BATCHES))
    ap.add_argument("--routing-sets", type=int, default=4)
    ap.add_argument("--budget-s", type=float, default=330, help="stop past this wall time, s")
    ap.add_argument(
        "--write-from",
        metavar="TUNE_JSON",
        help="only write --configs-out from an earlier run's JSON (no GPU needed)",
    )
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    if args.write_from:  # a result file of this script (the harness's, or an older one)
        earlier, _ = results.load(args.write_from)
        write_configs(earlier, args.configs_out, earlier["gpu"].replace(" ", "_"))
        return 0
    found = patched_moe("swap-ab-tune")
    if found is None:
        return 2
    fm, override_config, result = found
    device_name = result["gpu"].replace(" ", "_")
    result.update(
        space={"unswapped": len(UNSWAPPED), "swapped": len(SWAPPED), "common": COMMON},
        candidates=[],  # every timing
        best=[],
    )
    bw = result["read_bandwidth_Bps"]
    rows: list[results.Row] = []  # default_base, default_patched, tuned_* per batch
    for s_idx, name in enumerate(args.shapes):
        e, topk, h, i = bench.SHAPES[name]
        w1, w2 = bench.make_weights(e, h, i, "fp8_w8a8_per_tensor", seed=1000 + s_idx)
        qc = bench.quant_config_for("fp8_w8a8_per_tensor", e)
        for batch in args.batches:
            if time.monotonic() - t0 > args.budget_s:
                print(f"budget spent: stopping before {name} M={batch}", flush=True)
                result["stopped_early"] = f"{name} M={batch}"
                break
            g = torch.Generator(device="cuda").manual_seed(batch)
            x = torch.randn(batch, h, device="cuda", dtype=torch.bfloat16, generator=g)
            sets = harness.routings(batch, e, topk, args.routing_sets, 7 * batch + s_idx)
            nbytes = sum(harness.moe_bytes(ids, h, i) for _, ids in sets) / len(sets)
            default = fm.get_default_config(batch, e, i, h, topk, "fp8_w8a8")
            cands = [("default_base", dict(default, SWAP_AB=False)), ("default_patched", None)]
            cands += [("unswapped", dict(c, **COMMON)) for c in UNSWAPPED]
            cands += [("swapped", dict(c, **COMMON)) for c in SWAPPED]
            times = []
            for kind, cfg in cands:
                try:
                    timed = time_config(fm, override_config, x, w1, w2, qc, sets, cfg)
                except Exception as exc:  # e.g. out of shared memory: skip the config
                    print(f"{name} M={batch} {kind} {cfg}: {type(exc).__name__}", flush=True)
                    continue
                row = dict(case=name, batch=batch, kind=kind, config=cfg, us=round(timed.us, 2))
                row.update(us_min=round(timed.us_min, 2), us_max=round(timed.us_max, 2))
                times.append(row)
                result["candidates"].append(row)
            best_u = min((r for r in times if r["kind"] == "unswapped"), key=lambda r: r["us"])
            best_s = min((r for r in times if r["kind"] == "swapped"), key=lambda r: r["us"])
            base = next(r for r in times if r["kind"] == "default_base")
            patched = next(r for r in times if r["kind"] == "default_patched")
            win = min(best_u, best_s, key=lambda r: r["us"])
            summary = dict(
                case=name,
                batch=batch,
                default_base_us=base["us"],
                default_patched_us=patched["us"],
                best_unswapped_us=best_u["us"],
                best_unswapped=best_u["config"],
                best_swapped_us=best_s["us"],
                best_swapped=best_s["config"],
                winner=win["kind"],
                tuned_vs_default_base=round(base["us"] / win["us"], 3),
                swapped_vs_unswapped_tuned=round(best_u["us"] / best_s["us"], 3),
            )
            result["best"].append(summary)
            for variant, r in (
                ("default_base", base),
                ("default_patched", patched),
                ("tuned_unswapped", best_u),
                ("tuned_swapped", best_s),
            ):
                rows.append(
                    results.Row(
                        "swap-ab-tune",
                        name,
                        "fp8_w8a8_per_tensor",
                        batch,
                        variant,
                        r["us"],
                        r["us_min"],
                        r["us_max"],
                        int(nbytes),
                        round(harness.roofline_pct(nbytes, r["us"], bw), 1),
                        {"timing": "graph", "config": r["config"]},
                    )  # fmt: skip
                )
            print(json.dumps(summary), flush=True)
            # written after every batch: partial results survive a timeout
            results.write(args.out, result, rows)
            if args.configs_out:
                write_configs(result, args.configs_out, device_name)
        del w1, w2
        torch.cuda.empty_cache()
    result["wall_s"] = round(time.monotonic() - t0, 1)
    results.write(args.out, result, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
