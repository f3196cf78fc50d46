#!/usr/bin/env python3
"""H200 benchmark of the per-tensor FP8 MoE layer as vLLM's FP8 oracle builds it: the modular
kernel (prepare, experts, finalize) of a backend's first experts class that accepts the layer,
timed against the HBM read roofline.

Variants per row, in the tree it runs in (``--variant`` names the tree):

- ``default``: the series' decode backend where the tree has one (``--moe-backend
  triton_fp8_decode``: ``TritonOrFp8DecodeExperts``, the two decode kernels at the batch
  sizes it takes, else ``TritonExperts``), else the TRITON backend (plain v0.34.0:
  ``TritonExperts``);
- ``general`` (trees with the decode backend): the TRITON backend of the same tree,
  ``TritonExperts`` with the series' configs, which the series' ``auto`` runs for these
  layers on SM90;
- ``decode16`` (``--decode16``, the series): the decode kernels taken at every batch of up to
  16 tokens (the path's own rule stops at 2): where its cliff is;
- ``decode16m`` (``--decode16-split-by-batch``, the series): the same with split-K sized from
  the batch's programs, not one token's (``benchmarks/decode_split.py``);
- ``flashinfer`` (``--flashinfer``): the FLASHINFER_CUTLASS backend, FlashInfer's CUTLASS
  fused MoE (static activation scales only: v0.34.0 gives it no dynamic per-tensor layer),
  weights converted as the oracle converts them, autotuned with FlashInfer's own autotuner
  for the batch buckets up to the largest M before it is timed, as vLLM's start-up does.

Method (``benchmarks/harness.py``): every row under CUDA-graph replay with 8 routings cycled
inside the graph (no expert stays in L2), median and range of the replays, bytes from the
distinct experts each routing touches, read bandwidth measured in the same run. Numerics:
max |out - ref| / max |ref| against a float32 reference on the dequantised FP8 weights with
the activations quantised per tensor as vLLM does (``bench_moe_decode.reference``).

    cd /root/vllm-<tree> && PYTHONPATH=/root/site:/root/vllm-<tree>:<ws> \\
        python3 -m benchmarks.bench_moe_layer --variant <tree> --out moe_layer-<tree>.json
"""

from __future__ import annotations

import contextlib
import sys
from functools import partial

import torch

from benchmarks import decode_split, harness, moe_layer, shapes
from benchmarks.bench_moe_decode import make_layer, reference, rel_err
from vseries import results

BATCHES = (*range(1, 17), 32, 64)
SCALES = ("static", "dynamic")


def candidates() -> list[tuple[type, str]]:
    """(experts class, FP8 backend) in this tree: the decode backend's classes where the tree
    has that backend, then the TRITON backend's, each in the oracle's order."""
    from vllm.model_executor.layers.fused_moe.oracle import fp8

    backends = [b for b in ("TRITON_FP8_DECODE", "TRITON") if b in fp8.Fp8MoeBackend.__members__]
    return [(c, b) for b in backends for c in fp8.backend_to_kernel_cls(fp8.Fp8MoeBackend[b])]


def class_names() -> list[str]:
    """The experts classes ``candidates`` names, in its order (the results file's header)."""
    return [c.__name__ for c, _ in candidates()]


def build(cls, cfg, s1, s2, a1, a2, backend: str = "TRITON"):
    """The modular kernel the oracle makes for ``cls``, ``backend`` and this layer."""
    from vllm.model_executor.layers.fused_moe.oracle import fp8

    be = fp8.Fp8MoeBackend[backend]
    qc = fp8.make_fp8_moe_quant_config(be, w1_scale=s1, w2_scale=s2, a1_scale=a1, a2_scale=a2)
    return fp8.make_fp8_moe_kernel(qc, cfg, cls, be)


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


@contextlib.contextmanager
def decode_up_to(n: int):
    """The series' decode path taken at every batch of up to ``n`` tokens (its module's rule)."""
    from vllm.model_executor.layers.fused_moe.experts import triton_fp8_decode_moe as d

    old = d.FP8_DECODE_MAX_TOKENS
    d.FP8_DECODE_MAX_TOKENS = n
    try:
        yield
    finally:
        d.FP8_DECODE_MAX_TOKENS = old


@contextlib.contextmanager
def decode_up_to_split_by_batch(n: int):
    """``decode_up_to(n)`` with split-K sized from the batch (``decode_split``)."""
    with decode_up_to(n), decode_split.split_by_batch():
        yield


class Variant:
    """One experts class to time: how to build its kernel, the weights it reads (the
    oracle's conversion), the context its calls run in, and its one-time tuning."""

    def __init__(self, name, cls, backend="TRITON", w1_of=None, context=None, tune=None,
                 scalar_scales=False):  # fmt: skip
        self.name, self.cls, self.backend = name, cls, backend
        # FlashInfer takes a static activation scale as a 0-D tensor, as vLLM's layer holds
        # it after loading (w13_input_scale.max()); the Triton classes take either
        self.scalar_scales = scalar_scales
        self.w1_of = w1_of or (lambda w1: w1)
        self.context = context or contextlib.nullcontext
        self.tune = tune


def flashinfer_variant(cfg) -> Variant | None:
    """FLASHINFER_CUTLASS as v0.34.0's oracle builds it for per-tensor FP8 on SM90: w13 rows
    swapped to [up; gate] (``swap_w13_to_w31``), FlashInfer's autotuner run once per layer
    for the batch buckets up to ``cfg.max_num_tokens`` (vLLM's start-up tunes the same way)."""
    from vllm.model_executor.layers.fused_moe.experts import flashinfer_cutlass_moe as fim
    from vllm.model_executor.layers.quantization.utils import flashinfer_utils as fu

    cls = fim.FlashInferExperts
    if not cls._supports_current_device():
        return None

    def tune(call, rts):
        from flashinfer.autotuner import autotune

        with autotune(True):
            call(*rts[0])
        torch.cuda.synchronize()

    return Variant(
        "flashinfer", cls, "FLASHINFER_CUTLASS", fu.swap_w13_to_w31, tune=tune, scalar_scales=True
    )


def variants_for(cfg, static: bool, args) -> dict[str, Variant]:
    usable = [(c, b) for c, b in candidates() if accepts(c, cfg, static)]
    out: dict[str, Variant] = {}
    if usable:
        out["default"] = Variant("default", *usable[0])
    general = [(c, b) for c, b in usable if c.__name__ == "TritonExperts"]
    if general and general[0][0] is not usable[0][0]:
        out["general"] = Variant("general", *general[0])
        if args.decode16:
            out["decode16"] = Variant("decode16", *usable[0], context=partial(decode_up_to, 16))
        if args.decode16_split_by_batch:
            out["decode16m"] = Variant(
                "decode16m", *usable[0], context=partial(decode_up_to_split_by_batch, 16)
            )
    if args.flashinfer and static:
        fi = flashinfer_variant(cfg)
        if fi is not None:
            out["flashinfer"] = fi
    return out


def run_variant(v: Variant, shape, scale, layer, a, bw, rows):
    e, topk, h, i = shapes.MOE_SHAPES[shape]
    w1, w2, s1, s2 = layer
    static = scale == "static"
    a1 = torch.tensor([0.02], device="cuda") if static else None
    a2 = torch.tensor([0.01], device="cuda") if static else None
    if static and v.scalar_scales:
        a1, a2 = a1.reshape(()), a2.reshape(())
    cfg = moe_layer.fused_moe_config(e, topk, h, i, max(a.batches))
    try:
        kernel = build(v.cls, cfg, s1, s2, a1, a2, v.backend)
        w1k = v.w1_of(w1)
    except Exception as exc:  # one failing build must not lose the run
        rows.append(results.failed("moe_layer", shape, scale, 0, v.name, exc))
        print(f"{shape} {scale} {v.name}: build failed: {exc}", flush=True)
        return
    tuned = v.tune is None
    for m in a.batches:
        try:
            with v.context():
                g = torch.Generator(device="cuda").manual_seed(m)
                x = (torch.randn(m, h, device="cuda", generator=g) / 4).bfloat16()
                rts = harness.routings(m, e, topk)
                call = layer_call(kernel, x, w1k, w2, e)
                if not tuned:
                    v.tune(call, rts)
                    tuned = True
                out = call(*rts[0])
                ref = reference(x, w1, w2, s1, s2, *rts[0], a1, a2)
                err = rel_err(out, ref)
                t = harness.time_graph([partial(call, *r) for r in rts], reps=a.reps)
            nbytes = sum(harness.moe_bytes(r[1], h, i) for r in rts) // len(rts)
            pct = harness.roofline_pct(nbytes, t.us, bw)
            rows.append(
                results.Row(
                    "moe_layer",
                    shape,
                    scale,
                    m,
                    v.name,
                    t.us,
                    t.us_min,
                    t.us_max,
                    nbytes,
                    pct,
                    extra={"class": v.cls.__name__, "rel_err": round(err, 5)},
                )  # fmt: skip
            )
            print(
                f"{shape:14} {scale:7} M={m:3} {v.name:10} {t.us:8.1f} us "
                f"({t.us_min:.1f}-{t.us_max:.1f}) {pct:5.1f}% err {err:.4f}",
                flush=True,
            )
        except Exception as exc:
            rows.append(results.failed("moe_layer", shape, scale, m, v.name, exc))
            print(f"{shape} {scale} M={m} {v.name}: {exc}", flush=True)


def main() -> int:
    ap = harness.arguments(__doc__, BATCHES, reps=30)
    ap.add_argument("--scales", nargs="*", default=list(SCALES))
    ap.add_argument("--flashinfer", action="store_true", help="add FLASHINFER_CUTLASS (static)")
    ap.add_argument("--decode16", action="store_true", help="add the decode path up to M=16")
    ap.add_argument(
        "--decode16-split-by-batch",
        action="store_true",
        help="add the decode path up to M=16 with split-K sized from the batch (decode_split.py)",
    )
    a = ap.parse_args()

    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.v1.worker import workspace

    workspace.init_workspace_manager(torch.device("cuda"))
    bw = harness.read_bandwidth()
    head = harness.header(
        "moe_layer", a.variant, bw, classes=class_names(), batches=a.batches,
    )  # fmt: skip
    rows: list[results.Row] = []
    with set_current_vllm_config(VllmConfig()):
        for shape in a.shapes:
            e, topk, h, i = shapes.MOE_SHAPES[shape]
            layer = make_layer(e, h, i, seed=1)
            for scale in a.scales:
                cfg = moe_layer.fused_moe_config(e, topk, h, i, max(a.batches))
                for v in variants_for(cfg, scale == "static", a).values():
                    run_variant(v, shape, scale, layer, a, bw, rows)
                    results.write(a.out, head, rows)
    results.write(a.out, head, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
