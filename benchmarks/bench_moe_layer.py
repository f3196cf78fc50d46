#!/usr/bin/env python3
"""H200 benchmark of the per-tensor FP8 MoE layer as vLLM's FP8 oracle builds it for its
TRITON backend (v0.34.0 on): the modular kernel (prepare, experts, finalize) of the first
experts class of ``backend_to_kernel_cls(TRITON)`` that accepts the layer, timed against the
HBM read roofline.

Variants per row, in the tree it runs in (``--variant`` names the tree):

- ``default``: what the TRITON backend runs in this tree (plain v0.34.0: ``TritonExperts``;
  the series: ``TritonOrFp8DecodeExperts``, the two decode kernels at the batch sizes it
  takes, else ``TritonExperts``);
- ``general`` (trees with more than one candidate class): ``TritonExperts`` alone in the
  same tree, i.e. the series without its decode patch (with the series' other patches: the
  H200 per-tensor configs, the unspecialised ``fused_moe_kernel``).

Method (``benchmarks/harness.py``): every row under CUDA-graph replay with 8 routings cycled
inside the graph (no expert stays in L2), median and range of the replays, bytes from the
distinct experts each routing touches, read bandwidth measured in the same run. Numerics:
max |out - ref| / max |ref| against a float32 reference on the dequantised FP8 weights with
the activations quantised per tensor as vLLM does (``bench_moe_decode.reference``).

    cd /root/vllm-<tree> && PYTHONPATH=/root/site:/root/vllm-<tree>:<ws> \\
        python3 -m benchmarks.bench_moe_layer --variant <tree> --out moe_layer-<tree>.json
"""

from __future__ import annotations

import argparse
import sys
from functools import partial

import torch

from benchmarks import harness, moe_layer, shapes
from benchmarks.bench_moe_decode import make_layer, reference, rel_err
from vseries import results

BATCHES = (1, 2, 3, 4, 8, 16, 64)
SCALES = ("static", "dynamic")


def candidates():
    """The experts classes of the TRITON backend in this tree, in the oracle's order."""
    from vllm.model_executor.layers.fused_moe.oracle import fp8

    return list(fp8.backend_to_kernel_cls(fp8.Fp8MoeBackend.TRITON))


def build(cls, cfg, s1, s2, a1, a2):
    """The modular kernel the oracle makes for ``cls`` and this layer."""
    from vllm.model_executor.layers.fused_moe import config
    from vllm.model_executor.layers.fused_moe.oracle import fp8

    qc = config.fp8_w8a8_moe_quant_config(w1_scale=s1, w2_scale=s2, a1_scale=a1, a2_scale=a2)
    return fp8.make_fp8_moe_kernel(qc, cfg, cls, fp8.Fp8MoeBackend.TRITON)


def accepts(cls, cfg, static: bool) -> bool:
    """Whether ``cls`` takes this layer (the oracle's own question)."""
    from vllm.model_executor.layers.fused_moe import modular_kernel as mk
    from vllm.model_executor.layers.quantization.utils import quant_utils as qu

    act_key = qu.kFp8StaticTensorSym if static else qu.kFp8DynamicTensorSym
    std = mk.FusedMoEActivationFormat.Standard
    return bool(cls.is_supported_config(cls, cfg, qu.kFp8StaticTensorSym, act_key, std)[0])


def layer_call(kernel, x, w1, w2, e):
    """One MoE layer call for a routing (topk_weights, topk_ids)."""
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation

    def call(tw, ti):
        return kernel.apply(
            x, w1, w2, tw, ti, activation=MoEActivation.SILU, global_num_experts=e,
            expert_map=None, apply_router_weight_on_input=False,
        )  # fmt: skip

    return call


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", required=True, help="name of the tree, e.g. base or series")
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", nargs="*", default=list(shapes.MOE_SHAPES))
    ap.add_argument("--batches", nargs="*", type=int, default=list(BATCHES))
    ap.add_argument("--scales", nargs="*", default=list(SCALES))
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()

    from vllm.v1.worker import workspace

    workspace.init_workspace_manager(torch.device("cuda"))
    bw = harness.read_bandwidth()
    classes = candidates()
    head = harness.header(
        "moe_layer", a.variant, bw, classes=[c.__name__ for c in classes], batches=a.batches
    )
    rows: list[results.Row] = []
    for shape in a.shapes:
        e, topk, h, i = shapes.MOE_SHAPES[shape]
        w1, w2, s1, s2 = make_layer(e, h, i, seed=1)
        for scale in a.scales:
            static = scale == "static"
            a1 = torch.tensor([0.02], device="cuda") if static else None
            a2 = torch.tensor([0.01], device="cuda") if static else None
            cfg = moe_layer.fused_moe_config(e, topk, h, i, max(BATCHES))
            usable = [c for c in classes if accepts(c, cfg, static)]
            variants = {"default": usable[0]} if usable else {}
            general = [c for c in usable if c.__name__ == "TritonExperts"]
            if general and general[0] is not usable[0]:
                variants["general"] = general[0]
            for name, cls in variants.items():
                try:
                    kernel = build(cls, cfg, s1, s2, a1, a2)
                except Exception as exc:  # one failing build must not lose the run
                    rows.append(results.failed("moe_layer", shape, scale, 0, name, exc))
                    continue
                for m in a.batches:
                    try:
                        g = torch.Generator(device="cuda").manual_seed(m)
                        x = (torch.randn(m, h, device="cuda", generator=g) / 4).bfloat16()
                        rts = harness.routings(m, e, topk)
                        call = layer_call(kernel, x, w1, w2, e)
                        out = call(*rts[0])
                        ref = reference(x, w1, w2, s1, s2, *rts[0], a1, a2)
                        err = rel_err(out, ref)
                        t = harness.time_graph([partial(call, *r) for r in rts], reps=a.reps)
                        nbytes = sum(harness.moe_bytes(r[1], h, i) for r in rts) // len(rts)
                        rows.append(
                            results.Row(
                                "moe_layer",
                                shape,
                                scale,
                                m,
                                name,
                                t.us,
                                t.us_min,
                                t.us_max,
                                nbytes,
                                harness.roofline_pct(nbytes, t.us, bw),
                                extra={"class": cls.__name__, "rel_err": round(err, 5)},
                            )  # fmt: skip
                        )
                        print(
                            f"{shape:14} {scale:7} M={m:3} {name:8} {t.us:8.1f} us "
                            f"({t.us_min:.1f}-{t.us_max:.1f}) "
                            f"{harness.roofline_pct(nbytes, t.us, bw):5.1f}% err {err:.4f}",
                            flush=True,
                        )
                    except Exception as exc:
                        rows.append(results.failed("moe_layer", shape, scale, m, name, exc))
                        print(f"{shape} {scale} M={m} {name}: {exc}", flush=True)
                    results.write(a.out, head, rows)
    results.write(a.out, head, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
