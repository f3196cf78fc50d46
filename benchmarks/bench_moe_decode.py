#!/usr/bin/env python3
"""H200 benchmark of the FP8 MoE decode path: the whole layer against the HBM read roofline.

Times vLLM's ``fused_experts`` (the whole MoE layer: activation quantisation, alignment, both
GEMMs, activation, top-k sum; routing excluded) for per-tensor FP8 weights with static and
with dynamic per-tensor activation scales, three model shapes and batches 1..64, in the tree
it runs in (``--variant`` names it). Variants per row:

- ``default``: the tree's own path (v0.21.0: the 7-11 kernel pipeline; the series: the
  two-kernel decode path, ``fused_moe_decode.py``, at the batches its rule
  ``use_fp8_decode_path`` takes, else the general path);
- ``decode_off`` (trees with the decode path): the same tree with
  ``VLLM_USE_TRITON_MOE_FP8_DECODE=0``, i.e. the series without the decode patch;
- ``cfg:<name>`` (M in ``--sweep-batches``, default 1, 4, 16): the decode kernels called
  directly with the heuristic's config and its neighbours (tiles, split-K, stages), also at
  batches the dispatch rule leaves to the general path, to check the heuristic and the rule;
- ``prequant`` (dynamic scales, M in ``--sweep-batches``): vLLM's own quantisation kernel,
  then the decode kernels on FP8 input, against the in-kernel dynamic scale (how far
  reading every token in every program pays);
- ``in_kernel`` (dynamic scales, M in ``--sweep-batches``): the decode path with the dynamic
  scale always found in GEMM1, whatever ``_IN_KERNEL_SCALE_MAX_ELEMS`` says; with
  ``prequant`` beside it, the two sides of that threshold at each shape and batch;
- ``l2_hot`` (M in ``--sweep-batches``): ``default`` with one routing repeated, so that its
  experts' weights stay in L2: the floor of the path when HBM bandwidth is not the limit.
  Its roofline % is not one (the bytes do not come from HBM).

Where the time goes (M in ``--breakdown-batches``, default 1; the variants in
``BREAKDOWN_VARIANTS``): each row also gets
``kernels_us``, the device time per call of each kernel, the span from the first kernel's
start to the last one's end and the gaps between them, from profiled replays of the same
graph (``harness.kernel_times``).

Method (``benchmarks/harness.py``): every row under CUDA-graph replay with 8 routings cycled
inside the graph (no expert stays in L2), median and range of 30 replays, bytes from the
distinct experts each routing touches, read bandwidth measured in the same run. Numerics of
the decode path (M <= 16): max |out - ref| / max |ref| against a float32 reference on the
dequantised FP8 weights with the activations quantised as the path does, and against
``decode_off``. Kernels per call at one token: CUDA kernels in one profiled graph replay.

    cd /root/vllm-<tree> && PYTHONPATH=/root/site:/root/vllm-<tree>:<ws> \\
        python3 -m benchmarks.bench_moe_decode --variant <tree> --out bench_moe_decode-<tree>.json

About 2-4 minutes per tree on an H200 (most of it Triton compiles).
"""

from __future__ import annotations

import argparse
import dataclasses
import os

import torch

from benchmarks import harness, shapes
from vseries import results

FP8 = torch.float8_e4m3fn
SCALES = ("static", "dynamic")
SWEEP_BATCHES = (1, 4, 16)  # default --sweep-batches: cfg:/prequant variants (device time)
# variants profiled per kernel at --breakdown-batches (a profiler start per row costs time)
BREAKDOWN_VARIANTS = {
    "default", "decode_off", "cfg:heuristic", "prequant", "in_kernel",
}  # fmt: skip


def make_layer(e: int, h: int, i: int, seed: int):
    """FP8 w13 [E, 2I, H], w2 [E, H, I] (randn / 16), per-expert scales in [0.5, 1)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    w1 = (torch.randn(e, 2 * i, h, device="cuda", generator=g) / 16).to(FP8)
    w2 = (torch.randn(e, h, i, device="cuda", generator=g) / 16).to(FP8)
    s1 = torch.rand(e, device="cuda", generator=g) / 2 + 0.5
    s2 = torch.rand(e, device="cuda", generator=g) / 2 + 0.5
    return w1, w2, s1, s2


def reference(x, w1, w2, s1, s2, tw, ti, a1, a2) -> torch.Tensor:
    """float32 MoE on dequantised weights; activations quantised per tensor as vLLM does."""
    i = w2.size(2)

    def q(t, s):
        s = s if s is not None else t.abs().max() / 448  # as scaled_fp8_quant
        inv = torch.where(s == 0, 0.0, 1.0 / s)
        return (t * inv).clamp(-448, 448).to(FP8).float() * s

    xq = q(x.float(), a1)
    ti = ti.long()
    g = torch.stack(
        [
            torch.einsum("mh,mnh->mn", xq, w1[ti[:, k]].float() * s1[ti[:, k]][:, None, None])
            for k in range(ti.size(1))
        ],
        dim=1,
    )
    h = (torch.nn.functional.silu(g[..., :i]) * g[..., i:]).to(x.dtype).float()
    hq = q(h, a2)
    y = sum(
        torch.einsum("mi,mhi->mh", hq[:, k], w2[ti[:, k]].float() * s2[ti[:, k]][:, None, None])
        * tw[:, k, None]
        for k in range(ti.size(1))
    )
    return y


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.float() - ref).abs().max() / ref.abs().max().clamp(min=1e-12))


def kernels_per_call(fn) -> int:
    """CUDA kernels launched by one call, counted in one profiled graph replay."""
    from torch.profiler import ProfilerActivity, profile

    graph = harness.capture_graph([fn])
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    return sum(1 for ev in prof.events() if ev.device_type.name == "CUDA")


def sweep_configs(base: dict) -> dict[str, dict]:
    """The heuristic's config and neighbours (tile, K step, split-K, stages), for both
    kernels together and (``w13_*``, ``w2_*``) for one of them, so that the per-kernel times
    of the breakdown say which kernel a change helps. The runs of 2026-12-01
    (raw/round6/kernels-a) also had PDL and an L2 prefetch of w2 (dropped)."""
    out = {"heuristic": dict(base)}
    out["bk128"] = dict(base, BLOCK_K1=128, BLOCK_K2=128)
    out["bk256"] = dict(base, BLOCK_K1=256, BLOCK_K2=256)
    out["w13_bk128"] = dict(base, BLOCK_K1=128)
    out["w2_bk128"] = dict(base, BLOCK_K2=128)
    out["w2_bn32"] = dict(base, BLOCK_N=32)
    out["w2_bn128"] = dict(base, BLOCK_N=128)
    out["w2_split_x2"] = dict(base, SPLIT_K2=base["SPLIT_K2"] * 2)
    out["split_x2"] = dict(base, SPLIT_K1=base["SPLIT_K1"] * 2, SPLIT_K2=base["SPLIT_K2"] * 2)
    if base["SPLIT_K1"] > 1 or base["SPLIT_K2"] > 1:
        out["split_half"] = dict(
            base, SPLIT_K1=max(1, base["SPLIT_K1"] // 2), SPLIT_K2=max(1, base["SPLIT_K2"] // 2)
        )
    out["stages3"] = dict(base, num_stages=3)
    out["tile128"] = dict(base, BLOCK_I=64, BLOCK_N=128)
    return out


def decode_module():
    """The tree's decode-path module, or None on a tree without it (v0.21.0)."""
    try:
        from vllm.model_executor.layers.fused_moe import fused_moe_decode
    except ImportError:
        return None
    return fused_moe_decode


def env_decode(on: bool) -> None:
    """VLLM_USE_TRITON_MOE_FP8_DECODE, read by vLLM at call time (no envs cache in this process)."""
    os.environ["VLLM_USE_TRITON_MOE_FP8_DECODE"] = "1" if on else "0"


@dataclasses.dataclass
class Case:
    """One (shape, activation-scale kind, batch) of the benchmark and its inputs."""

    shape: str
    scale: str
    m: int
    topk: int
    h: int
    i: int
    layer: tuple
    seed: int

    def __post_init__(self):
        w1, w2, s1, s2 = self.layer
        e = w1.size(0)
        static = self.scale == "static"
        self.a1 = torch.full((1,), 0.02, device="cuda") if static else None
        self.a2 = torch.full((1,), 0.05, device="cuda") if static else None
        from vllm.model_executor.layers.fused_moe.config import fp8_w8a8_moe_quant_config

        self.qc = fp8_w8a8_moe_quant_config(
            w1_scale=s1, w2_scale=s2, a1_scale=self.a1, a2_scale=self.a2
        )
        self.routings = harness.routings(self.m, e, self.topk, seed=self.seed)
        g = torch.Generator(device="cuda").manual_seed(self.seed)
        self.xs = [
            torch.randn(self.m, self.h, device="cuda", dtype=torch.bfloat16, generator=g)
            for _ in self.routings
        ]
        self.outs = [torch.empty_like(x) for x in self.xs]
        self.nbytes = sum(harness.moe_bytes(ids, self.h, self.i) for _, ids in self.routings) / len(
            self.routings
        )

    def fused(self, k: int):
        """vLLM's fused_experts on routing k (whatever path the tree and env choose)."""
        from vllm.model_executor.layers.fused_moe import fused_moe as fm

        w1, w2, _, _ = self.layer
        x, (tw, ti) = self.xs[k], self.routings[k]
        return lambda: fm.fused_experts(x, w1, w2, tw, ti, quant_config=self.qc)

    def direct(self, k: int, cfg: dict):
        """The decode kernels with an explicit config, on routing k."""
        fd = decode_module()
        w1, w2, s1, s2 = self.layer
        x, (tw, ti) = self.xs[k], self.routings[k]
        out = self.outs[k]
        return lambda: fd.fused_moe_fp8_decode(
            x, w1, w2, s1, s2, tw, ti, self.a1, self.a2, out, config=cfg
        )

    def in_kernel(self, k: int):
        """The decode path with the dynamic scale found in GEMM1 at any size (the threshold
        ``_IN_KERNEL_SCALE_MAX_ELEMS`` lifted for this call only), on routing k."""
        fd = decode_module()
        w1, w2, s1, s2 = self.layer
        x, (tw, ti) = self.xs[k], self.routings[k]
        out = self.outs[k]

        def run():
            was = fd._IN_KERNEL_SCALE_MAX_ELEMS
            fd._IN_KERNEL_SCALE_MAX_ELEMS = 1 << 62
            try:
                fd.fused_moe_fp8_decode(x, w1, w2, s1, s2, tw, ti, None, None, out)
            finally:
                fd._IN_KERNEL_SCALE_MAX_ELEMS = was

        return run

    def prequant(self, k: int):
        """vLLM's dynamic per-tensor quantisation kernel, then the decode kernels."""
        from vllm import _custom_ops as ops

        fd = decode_module()
        w1, w2, s1, s2 = self.layer
        x, (tw, ti) = self.xs[k], self.routings[k]
        out = self.outs[k]

        def run():
            xq, x_scale = ops.scaled_fp8_quant(x, None)
            fd.fused_moe_fp8_decode(xq, w1, w2, s1, s2, tw, ti, None, None, out, a1q_scale=x_scale)

        return run


def measure(
    case: Case,
    sweep: tuple[int, ...],
    bw: float,
    num_sms: int,
    kernels: dict,
    breakdown: tuple[int, ...] = (),
    breakdown_all: bool = False,
) -> list:
    """Every variant of one case: rows with time, range, bytes and roofline, and at the
    batches in ``breakdown`` the time per kernel (``kernels_us``, ``harness.kernel_times``)
    of the variants in ``BREAKDOWN_VARIANTS`` (all of them with ``breakdown_all``)."""
    fd = decode_module()
    rows = []
    n = len(case.routings)

    def add(variant, calls, **extra):
        t = harness.time_graph(calls)
        if case.m in breakdown and (breakdown_all or variant in BREAKDOWN_VARIANTS):
            extra = dict(extra, kernels_us=harness.kernel_times(calls, reps=1))
        row = results.Row(
            "moe-decode", case.shape, f"fp8_per_tensor_{case.scale}", case.m, variant,
            round(t.us, 2), round(t.us_min, 2), round(t.us_max, 2), int(case.nbytes),
            round(harness.roofline_pct(case.nbytes, t.us, bw), 1), extra,
        )  # fmt: skip
        rows.append(row)
        print(f"{case.shape} {case.scale} M={case.m} {variant}: {row.us} us, "
              f"{row.roofline_pct}%", flush=True)  # fmt: skip

    extra = {}
    if fd is not None and case.m <= fd.DECODE_MAX_TOKENS:
        w1, w2, s1, s2 = case.layer
        x, (tw, ti) = case.xs[0], case.routings[0]
        env_decode(True)
        out = case.fused(0)()
        ref = reference(x, w1, w2, s1, s2, tw, ti, case.a1, case.a2)
        env_decode(False)
        old = case.fused(0)()
        env_decode(True)
        extra = {
            "rel_err_vs_fp32": round(rel_err(out, ref), 5),
            "rel_err_vs_decode_off": round(rel_err(out, old.float()), 5),
            "rel_err_decode_off_vs_fp32": round(rel_err(old, ref), 5),
        }
    key = f"{case.shape}/{case.scale}"
    if case.m == 1:
        kernels[f"{key}/default"] = kernels_per_call(case.fused(0))
    add("default", [case.fused(k) for k in range(n)], **extra)
    if fd is None:
        return rows
    env_decode(False)
    if case.m == 1:
        kernels[f"{key}/decode_off"] = kernels_per_call(case.fused(0))
    add("decode_off", [case.fused(k) for k in range(n)])
    env_decode(True)
    if case.m not in sweep or case.m > fd.DECODE_MAX_TOKENS:
        return rows
    base_cfg = fd.get_decode_config(case.m, case.topk, case.h, case.i, num_sms)
    for name, cfg in sweep_configs(base_cfg).items():
        try:
            add(f"cfg:{name}", [case.direct(k, cfg) for k in range(n)], config=cfg)
        except Exception as exc:  # a config that does not fit: say so, go on
            print(f"cfg {name} failed: {exc!r}", flush=True)
    if case.scale == "dynamic":
        add("prequant", [case.prequant(k) for k in range(n)])
        add("in_kernel", [case.in_kernel(k) for k in range(n)])
    # One routing n times: its experts' weights stay in L2 after the first call, so the
    # time is the path's floor when HBM is not the limit (launches, latency chains, tails).
    add("l2_hot", [case.fused(0)] * n)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variant", required=True, help="name of the tree, e.g. base or series")
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", nargs="*", default=list(shapes.MOE_SHAPES))
    ap.add_argument("--batches", nargs="*", type=int, default=list(harness.DECODE_BATCHES))
    ap.add_argument("--scales", nargs="*", default=list(SCALES))
    ap.add_argument("--no-sweep", action="store_true", help="skip the cfg:/prequant variants")
    ap.add_argument(
        "--sweep-batches", nargs="*", type=int, default=list(SWEEP_BATCHES),
        help="batches with the cfg:/prequant variants (each must also be in --batches)",
    )  # fmt: skip
    ap.add_argument(
        "--breakdown-batches", nargs="*", type=int, default=[1],
        help="batches whose rows also get the time per kernel from a profiled replay",
    )  # fmt: skip
    ap.add_argument(
        "--breakdown-all", action="store_true",
        help="profile every variant at --breakdown-batches, not only BREAKDOWN_VARIANTS",
    )  # fmt: skip
    args = ap.parse_args()
    sweep = () if args.no_sweep else tuple(args.sweep_batches)

    fd = decode_module()
    bw = harness.read_bandwidth()
    print(f"read bandwidth {bw / 1e12:.2f} TB/s", flush=True)
    head = harness.header("moe-decode", args.variant, bw, decode_path=fd is not None)
    rows: list[results.Row] = []
    kernels: dict[str, int] = {}
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count

    for si, shape in enumerate(args.shapes):
        e, topk, h, i = shapes.MOE_SHAPES[shape]
        layer = make_layer(e, h, i, seed=si)
        for scale in args.scales:
            for m in args.batches:
                case = Case(shape, scale, m, topk, h, i, layer, seed=1000 * si + m)
                rows += measure(
                    case, sweep, bw, num_sms, kernels, tuple(args.breakdown_batches),
                    args.breakdown_all,
                )  # fmt: skip
                results.write(args.out, dict(head, kernels_per_call_m1=kernels), rows)
    results.write(args.out, dict(head, kernels_per_call_m1=kernels), rows)
    print("kernels per call at M=1:", kernels, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
