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

import pytest
import torch

pytestmark = pytest.mark.contract

triton = pytest.importorskip("triton")

from vseries.lab import recompile  # noqa: E402  (after importorskip)

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


def _reference(x, w1, w2, s1, s2, tw, ti):
    def q(t):
        s = t.abs().max() / 448  # as scaled_fp8_quant: no floor, reciprocal scale
        inv = torch.where(s == 0, 0.0, 1.0 / s)
        return (t * inv).clamp(-448, 448).to(FP8).float() * s

    xq, out = q(x.float()), torch.zeros(x.shape, device=x.device)
    hs = []
    for k in range(TOPK):
        e = int(ti[0, k])
        g = xq @ (w1[e].float() * s1[e]).T
        hs.append((torch.nn.functional.silu(g[:, :I]) * g[:, I:]).to(x.dtype).float())
    hq = q(torch.stack(hs))
    for k in range(TOPK):
        e = int(ti[0, k])
        out += tw[0, k] * (hq[k] @ (w2[e].float() * s2[e]).T)
    return out


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
    ref = _reference(x, w1, w2, s1, s2, tw, ti)
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
