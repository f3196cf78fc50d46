"""Contract of the dynamic per-tensor INT8 scale patch: ``fused_experts`` with INT8 w8a8
weights and dynamic per-tensor activation scales runs and gives the right output.

v0.34.0's ``_int8_quantize`` (``fused_moe/utils.py``) computes a dynamic per-tensor scale as
max|A| / 127 in A's dtype (bf16 in a bf16 model) and hands it to ``ops.scaled_int8_quant``,
whose kernel (``static_scaled_int8_quant``) reads the scale as ``float``: the call raises, on
the first GEMM's input and on the second's, with or without expert parallelism (the H200 run
of the EP test in round 15 saw it; ``TritonExperts`` reaches the same function). The patch
computes the scale in float32.

The promise, against whichever vLLM imports first (8 experts, top-2, no expert map):

- CPU: the tree's ``fused_experts_impl`` with its ``fused_moe_kernel`` run by Triton's
  interpreter and vLLM's CUDA ops replaced by torch stand-ins written to the kernels'
  semantics (``vseries.lab.standins``: the INT8 kernel reads a ``float`` scale and raises on
  another dtype, as ``const_data_ptr<float>()`` does): for 1 and 3 tokens the call returns,
  and the output is finite and within TOL of a float32 reference on the dequantised weights
  (activations quantised per tensor, as the patch promises).
- CUDA (skipped elsewhere): the same with the real ops.

Base v0.34.0 fails (RuntimeError: a BFloat16 scale); the patched tree passes. Run from the
workspace root: ``CUDA_VISIBLE_DEVICES="" PYTHONPATH=<vllm tree> python -P -m pytest -m
contract tests/contract/test_moe_int8_dynamic_scale.py``.
"""

from __future__ import annotations

import json
import sys

import pytest
import torch

pytestmark = pytest.mark.contract

triton = pytest.importorskip("triton")

from vseries.lab import recompile  # noqa: E402  (after importorskip)

# Before vLLM is imported: a plain upstream tree must not take itself for a CPU build,
# nor import the installed vLLM's modules.
recompile.use_vllm_tree()

E, TOPK = 8, 2
HIDDEN, INTER = 512, 256  # small: the interpreter runs the GEMMs in numpy
MS = (1, 3)
# max |err| / max |ref|. The reference quantises and rounds where the kernels do, so what is
# left is accumulation order and bf16 rounding moving a value across an INT8 rounding boundary
# (one step is 1/127 of the tensor's max): 1.5-1.9% measured under the interpreter with the
# patch. The base does not get that far: it raises on the scale's dtype.
TOL = 0.03


def _layer(m: int, device: str):
    """INT8 weights with a scale per expert, a bf16 batch, a routing."""
    g = torch.Generator(device=device).manual_seed(m)
    w1 = torch.randint(-127, 128, (E, 2 * INTER, HIDDEN), device=device, generator=g)
    w2 = torch.randint(-127, 128, (E, HIDDEN, INTER), device=device, generator=g)
    s1 = (torch.rand(E, device=device, generator=g) / 2 + 0.5) / (16 * 127)
    s2 = (torch.rand(E, device=device, generator=g) / 2 + 0.5) / (16 * 127)
    x = torch.randn(m, HIDDEN, device=device, generator=g).to(torch.bfloat16)
    scores = torch.rand(m, E, device=device, generator=g)
    tw, ti = torch.topk(scores.softmax(-1), TOPK)
    return w1.to(torch.int8), w2.to(torch.int8), s1, s2, x, tw, ti.to(torch.int32)


def _reference(w1, w2, s1, s2, x, tw, ti):
    """The layer in float32 on the dequantised weights, each GEMM's input quantised per
    tensor to INT8 (scale max|t| / 127, round to nearest even), each GEMM's output rounded
    to bf16 where the kernels store it."""

    def q(t):
        s = (t.abs().amax() / 127.0).clamp(min=1e-10)
        return torch.round(t / s).clamp(-128, 127) * s

    ti = ti.long()
    xq = q(x.float())
    h = torch.zeros(*ti.shape, INTER, device=x.device)
    for k in range(TOPK):
        g = torch.einsum("mh,mnh->mn", xq, w1[ti[:, k]].float() * s1[ti[:, k], None, None])
        g = g.to(x.dtype).float()  # GEMM1 stores its output in the activation dtype
        h[:, k] = torch.nn.functional.silu(g[:, :INTER]) * g[:, INTER:]
    hq = q(h.to(x.dtype).float())
    out = torch.zeros(x.shape, device=x.device)
    for k in range(TOPK):
        y = torch.einsum("mi,mhi->mh", hq[:, k], w2[ti[:, k]].float() * s2[ti[:, k], None, None])
        out += y * tw[:, k].float()[:, None]
    return out


def _case(fused_experts_impl, m: int, device: str) -> dict:
    """One call of the tree's fused_experts_impl against the reference."""
    w1, w2, s1, s2, x, tw, ti = _layer(m, device)
    ref = _reference(w1, w2, s1, s2, x, tw, ti)
    try:
        out = fused_experts_impl(
            x, w1, w2, tw, ti, "silu", use_int8_w8a8=True, global_num_experts=E,
            w1_scale=s1, w2_scale=s2, a1_scale=None, a2_scale=None,
        ).float()  # fmt: skip
    except RuntimeError as e:
        return {"m": m, "raised": str(e)[:200]}
    return {
        "m": m,
        "finite": bool(out.isfinite().all()),
        "err": float((out - ref).abs().max() / ref.abs().max()),
    }


def _verdicts(rows: list[dict]) -> list[str]:
    bad = []
    for r in rows:
        what = f"{r['m']} tokens"
        if "raised" in r:
            bad.append(f"{what}: fused_experts raised: {r['raised']}")
        elif not r["finite"]:
            bad.append(f"{what}: output not finite (NaN/inf)")
        elif not r["err"] < TOL:
            bad.append(f"{what}: max |err| / max |ref| = {r['err']:.3f} >= {TOL}")
    return bad


def _cpu_child() -> None:
    """The CPU run, in its own interpreter: one JSON line per case."""
    from vseries.lab import standins

    fm = standins.install()
    for m in MS:
        print(json.dumps(_case(fm.fused_experts_impl, m, "cpu")))


def test_int8_dynamic_scale_cpu_interpreter():
    from vseries.lab import standins

    rows, output = standins.run_child(__file__)
    assert len(rows) == len(MS), output
    for r in rows:
        print(r)
    assert not _verdicts(rows), _verdicts(rows)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (vLLM's INT8 kernels)")
def test_int8_dynamic_scale_cuda():
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.fused_moe.fused_moe import fused_experts_impl

    with set_current_vllm_config(VllmConfig()):
        rows = [_case(fused_experts_impl, m, "cuda") for m in MS]
    for r in rows:
        print(r)
    assert not _verdicts(rows), _verdicts(rows)


if __name__ == "__main__" and sys.argv[1:] == ["--cpu"]:
    _cpu_child()
