"""Benchmark of the rope-nospec patch: JIT compiles and kernel time over a token-count sweep.

Runs vLLM's ``fused_inv_rope_fp8_quant`` (DeepSeek-V4 inverse RoPE + UE8M0 FP8 quantisation,
SM90 FP32 scale layout) in one tree, in a fresh process with an empty TRITON_CACHE_DIR, so
every variant the tree needs is compiled for real. Run it once per tree, from inside it:

    cd /root/vllm-base && PYTHONPATH=/root/site:/root/vllm-base:<ws> \\
        python3 -m benchmarks.bench_rope_nospec --variant base --out base.json \\
        --dump base.pt

Rows (``benchmarks/harness.py``'s result file; shape = the row kind, m = token count T):
- ``first_call``: wall ms of the first call at a token count not seen before (warm-up at T=1,
  then the sweep), with ``compiles`` and ``compile_ms`` (Triton compile hooks) of that call.
  v0.21.0 compiles at T=1, 2, 16 and 31 of this sweep; the patched tree only at T=1.
- ``warm_call``: wall ms of the next call at the same T (launch overhead + kernel).
- ``steady``: kernel time under CUDA-graph replay (the harness's ``time_graph``: median and
  range of the replays, in us; up to T=64, 8 input sets cycled inside the graph so that none
  stays in L2), with the bytes that must move and their fraction of the read bandwidth
  measured in the same run.
``--dump FILE`` saves the outputs at a few T (same seeded inputs in every tree) so that base
and patched can be compared bit for bit: ``--compare base.pt patched.pt`` (any host) prints
one line per T and exits 1 on a difference. About 30-60 s on an H200.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

# An empty on-disk Triton cache, so that it cannot hide compiles; set before Triton loads,
# removed at exit (also after --help).
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench_rope_nospec_triton_")
atexit.register(shutil.rmtree, os.environ["TRITON_CACHE_DIR"], ignore_errors=True)

import argparse  # noqa: E402
import importlib  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from benchmarks import harness  # noqa: E402
from vseries import results  # noqa: E402
from vseries.lab.recompile import (  # noqa: E402
    ROPE_KERNEL,
    ROPE_MODULE,
    SWEEP,
    WARMUP,
    CompileRecorder,
)

HEAD_DIM, ROPE_DIM, QUANT_BLOCK, MAX_POS = 512, 64, 128, 4096  # DeepSeek-V4 attention output
CYCLE_MAX_T = 64  # up to this T, several input sets are cycled in the graph (L2 is 50 MB)
DUMP_T = (1, 5, 17, 33, 128)


def inputs(t: int, heads: int, k: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded inputs for T tokens: o [T, heads, 512] bf16 and positions [T] int64; set k of
    several (k=0: the set --dump compares between trees)."""
    gen = torch.Generator(device="cuda").manual_seed(1000 + t + 7919 * k)
    o = torch.randn(t, heads, HEAD_DIM, device="cuda", dtype=torch.bfloat16, generator=gen)
    positions = torch.randint(0, MAX_POS, (t,), device="cuda", generator=gen)
    return o, positions


def cos_sin_cache() -> torch.Tensor:
    """[4096, 64] float32: cos of each RoPE frequency, then sin (DeepSeek-V4's layout)."""
    half = ROPE_DIM // 2
    inv_freq = 10000.0 ** (-torch.arange(half, device="cuda", dtype=torch.float32) / half)
    freqs = torch.outer(torch.arange(MAX_POS, device="cuda", dtype=torch.float32), inv_freq)
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1)


def bytes_moved(t: int, heads: int, groups: int) -> int:
    """Bytes the kernel must move for T tokens: read o (bf16), positions (int64) and one
    cos/sin row (fp32) per token; write the fp8 output and the fp32 scales, whose token dim
    is padded to a multiple of 4 (get_tma_aligned_size)."""
    scales = groups * (heads // groups * HEAD_DIM // QUANT_BLOCK) * ((t + 3) // 4 * 4) * 4
    return t * (heads * HEAD_DIM * 2 + 8 + ROPE_DIM * 4) + t * heads * HEAD_DIM + scales


def compare(a: str, b: str) -> int:
    """Compare two ``--dump`` files bit for bit; print one line per T. Returns 0 when every
    T has the same inputs (checksum) and identical fp8 bytes and scale bits, else 1."""
    da, db = torch.load(a), torch.load(b)
    same_all = True
    for t, x in sorted(da["outputs"].items()):
        y = db["outputs"].get(t)
        same = (
            y is not None
            and x["o_sum"] == y["o_sum"]
            and torch.equal(x["fp8"], y["fp8"])
            and torch.equal(x["scale"].view(torch.int32), y["scale"].view(torch.int32))
        )
        print(f"T={t}: {da['variant']} vs {db['variant']}: {'identical' if same else 'DIFFER'}")
        same_all &= same
    return 0 if same_all else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variant", help="name of this tree, e.g. base / patched (required)")
    p.add_argument("--out", help="JSON file to write (required)")
    p.add_argument("--dump", help=f"also save the outputs at T in {DUMP_T} to this .pt file")
    p.add_argument("--heads", type=int, default=64, help="attention heads (default 64)")
    p.add_argument("--groups", type=int, default=8, help="output groups (default 8)")
    p.add_argument(
        "--cycle-max-t",
        type=int,
        default=CYCLE_MAX_T,
        help=f"cycle {harness.ROUTINGS} input sets in the steady-state graph up to this T "
        "(default 64; above it one set: it does not fit in L2 anyway)",
    )
    p.add_argument("--compare", nargs=2, metavar="PT", help="compare two --dump files instead")
    args = p.parse_args()
    if args.compare:
        return compare(*args.compare)
    if not (args.variant and args.out):
        p.error("--variant and --out are required")
    if not torch.cuda.is_available():
        print("bench_rope_nospec: needs a CUDA device", file=sys.stderr)
        return 2

    import vllm

    module = importlib.import_module(ROPE_MODULE)
    heads, groups = args.heads, args.groups
    cache = cos_sin_cache()
    token_counts = [WARMUP, *SWEEP]
    data = {t: inputs(t, heads) for t in token_counts}

    def call(t: int, o=None, positions=None):
        if o is None:
            o, positions = data[t]
        return module.fused_inv_rope_fp8_quant(o, positions, cache, groups, heads // groups)

    # Reserve the largest call's memory once, so that first calls do not also pay cudaMalloc.
    torch.empty(bytes_moved(max(token_counts), heads, groups), dtype=torch.uint8, device="cuda")
    bw = harness.read_bandwidth()
    rows: list[results.Row] = []

    def row(case: str, t: int, us: float, us_min=None, us_max=None, nbytes=0, pct=None, **extra):
        """A row of kind ``case`` (first_call, warm_call, steady) at T tokens."""
        rows.append(
            results.Row(
                "rope-nospec",
                case,
                "bf16->fp8_e4m3",
                t,
                args.variant,
                round(us, 3),
                round(us if us_min is None else us_min, 3),
                round(us if us_max is None else us_max, 3),
                nbytes,
                pct,
                extra,
            )  # fmt: skip
        )

    with CompileRecorder() as rec:
        for t in token_counts:
            rec.token_count = t
            n_before = len(rec.events)
            t0 = time.perf_counter()
            call(t)
            torch.cuda.synchronize()
            first_ms = (time.perf_counter() - t0) * 1e3
            new = rec.events[n_before:]
            t0 = time.perf_counter()
            call(t)
            torch.cuda.synchronize()
            warm_ms = (time.perf_counter() - t0) * 1e3
            row(
                "first_call",
                t,
                first_ms * 1e3,
                ms=round(first_ms, 3),
                compiles=len(new),
                compile_ms=round(sum(e.ms for e in new), 1),
            )
            row("warm_call", t, warm_ms * 1e3, ms=round(warm_ms, 3))
            print(
                f"T={t:6d} first {first_ms:9.2f} ms ({len(new)} compiles)  warm {warm_ms:7.3f} ms",
                flush=True,
            )
    compiles = [e for e in rec.events if e.kernel.endswith(ROPE_KERNEL)]

    for t in token_counts:
        sets = [data[t]] + [
            inputs(t, heads, k) for k in range(1, harness.ROUTINGS if t <= args.cycle_max_t else 1)
        ]
        timed = harness.time_graph([lambda t=t, s=s: call(t, *s) for s in sets])
        moved = bytes_moved(t, heads, groups)
        pct = harness.roofline_pct(moved, timed.us, bw)
        row(
            "steady", t, timed.us, timed.us_min, timed.us_max, moved, round(pct, 1),
            timing="graph", input_sets=len(sets),
        )  # fmt: skip
        print(f"T={t:6d} steady {timed.us:9.2f} us  {pct:5.1f}% of read bandwidth", flush=True)
        del sets

    if args.dump:
        dump = {"variant": args.variant, "heads": heads, "groups": groups, "outputs": {}}
        for t in DUMP_T:
            fp8, scale = call(t)
            dump["outputs"][t] = {
                "fp8": fp8.view(torch.uint8).cpu().contiguous(),
                "scale": scale.cpu().contiguous(),
                "o_sum": data[t][0].float().sum().item(),
            }
        torch.save(dump, args.dump)

    head = harness.header(
        "rope-nospec",
        args.variant,
        bw,
        vllm_file=vllm.__file__,
        heads=heads,
        groups=groups,
        triton_cache_dir=os.environ["TRITON_CACHE_DIR"],
        kernel_variants=len(compiles),
        compiles=[{"T": e.token_count, "ms": round(e.ms, 1)} for e in compiles],
    )
    results.write(args.out, head, rows)
    print(
        f"{ROPE_KERNEL}: {len(compiles)} variant(s) compiled, at T="
        f"{[e.token_count for e in compiles]}; wrote {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
