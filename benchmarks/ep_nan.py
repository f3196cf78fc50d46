"""The expert-parallel NaN of ``fused_experts`` (issue 31), on one vLLM tree; join two runs.

``fused_experts`` with an ``expert_map`` (8 local experts of 16) and per-tensor FP8
activations, the last token routed to other ranks' experts only, against a float32 reference
on the dequantised weights (the activations quantised per tensor over this rank's rows). The
caches ``fused_experts`` takes from ``torch.empty`` hold what the allocator gives: "none" (as
it comes), or a private pool whose free memory holds NaN or inf. Each cell is max |err| / max
|ref| or "NaN". ``--time`` adds the layer's time under CUDA-graph replay (dynamic scales, EP
over 2 ranks, 8 routings cycled) for the Qwen3-30B-A3B and DeepSeek-V3 TP8 shapes.

    python -m benchmarks.ep_nan --variant base --time --out base.json        # v0.34.0
    python -m benchmarks.ep_nan --variant series --time --out series.json    # the series
    python -m benchmarks.ep_nan --compare base.json series.json

Only ``vllm`` (either tree) needs to be importable; the harness is ``benchmarks.harness``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from benchmarks import harness
from vseries import results

BENCH = "ep_nan"
E_GLOBAL, E_LOCAL = 16, 8
# name: (hidden, intermediate, top-k); the two that gave NaN on v0.21.0, a DeepSeek-V3 TP8
# slice, and one with odd sizes
SHAPES = {
    "h2048-i768-top4": (2048, 768, 4),
    "h2880-i1344-top2": (2880, 1344, 2),
    "h7168-i256-top8": (7168, 256, 8),
    "h1040-i200-top6": (1040, 200, 6),
}
MS = (1, 2, 3, 4, 8)
POISONS = ("none", "nan", "inf")
TIMED = {"qwen3-30b-a3b": (128, 8, 2048, 768), "dsv3-tp8": (256, 8, 7168, 256)}
TIMED_MS = (1, 2, 3, 4, 8, 16)


def _memory(poison: str):
    """A context in which allocations come from a pool whose free memory holds ``poison``."""
    import torch

    if poison == "none":
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def pool():
        p = torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(p):
            junk = [
                torch.full((n,), float(poison), dtype=torch.bfloat16, device="cuda")
                for n in [1 << 19] * 16 + [1 << 24] * 2
            ]
            del junk
            yield p

    return pool()


def _layer(hidden, inter, topk, m, seed):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    fp8 = torch.float8_e4m3fn
    w1 = (torch.randn(E_LOCAL, 2 * inter, hidden, device="cuda", generator=g) / 16).to(fp8)
    w2 = (torch.randn(E_LOCAL, hidden, inter, device="cuda", generator=g) / 16).to(fp8)
    s1 = torch.rand(E_LOCAL, device="cuda", generator=g) / 2 + 0.5
    s2 = torch.rand(E_LOCAL, device="cuda", generator=g) / 2 + 0.5
    x = torch.randn(m, hidden, device="cuda", generator=g).to(torch.bfloat16)
    emap = torch.full((E_GLOBAL,), -1, dtype=torch.int32, device="cuda")
    emap[4:12] = torch.arange(E_LOCAL, dtype=torch.int32, device="cuda")
    scores = torch.rand(m, E_GLOBAL, device="cuda", generator=g)
    scores[torch.arange(m), 4 + torch.arange(m) % 8] += 1  # one local expert at least
    tw, ti = torch.topk(scores.softmax(-1), topk)
    ti = ti.to(torch.int32)
    if m > 1:  # the last token: other ranks' experts only
        remote = torch.tensor([0, 1, 2, 3, 12, 13, 14, 15], device="cuda")
        ti[-1] = remote[torch.randperm(8, device="cuda", generator=g)[:topk]].to(torch.int32)
    return w1, w2, s1, s2, x, tw, ti, emap


def _reference(w1, w2, s1, s2, x, tw, ti, emap, a1=None, a2=None):
    import torch

    def q(t, s):
        s = s if s is not None else (t.abs().amax() / 448).clamp(min=1e-10)
        return (t / s).clamp(-448, 448).to(torch.float8_e4m3fn).float() * s

    inter = w2.size(2)
    loc = emap[ti.long()].long()
    valid, loc = loc >= 0, loc.clamp(min=0)
    xq = q(x.float(), a1)
    h = torch.zeros(*ti.shape, inter, device="cuda")
    for k in range(ti.size(1)):
        g = torch.einsum("mh,mnh->mn", xq, w1[loc[:, k]].float() * s1[loc[:, k], None, None])
        h[:, k] = torch.nn.functional.silu(g[:, :inter]) * g[:, inter:]
    h = (h * valid[..., None]).to(x.dtype).float()
    hq, out = q(h, a2), torch.zeros(x.shape, device="cuda")
    for k in range(ti.size(1)):
        y = torch.einsum("mi,mhi->mh", hq[:, k], w2[loc[:, k]].float() * s2[loc[:, k], None, None])
        out += y * (tw[:, k].float() * valid[:, k])[:, None]
    return out, h


def numerics(variant: str) -> list[results.Row]:
    from vllm.model_executor.layers.fused_moe import fused_experts
    from vllm.model_executor.layers.fused_moe.config import fp8_w8a8_moe_quant_config

    rows = []
    for shape, (hidden, inter, topk) in SHAPES.items():
        for m in MS:
            w1, w2, s1, s2, x, tw, ti, emap = _layer(hidden, inter, topk, m, seed=m)
            _, h = _reference(w1, w2, s1, s2, x, tw, ti, emap)
            static = ((x.float().abs().amax() / 448).reshape(1), (h.abs().amax() / 448).reshape(1))
            for scales, (a1, a2) in (("dynamic", (None, None)), ("static", static)):
                ref, _ = _reference(w1, w2, s1, s2, x, tw, ti, emap, a1, a2)
                qc = fp8_w8a8_moe_quant_config(
                    w1_scale=s1, w2_scale=s2, a1_scale=a1, a2_scale=a2, per_act_token_quant=False
                )
                for poison in POISONS:
                    with _memory(poison) as pool:
                        pooled = fused_experts(
                            x,
                            w1,
                            w2,
                            tw,
                            ti,
                            global_num_experts=E_GLOBAL,
                            expert_map=emap,
                            quant_config=qc,
                        )
                    out = pooled.float()  # outside the pool
                    del pooled, pool
                    nan = not bool(out.isfinite().all())
                    err = None if nan else float((out - ref).abs().max() / ref.abs().max())
                    extra = {"scales": scales, "poison": poison, "nan": nan, "err": err}
                    rows.append(
                        results.Row(
                            BENCH, shape, "fp8_w8a8", m, variant, None, None, None, extra=extra
                        )
                    )
    return rows


def timings(variant: str) -> list[results.Row]:
    """Dynamic scales, EP over 2 ranks (the first half of the experts local)."""
    import torch
    from vllm.model_executor.layers.fused_moe import fused_experts
    from vllm.model_executor.layers.fused_moe.config import fp8_w8a8_moe_quant_config

    rows = []
    for shape, (e, topk, hidden, inter) in TIMED.items():
        local = e // 2
        w1 = (torch.randn(local, 2 * inter, hidden, device="cuda") / 16).to(torch.float8_e4m3fn)
        w2 = (torch.randn(local, hidden, inter, device="cuda") / 16).to(torch.float8_e4m3fn)
        s = torch.ones(local, device="cuda")
        emap = torch.full((e,), -1, dtype=torch.int32, device="cuda")
        emap[:local] = torch.arange(local, dtype=torch.int32, device="cuda")
        qc = fp8_w8a8_moe_quant_config(w1_scale=s, w2_scale=s, per_act_token_quant=False)
        for m in TIMED_MS:
            x = torch.randn(m, hidden, device="cuda").to(torch.bfloat16)
            calls = [
                (
                    lambda x=x, tw=tw, ti=ti, e=e, w1=w1, w2=w2, emap=emap, qc=qc: fused_experts(
                        x, w1, w2, tw, ti, global_num_experts=e, expert_map=emap, quant_config=qc
                    )
                )
                for tw, ti in harness.routings(m, e, topk)
            ]
            t = harness.time_graph(calls)
            rows.append(
                results.Row(
                    BENCH,
                    shape,
                    "fp8_w8a8",
                    m,
                    variant,
                    t.us,
                    t.us_min,
                    t.us_max,
                    extra={"scales": "dynamic", "ep": 2},
                )
            )
    return rows


def _cell(r: dict) -> str:
    return "NaN" if r["nan"] else f"{r['err']:.3f}"


def table(runs: list[tuple[str, list[dict]]]) -> str:
    """Numerics: one line per (shape, M, scales), a cell per run and poison. Times: one line
    per (shape, M), a column per run, the ratio of the last to the first."""
    cells: dict[tuple, dict[str, str]] = {}
    times: dict[tuple, dict[str, float]] = {}
    for name, rows in runs:
        for r in rows:
            if r.get("us") is not None:
                times.setdefault((r["shape"], r["m"]), {})[name] = r["us"]
            elif "poison" in r:
                key = (r["shape"], r["m"], r["scales"])
                cells.setdefault(key, {})[f"{name} {r['poison']}"] = _cell(r)
    cols = [f"{name} {p}" for name, _ in runs for p in POISONS]
    lines = [" | ".join(["shape", "M", "scales", *cols])]
    for key, row in cells.items():
        lines.append(" | ".join([*map(str, key), *(row.get(c, "-") for c in cols)]))
    if times:
        names = [name for name, _ in runs]
        ratio = ["ratio"] if len(names) > 1 else []
        lines += ["", " | ".join(["shape", "M", *(f"{n} us" for n in names), *ratio])]
        for (shape, m), t in times.items():
            us = [t.get(n) for n in names]
            r = [f"{us[-1] / us[0]:.3f}"] if ratio and None not in us else []
            lines.append(" | ".join([shape, str(m), *(f"{u:.1f}" if u else "-" for u in us), *r]))
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="result file (JSON) of this tree")
    p.add_argument("--variant", default="tree", help="the tree's name in the table")
    p.add_argument("--time", action="store_true", help="also time the layer (graph replay)")
    p.add_argument("--time-only", action="store_true", help="time the layer, no numerics")
    p.add_argument("--compare", nargs="+", metavar="FILE", help="print the joined table")
    args = p.parse_args()
    if args.compare:
        runs = []
        for path in args.compare:
            head, rows = results.load(path)
            runs.append((head["variant"], rows))
        print(table(runs))
        return 0
    if not args.out:
        p.error("--out FILE is needed (or --compare)")
    from vllm.config import VllmConfig, set_current_vllm_config

    head = harness.header(BENCH, args.variant, None)
    with set_current_vllm_config(VllmConfig()):
        rows = [] if args.time_only else numerics(args.variant)
        results.write(args.out, head, rows)  # kept should the timing not finish
        if args.time or args.time_only:
            rows += timings(args.variant)
            results.write(args.out, head, rows)
    print(table([(args.variant, [r.as_dict() for r in rows])]))
    bad = [r for r in rows if r.extra.get("nan") or (r.extra.get("err") or 0) >= 0.06]
    print(f"{len(bad)} of {sum('err' in r.extra for r in rows)} cases NaN or >= 0.06 off")
    return 0


if __name__ == "__main__":
    sys.exit(main())
