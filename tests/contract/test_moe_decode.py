"""Contract of the FP8 MoE decode patch: a one-token per-tensor FP8 MoE layer is two kernels.

v0.21.0 runs a MoE layer through Triton as 7-9 kernels (routing alignment, activation
quantisation with its max-reduction and memset, GEMM1, SiLU-and-mul, a second quantisation,
GEMM2, the top-k sum); at one token (Qwen3-30B-A3B, H200) that is 36.8 us for 9 us of weight
traffic, 24% of the read roofline. The patch's promise, against whichever vLLM imports first:

- CPU: the layer's modular kernel as the FP8 oracle builds it for the decode backend (the
  first experts class of the backend ``--moe-backend triton_fp8_decode`` names that accepts
  the layer; where no such backend exists, the TRITON backend, whose ``fused_experts`` the
  v0.21.0 line's patch changes), for one token with per-tensor FP8 weights and dynamic
  per-tensor activation scales, on a mocked SM90 platform, launches exactly two kernels, both
  Triton, and no vLLM custom op (quantisation, alignment, activation, sum). Triton launches
  are recorded and not run, and every vLLM custom op the call reaches is recorded (on this
  host they cannot run).
- CPU, numerics: the patch's ``fused_moe_fp8_decode`` (both lines have it) at every batch
  size it accepts, 1 to 16 tokens, within 6% of a float32 reference, under Triton's
  interpreter with the GPU's rounding (static and dynamic scales, expert parallelism, split-K,
  repeated and -1 top-k ids); the base has no such function.
- CPU, what the GPU compiles: every compile key the patch's JIT warm-up registers (v0.34.0's
  framework, skipped on a line without it) for four layer shapes, static and dynamic scales,
  with and without an expert map, compiles for sm_90 with the pinned Triton, and both
  kernels' GEMMs are FP8 wgmma (e4m3 x e4m3): the warm-up's own expansion with Triton's sm_90
  binder in place of the GPU's, so a kernel or Triton change that breaks the SM90 build
  fails here, not at a GPU host's start-up.
- CUDA (SM90, skipped elsewhere): the same call under CUDA-graph replay launches two CUDA
  kernels (profiler), and its output is within 4% (max |err| / max |ref|) of a float32
  reference on the dequantised weights with the activations quantised per tensor.

(Ported to v0.34.0: the v0.21.0 version called ``fused_experts``; the v0.34.0 port keeps
``fused_experts`` as it is and adds an opt-in backend of the oracle, so the promise is
stated on the serving path, the modular kernel, which both lines have.)

Base v0.34.0 fails: prepare reaches vLLM's quantisation custom op first, and TritonExperts
then launches ``fused_moe_kernel`` twice among other kernels. Run from the workspace root:
``PYTHONPATH=<vllm tree> python -P -m pytest -m contract tests/contract/test_moe_decode.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import sys

import pytest
import torch

pytestmark = pytest.mark.contract

triton = pytest.importorskip("triton")

from vseries.lab import moe_reference, recompile  # noqa: E402  (after importorskip)

recompile.use_vllm_tree()

FP8 = torch.float8_e4m3fn
E, TOPK, H, I = 128, 8, 2048, 768  # noqa: E741  (Qwen3-30B-A3B: experts, top-k, hidden, inter)


class _CustomOps:
    """Stands in for ``vllm._custom_ops``: records each op the call reaches and raises, as
    the op cannot run on this host (no CUDA kernels)."""

    def __init__(self):
        self.called: list[str] = []

    def __getattr__(self, name):
        def op(*args, **kwargs):
            self.called.append(name)
            raise RuntimeError(f"vLLM custom op {name} reached")

        return op


def _layer(device):
    g = torch.Generator(device=device).manual_seed(0)
    w1 = (torch.randn(E, 2 * I, H, device=device, generator=g) / 16).to(FP8)
    w2 = (torch.randn(E, H, I, device=device, generator=g) / 16).to(FP8)
    s1 = torch.rand(E, device=device, generator=g) / 2 + 0.5
    s2 = torch.rand(E, device=device, generator=g) / 2 + 0.5
    x = torch.randn(1, H, device=device, generator=g).to(torch.bfloat16)
    tw, ti = torch.topk(torch.rand(1, E, device=device, generator=g).softmax(-1), TOPK)
    return w1, w2, s1, s2, x, tw, ti.to(torch.int32)


def _decode_backend_kernel(device, s1, s2):
    """The modular kernel the FP8 oracle's decode backend builds for this layer."""
    config = importlib.import_module("vllm.model_executor.layers.fused_moe.config")
    fp8 = importlib.import_module("vllm.model_executor.layers.fused_moe.oracle.fp8")
    mk = importlib.import_module("vllm.model_executor.layers.fused_moe.modular_kernel")
    act = importlib.import_module("vllm.model_executor.layers.fused_moe.activation")
    qu = importlib.import_module("vllm.model_executor.layers.quantization.utils.quant_utils")

    fields = {f.name for f in dataclasses.fields(config.FusedMoEConfig)}
    inter = (
        "intermediate_size"
        if "intermediate_size" in fields
        else ("intermediate_size_per_partition")
    )
    moe_config = config.FusedMoEConfig(
        num_experts=E,
        experts_per_token=TOPK,
        hidden_dim=H,
        num_local_experts=E,
        num_logical_experts=E,
        moe_parallel_config=config.FusedMoEParallelConfig.make_no_parallel(),
        activation=act.MoEActivation.SILU,
        in_dtype=torch.bfloat16,
        device=device,
        routing_method=config.RoutingMethodType.TopK,
        max_num_tokens=512,
        **{inter: I},
    )
    backend = _decode_backend(fp8)
    classes = fp8.backend_to_kernel_cls(backend)
    experts_cls = next(
        cls
        for cls in classes
        if cls.is_supported_config(
            cls,
            moe_config,
            qu.kFp8StaticTensorSym,
            qu.kFp8DynamicTensorSym,
            mk.FusedMoEActivationFormat.Standard,
        )[0]
    )
    qc = config.fp8_w8a8_moe_quant_config(w1_scale=s1, w2_scale=s2, a1_scale=None, a2_scale=None)
    kernel = fp8.make_fp8_moe_kernel(qc, moe_config, experts_cls, backend)
    return kernel, act.MoEActivation.SILU


def _decode_backend(fp8):
    """The FP8 backend ``--moe-backend triton_fp8_decode`` names, else TRITON (a tree
    without that backend: the base, the v0.21.0 line)."""
    try:
        return fp8.map_fp8_backend("triton_fp8_decode")
    except (AttributeError, ValueError):
        return fp8.Fp8MoeBackend.TRITON


def _init_workspace(device):
    """vLLM's workspace manager, as the GPU worker sets it up (the modular kernel's
    scratch comes from it)."""
    try:
        workspace = importlib.import_module("vllm.v1.worker.workspace")
    except ImportError:
        return
    workspace.init_workspace_manager(torch.device(device))


def _run(kernel, silu, w1, w2, x, tw, ti):
    return kernel.apply(
        x, w1, w2, tw, ti, activation=silu, global_num_experts=E, expert_map=None,
        apply_router_weight_on_input=False,
    )  # fmt: skip


def test_one_token_layer_is_two_triton_kernels(monkeypatch, mock_sm90):
    from triton.runtime.jit import JITFunction

    # import first: import-time checks must see this host, the call an SM90 GPU
    importlib.import_module("vllm.model_executor.layers.fused_moe.fused_moe")
    importlib.import_module("vllm.model_executor.layers.fused_moe.oracle.fp8")
    importlib.import_module("vllm.model_executor.layers.fused_moe.modular_kernel")
    for name in (
        "vllm.model_executor.layers.fused_moe.experts.triton_moe",
        "vllm.model_executor.layers.fused_moe.experts.triton_fp8_decode_moe",
        "vllm.model_executor.layers.fused_moe.prepare_finalize.no_dp_ep",
    ):
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    fake = mock_sm90()
    # H200 runs FP8 (v0.34.0's TritonExperts asks before taking FP8 layers)
    monkeypatch.setattr(type(fake), "supports_fp8", classmethod(lambda cls: True))
    ops = _CustomOps()
    for module in list(importlib.sys.modules.values()):
        name = getattr(module, "__name__", "")
        if name.startswith("vllm.model_executor.layers.fused_moe") and hasattr(module, "ops"):
            monkeypatch.setattr(module, "ops", ops)
    try:  # the decode path asks for the SM count of the device
        fd = importlib.import_module("vllm.model_executor.layers.fused_moe.fused_moe_decode")
        monkeypatch.setattr(fd, "_num_sms", lambda index: 132)
    except ImportError:
        pass
    _init_workspace("cpu")
    # the workspace manager releases cached accelerator memory before it grows; none here
    monkeypatch.setattr(torch.accelerator, "empty_cache", lambda: None)

    launched: list[JITFunction] = []

    def record(self, *args, grid, warmup, **kwargs):
        launched.append(self)

    monkeypatch.setattr(JITFunction, "run", record)

    w1, w2, s1, s2, x, tw, ti = _layer("cpu")
    try:
        kernel, silu = _decode_backend_kernel("cpu", s1, s2)
        _run(kernel, silu, w1, w2, x, tw, ti)
    except RuntimeError as e:
        if not ops.called:
            raise
        print(f"stopped: {e}")
    names = [k.fn.__name__ for k in launched]
    assert ops.called == [], f"vLLM custom ops (non-Triton kernels) reached: {ops.called}"
    assert len(launched) == 2, f"{len(launched)} Triton launches: {names}"


@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
    reason="the decode path runs on SM90 GPUs",
)
def test_one_token_layer_kernels_and_numerics_cuda():
    from torch.profiler import ProfilerActivity, profile

    _init_workspace("cuda")
    w1, w2, s1, s2, x, tw, ti = _layer("cuda")
    kernel, silu = _decode_backend_kernel("cuda", s1, s2)
    out = _run(kernel, silu, w1, w2, x, tw, ti)
    ref, _ = moe_reference.layer(w1, w2, s1, s2, x, tw, ti)
    err = float((out.float() - ref).abs().max() / ref.abs().max())
    assert err < 0.04, err
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _run(kernel, silu, w1, w2, x, tw, ti)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    kernels = [ev.name for ev in prof.events() if ev.device_type.name == "CUDA"]
    assert len(kernels) == 2, kernels


# --- CPU: both kernels' numerics at every batch size, in Triton's interpreter -------------
#
# The kernels accept up to 16 tokens; which batches take them is the experts class's rule. Here
# ``fused_moe_fp8_decode`` itself runs at every M from 1 to 16 on a small layer whose hidden and
# intermediate sizes are no multiple of the tiles (masked tails): static and dynamic scales,
# expert parallelism with a token routed only to other ranks, split-K in both GEMMs, a repeated
# and a -1 top-k id. The interpreter's own rounding to FP8 and bf16 is wrong
# (vseries.lab.standins.rtne_downcasts puts the GPU's in its place), so the figures are the
# kernels' arithmetic, not the emulator's.

NUM_E, NUM_TOPK, NUM_H, NUM_I = 8, 2, 320, 80  # 5 tiles of 64 (K steps of 128), 3 of 32
# max |err| / max |ref| against the float32 reference on the dequantised weights, which
# rounds where the kernels do; their fp32 sums and SiLU differ in the last bits, which can move
# a bf16 intermediate by one step and with it the dynamic scale of GEMM2 and every rounding to
# FP8 after it: 0.9-3.7% over the cases below. One FP8 e4m3 step is up to 6.25% of a value; a
# token, a split or an expert left out or counted twice is far beyond that.
NUM_TOL = 0.06
NUM_CASES = (
    [("dense", m, static, None) for m in range(1, 17) for static in (True, False)]
    + [("ep", m, static, None) for m in (1, 2, 3, 16) for static in (True, False)]
    + [("split-k", m, False, (2, 2)) for m in (1, 5, 16)]
    + [("repeat", 3, False, None)]
)


# hidden, intermediate, top-k of the layers the warm-up registers: Qwen3-30B-A3B, DeepSeek-V3
# TP8 (split-K in GEMM1, quantized first at three tokens with dynamic scales), Mixtral-8x7B
# (quantized first from two tokens), and a shape that splits GEMM2's K
WARMUP_LAYERS = {
    "qwen3-30b-a3b": (2048, 768, 8),
    "dsv3-tp8": (7168, 256, 8),
    "mixtral-8x7b": (4096, 14336, 2),
    "gemm2-split-k": (256, 4096, 2),
}


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
def test_every_warmup_variant_compiles_to_fp8_wgmma_for_sm90(static, monkeypatch):
    """CPU: the warm-up's compile keys of four layer shapes (with and without an expert map)
    compile for sm_90, each kernel's GEMM an FP8 wgmma; the split-K and quantize-first
    variants are among them (a quantize-first variant only with dynamic scales)."""
    import re

    from vseries.lab import triton_jit

    try:
        jit_warmup = importlib.import_module("vllm.model_executor.warmup.jit_warmup")
        helper = importlib.import_module("vllm.model_executor.warmup.jit_warmup_triton_helper")
    except ImportError:
        pytest.skip("this line has no JIT warm-up framework (v0.34.0's jit_warmup)")
    fd = importlib.import_module("vllm.model_executor.layers.fused_moe.fused_moe_decode")
    experts = importlib.import_module(
        "vllm.model_executor.layers.fused_moe.experts.triton_fp8_decode_moe"
    )
    monkeypatch.setattr(fd, "_num_sms", lambda index: 132)  # an H100/H200's configs
    monkeypatch.setattr(helper, "_triton_key_deriver", triton_jit.sm90_key_deriver)
    registry = jit_warmup.JitWarmupRegistry(None)
    with registry.activate():
        for (hidden, inter, top_k), ep in [
            (s, ep) for s in WARMUP_LAYERS.values() for ep in (0, 1)
        ]:
            fd.register_decode_warmup(
                hidden=hidden, inter=inter, top_k=top_k, act_dtype=torch.bfloat16,
                a1_static=static, a2_static=static, has_expert_map=bool(ep),
                mul_routed_weight=(True,), max_tokens=experts.FP8_DECODE_MAX_TOKENS,
            )  # fmt: skip
    with (
        triton_jit.capture_launches(fd._moe_decode_w13_kernel) as w13,
        triton_jit.capture_launches(fd._moe_decode_w2_kernel) as w2,
    ):
        registry.warmup()
    assert len(w13) >= 2 * len(WARMUP_LAYERS) and len(w2) >= 2 * len(WARMUP_LAYERS)
    wrong = []
    for kernel, launches in ((fd._moe_decode_w13_kernel, w13), (fd._moe_decode_w2_kernel, w2)):
        for launch in launches:
            mma = set(
                re.findall(
                    r"\b(?:wgmma\.mma_async|mma\.sync)[\w.]*", triton_jit.ptx(kernel, launch)
                )
            )
            if not mma or any(not m.startswith("wgmma") or "e4m3.e4m3" not in m for m in mma):
                shown = {k: v for k, v in launch.kwargs.items() if k.isupper() or k == "K"}
                wrong.append(f"{kernel.fn.__name__} {shown}: {sorted(mma)}")
    assert not wrong, "not FP8 wgmma on sm_90:\n" + "\n".join(wrong)
    assert {x.kwargs["SPLIT_K"] for x in w13} > {1} and {x.kwargs["SPLIT_K"] for x in w2} > {1}
    modes = {x.kwargs["A_MODE"] for x in w13}  # 0: static, 1: dynamic, 2: quantized first
    assert modes == {0} if static else 2 in modes, modes


def _num_layer(case: str, m: int):
    g = torch.Generator().manual_seed(m)
    w1 = (torch.randn(NUM_E, 2 * NUM_I, NUM_H, generator=g) / 16).to(FP8)
    w2 = (torch.randn(NUM_E, NUM_H, NUM_I, generator=g) / 16).to(FP8)
    s1 = torch.rand(NUM_E, generator=g) / 2 + 0.5
    s2 = torch.rand(NUM_E, generator=g) / 2 + 0.5
    x = torch.randn(m, NUM_H, generator=g).to(torch.bfloat16)
    tw, ti = torch.topk(torch.rand(m, NUM_E, generator=g).softmax(-1), NUM_TOPK)
    ti, expert_map = ti.to(torch.int32), None
    if case == "ep":  # this rank holds experts 2..5: every token one of them but the last
        expert_map = torch.full((NUM_E,), -1, dtype=torch.int32)
        expert_map[2:6] = torch.arange(4, dtype=torch.int32)
        w1, w2, s1, s2 = w1[2:6], w2[2:6], s1[2:6], s2[2:6]
        ti[:, 0] = 2 + torch.arange(m, dtype=torch.int32) % 4
        if m > 1:
            ti[-1] = torch.tensor([0, 7], dtype=torch.int32)
    if case == "repeat":  # expert 1 twice for token 0 (the weights add), -1 for token 1
        ti = torch.tensor([[1, 1], [4, -1], [6, 3]], dtype=torch.int32)
    return w1, w2, s1, s2, x, tw, ti, expert_map


def _num_case(fd, case: str, m: int, static: bool, split) -> dict:
    """One call of the tree's ``fused_moe_fp8_decode`` against the reference."""
    w1, w2, s1, s2, x, tw, ti, expert_map = _num_layer(case, m)
    a1 = a2 = None
    if static:
        _, h = moe_reference.layer(w1, w2, s1, s2, x, tw, ti, expert_map)
        a1, a2 = (x.float().abs().max() / 448).reshape(1), (h.abs().max() / 448).reshape(1)
    ref, _ = moe_reference.layer(w1, w2, s1, s2, x, tw, ti, expert_map, a1, a2)
    config = dict(fd.get_decode_config(m, NUM_TOPK, NUM_H, NUM_I, 132))
    if split:
        config["SPLIT_K1"], config["SPLIT_K2"] = split
    out = torch.full((m, NUM_H), float("nan"), dtype=torch.bfloat16)
    fd.fused_moe_fp8_decode(
        x, w1, w2, s1, s2, tw, ti, a1, a2, out, expert_map=expert_map, config=config
    )
    out = out.float()
    return {
        "case": case,
        "m": m,
        "scales": "static" if static else "dynamic",
        "split_k": [config["SPLIT_K1"], config["SPLIT_K2"]],
        "finite": bool(out.isfinite().all()),
        "remote_token_zero": case != "ep" or m == 1 or bool(out[-1].abs().max() == 0),
        "err": float((out - ref).abs().max() / ref.abs().max()),
    }


def _num_what(r: dict) -> str:
    return f"{r['case']}, {r['m']} tokens, {r['scales']} scales, split-K {r['split_k']}"


def _cpu_child() -> None:
    """The interpreter run: one JSON line per case."""
    from vseries.lab import standins

    standins.rtne_downcasts()
    fd = importlib.import_module("vllm.model_executor.layers.fused_moe.fused_moe_decode")
    for case in NUM_CASES:
        print(json.dumps(_num_case(fd, *case)), flush=True)


def test_every_batch_size_numerics_cpu_interpreter():
    from vseries.lab import standins

    rows, output = standins.run_child(__file__)
    for r in rows:
        print(r)
    assert len(rows) == len(NUM_CASES), output
    bad = moe_reference.verdicts(rows, NUM_TOL, _num_what)
    assert not bad, bad


if __name__ == "__main__" and sys.argv[1:] == ["--cpu"]:
    _cpu_child()
