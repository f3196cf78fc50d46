#!/usr/bin/env python3
"""The fused MoE's dynamic per-tensor FP8 activation quantization at decode sizes, alone.

v0.34.0 quantizes the MoE's first GEMM input with ``ops.scaled_fp8_quant(x)`` (dynamic, per
tensor): three launches (a memset of the scale, an abs-max reduction with atomics, the
quantization). Rows, per input shape of a MoE layer (``a1``: the hidden states, M x hidden;
``a2``: the intermediate rows, M * top-k x intermediate, whose scale ``TritonExperts`` computes
itself, ``masked_amax_scale``: the op timed on inputs of that shape) and M:

- ``cuda``: ``ops.scaled_fp8_quant(x)``, what v0.34.0 runs;
- ``one_program`` (trees with ``patches/candidates/fp8-quant-one-program.patch``): the
  candidate's one launch, where it takes the input (a contiguous tensor of at most its
  ``_ONE_PROGRAM_FP8_QUANT_MAX_NUMEL`` values); ``equal`` (on its row only) says whether its
  bytes and scale were those of ``cuda`` on every input timed;
- ``one_block`` (``--one-block SO``: the library ``benchmarks/h200/stage_quant_cuda.sh`` builds
  from ``patches/candidates/fp8-quant-one-block.patch``, the same specialisation inside the
  CUDA op): its ``dynamic_scaled_fp8_quant``; ``equal_one_block`` as ``equal``;
- ``static``: ``ops.scaled_fp8_quant(x, scale)``, one launch with a given scale: the floor a
  one-launch dynamic quantization can reach.

``--sweep`` (with ``--one-block``): flat inputs of 2048 to 49152 values, bf16 and float32,
instead of the layer's sites (shape ``flat``): where the one-block kernel stops winning
against the three launches, to set its limit (32768 values; past it the library takes the
general path, which is v0.34.0's).

Method (``benchmarks/harness.py``): CUDA-graph replay of 16 calls on 16 inputs, time of one
call, median and range of the replays. The inputs are small and were just written by the
kernel before, so they are L2-resident here as when serving.

    cd /root/vllm-<tree> && PYTHONPATH=/root/site:/root/vllm-<tree>:<ws> \\
        python3 -m benchmarks.bench_fp8_quant --variant <tree> --out fp8_quant-<tree>.json
"""

from __future__ import annotations

import sys

import torch

from benchmarks import harness, shapes
from vseries import results

BATCHES = tuple(range(1, 17))
INPUTS = 16


def one_program():
    """The candidate's one-launch quantization and its size limit, or None (plain tree)."""
    from vllm.model_executor.layers.fused_moe import utils

    fn = getattr(utils, "dynamic_per_tensor_fp8_quant_one_program", None)
    return (fn, utils._ONE_PROGRAM_FP8_QUANT_MAX_NUMEL) if fn else None


def one_block(path: str | None):
    """The one-block build of v0.34.0's ``dynamic_scaled_fp8_quant`` (registered as
    ``torch.ops._vseries_fp8``) as a quantization function, or None (no ``--one-block``)."""
    if not path:
        return None
    torch.ops.load_library(path)
    from vllm.platforms import current_platform

    op = torch.ops._vseries_fp8.dynamic_scaled_fp8_quant
    fp8 = current_platform.fp8_dtype()

    def quant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = torch.empty(x.shape, device=x.device, dtype=fp8)
        scale = torch.empty(1, device=x.device, dtype=torch.float32)
        op(out, x, scale)
        return out, scale

    return quant


def same(p, q) -> bool:
    """Two (FP8 tensor, scale) pairs hold the same bytes and scale."""
    return torch.equal(p[1], q[1]) and torch.equal(p[0].view(torch.uint8), q[0].view(torch.uint8))


JUDGED = {"equal": "one_program", "equal_one_block": "one_block"}


def row_extra(extra: dict, arm: str) -> dict:
    """A row's fields: the case's, with a form's bytes judgment (``equal``,
    ``equal_one_block``) on that form's row only, so each case's judgment is counted once."""
    return {k: v for k, v in extra.items() if JUDGED.get(k, arm) == arm}


def sites(shape: str, m: int) -> dict[str, tuple[int, int]]:
    """The two quantized inputs of one MoE layer at M tokens: (rows, columns)."""
    _, topk, hidden, inter = shapes.MOE_SHAPES[shape]
    return {"a1": (m, hidden), "a2": (m * topk, inter)}


SWEEP = tuple(2048 * k for k in (1, 2, 3, 4, 6, 8, 10, 12, 14, 15, 16, 17, 18, 20, 24))
SWEEP_DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def cases(a):
    """(shape, dtype name, M, inputs, extra) of every case: the layer's sites, or the sweep."""
    if a.sweep:
        for name, dtype in SWEEP_DTYPES.items():
            for n in SWEEP:
                xs = [torch.randn(n // 2048, 2048, device="cuda", dtype=dtype) * 3
                      for _ in range(INPUTS)]  # fmt: skip
                yield "flat", name, n // 2048, xs, {"site": "flat", "rows": n // 2048, "cols": 2048}
        return
    for shape in a.shapes:
        for m in a.batches:
            for site, (r, c) in sites(shape, m).items():
                xs = [
                    torch.randn(r, c, device="cuda", dtype=torch.bfloat16) * 3
                    for _ in range(INPUTS)
                ]
                yield shape, "bf16", m, xs, {"site": site, "rows": r, "cols": c}


def main() -> int:
    ap = harness.arguments(__doc__, BATCHES, reps=50)
    ap.add_argument("--one-block", metavar="SO", help="the one-block build's library (part pq)")
    ap.add_argument("--sweep", action="store_true", help="flat inputs across the one-block limit")
    a = ap.parse_args()
    if a.sweep and not a.one_block:
        ap.error("--sweep times the one-block build: give --one-block SO")
    if not torch.cuda.is_available():
        print("bench_fp8_quant: needs a CUDA GPU", file=sys.stderr)
        return 2

    from vllm import _custom_ops as ops

    cand = one_program()
    block = one_block(a.one_block)
    head = harness.header(
        "fp8_quant", a.variant, None, one_program=cand is not None, one_block=a.one_block
    )
    rows: list[results.Row] = []
    torch.manual_seed(0)
    for shape, dt, m, xs, extra in cases(a):
        r, c = extra["rows"], extra["cols"]
        scale = torch.ones(1, device="cuda", dtype=torch.float32)
        arms = {
            "cuda": [lambda x=x: ops.scaled_fp8_quant(x) for x in xs],
            "static": [lambda x=x, s=scale: ops.scaled_fp8_quant(x, s) for x in xs],
        }
        if cand is not None and r * c <= cand[1] and dt == "bf16":
            fn = cand[0]
            arms["one_program"] = [lambda x=x, f=fn: f(x) for x in xs]
            extra["equal"] = all(same(fn(x), ops.scaled_fp8_quant(x)) for x in xs)
        if block is not None:
            arms["one_block"] = [lambda x=x, f=block: f(x) for x in xs]
            extra["equal_one_block"] = all(same(block(x), ops.scaled_fp8_quant(x)) for x in xs)
        for arm, calls in arms.items():
            label = f"{shape} {dt} {extra['site']} M={m} {arm}"
            try:
                t = harness.time_graph(calls, reps=a.reps)
            except Exception as exc:  # one failing case must not lose the run
                rows.append(
                    results.failed("fp8_quant", shape, dt, m, arm, exc, **row_extra(extra, arm))
                )
                print(f"{label}: FAILED {exc}", flush=True)
                continue
            rows.append(
                results.Row(
                    "fp8_quant", shape, dt, m, arm, round(t.us, 2), round(t.us_min, 2),
                    round(t.us_max, 2), xs[0].element_size() * r * c, None, row_extra(extra, arm),
                )
            )  # fmt: skip
            print(f"{label}: {t.us:.2f} us ({t.us_min:.2f}-{t.us_max:.2f})", flush=True)
        results.write(a.out, head, rows)
    results.write(a.out, head, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
