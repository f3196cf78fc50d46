"""Contract of the fused_experts dynamic per-tensor scale bugfix: ``fused_experts`` with a
dynamic per-tensor activation scale gives every token a finite, right output, in two halves
that each fail on v0.34.0 on their own.

**EP half.** v0.34.0's ``fused_experts_impl`` (``fused_moe/fused_moe.py``) aligns with
``ignore_invalid_experts=True``: the top-k slots routed to other ranks' experts are left out of
``moe_align_block_size``, so their rows of ``intermediate_cache1`` (``torch.empty``) are never
written. SiLU-and-mul carries that garbage into ``intermediate_cache2``, and the second GEMM's
dynamic per-tensor scale (``moe_kernel_quantize_input`` -> ``ops.scaled_fp8_quant``: one
abs-max over all M x top-k rows) takes it in: inf makes the scale inf, every token quantises
to 0, and GEMM2's epilogue gives 0 x inf = NaN for every token. The patch keeps those slots in
the alignment when the scale is reduced (as ``TritonExperts.apply`` already does), so their
``expert_id == -1`` blocks zero-fill the rows. Cases: 8 local experts of 16, top-4, the last
token routed only to other ranks' experts, 2 and 3 tokens, dynamic and static scales; the
output is finite, 0 for the remote-only token, and within 6% (max |err| / max |ref|) of a
float32 reference on the dequantised weights.

**INT8 half.** v0.34.0's ``_int8_quantize`` (``fused_moe/utils.py``) computes a dynamic
per-tensor scale as max|A| / 127 in A's dtype (bf16) and hands it to ``ops.scaled_int8_quant``,
whose kernel reads the scale as ``float``: the call raises, with or without expert
parallelism. The patch computes the scale in float32. Cases: 8 experts, top-2, no expert map,
1 and 3 tokens; the call returns and the output is within 3% of a float32 reference.

Each half runs against whichever vLLM imports first:

- CPU: the tree's ``fused_experts_impl`` with its ``fused_moe_kernel`` run by Triton's
  interpreter (a fresh interpreter, one for both halves: Triton reads ``TRITON_INTERPRET`` at
  import), vLLM's CUDA ops replaced by torch stand-ins written to the CUDA kernels' semantics
  (``vseries.lab.standins``: ``moe_align_block_size`` with and without ``expert_map``, the FP8
  abs-max that drops NaN like ``fmaxf`` and keeps inf, the INT8 kernel that reads a ``float``
  scale and raises on another dtype as ``const_data_ptr<float>()`` does), and for the EP half
  every floating ``torch.empty`` filled with +inf (uninitialised memory at its worst).
- CUDA (skipped elsewhere): the same with the real ops; the EP half fills the allocator's free
  memory with inf (a ``torch.cuda.MemPool``).

Base v0.34.0 fails both halves (EP: NaN for the dynamic cases; INT8: RuntimeError, a BFloat16
scale); the patched tree passes. Run from the workspace root: ``CUDA_VISIBLE_DEVICES=""
PYTHONPATH=<vllm tree> python -P -m pytest -m contract
tests/contract/test_moe_dynamic_tensor_scale.py``.
"""

from __future__ import annotations

import contextlib
import json
import sys

import pytest
import torch

pytestmark = pytest.mark.contract

triton = pytest.importorskip("triton")

from vseries.lab import moe_reference, recompile  # noqa: E402  (after importorskip)

# Before vLLM is imported: a plain upstream tree must not take itself for a CPU build,
# nor import the installed vLLM's modules.
recompile.use_vllm_tree()

FP8 = torch.float8_e4m3fn
HIDDEN, INTER = 512, 256  # small: the interpreter runs the GEMMs in numpy

# --- EP half: dynamic per-tensor FP8 under expert parallelism ----------------------------

E_GLOBAL, E_LOCAL, EP_TOPK = 16, 8, 4
EP_CASES = [(m, dynamic) for m in (2, 3) for dynamic in (True, False)]
EP_TOL = 0.06  # one FP8 e4m3 step is up to 6.25% of a value


def _ep_layer(m: int, device: str):
    """FP8 weights of this rank's experts (global 4..11), a bf16 batch, a routing whose last
    token goes to other ranks' experts only."""
    g = torch.Generator(device=device).manual_seed(m)
    w1 = (torch.randn(E_LOCAL, 2 * INTER, HIDDEN, device=device, generator=g) / 16).to(FP8)
    w2 = (torch.randn(E_LOCAL, HIDDEN, INTER, device=device, generator=g) / 16).to(FP8)
    s1 = torch.rand(E_LOCAL, device=device, generator=g) / 2 + 0.5
    s2 = torch.rand(E_LOCAL, device=device, generator=g) / 2 + 0.5
    x = torch.randn(m, HIDDEN, device=device, generator=g).to(torch.bfloat16)
    expert_map = torch.full((E_GLOBAL,), -1, dtype=torch.int32, device=device)
    expert_map[4:12] = torch.arange(E_LOCAL, dtype=torch.int32, device=device)
    scores = torch.rand(m, E_GLOBAL, device=device, generator=g)
    scores[torch.arange(m), 4 + torch.arange(m) % 8] += 1  # one local expert at least
    tw, ti = torch.topk(scores.softmax(-1), EP_TOPK)
    ti = ti.to(torch.int32)
    ti[-1] = torch.tensor([0, 13, 2, 15], dtype=torch.int32, device=device)
    return w1, w2, s1, s2, x, tw, ti, expert_map


def _ep_case(fused_experts_impl, m: int, dynamic: bool, device: str, poisoned) -> dict:
    """One call of the tree's fused_experts_impl under EP against the reference."""
    w1, w2, s1, s2, x, tw, ti, expert_map = _ep_layer(m, device)
    a1 = a2 = None
    if not dynamic:
        _, h = moe_reference.layer(w1, w2, s1, s2, x, tw, ti, expert_map)
        a1, a2 = (x.float().abs().amax() / 448).reshape(1), (h.abs().amax() / 448).reshape(1)
    ref, _ = moe_reference.layer(w1, w2, s1, s2, x, tw, ti, expert_map, a1, a2)
    with poisoned() as keep:
        out = fused_experts_impl(
            x, w1, w2, tw, ti, "silu", use_fp8_w8a8=True, global_num_experts=E_GLOBAL,
            expert_map=expert_map, w1_scale=s1, w2_scale=s2, a1_scale=a1, a2_scale=a2,
        )  # fmt: skip
    out = out.float()  # outside the poisoned memory
    del keep
    return {
        "half": "ep",
        "m": m,
        "scales": "dynamic" if dynamic else "static",
        "finite": bool(out.isfinite().all()),
        "remote_token_zero": bool(out[-1].abs().max() == 0),
        "err": float((out - ref).abs().max() / ref.abs().max()),
    }


def _ep_verdicts(rows: list[dict]) -> list[str]:
    return moe_reference.verdicts(
        rows, EP_TOL, lambda r: f"EP, {r['m']} tokens, {r['scales']} scales"
    )


# --- INT8 half: dynamic per-tensor INT8 activation scales --------------------------------

E_INT8, INT8_TOPK = 8, 2
INT8_MS = (1, 3)
# max |err| / max |ref|. The reference quantises and rounds where the kernels do, so what is
# left is accumulation order and bf16 rounding moving a value across an INT8 rounding boundary
# (one step is 1/127 of the tensor's max): 1.5-1.9% measured under the interpreter with the
# patch. The base does not get that far: it raises on the scale's dtype.
INT8_TOL = 0.03


def _int8_layer(m: int, device: str):
    """INT8 weights with a scale per expert, a bf16 batch, a routing."""
    g = torch.Generator(device=device).manual_seed(m)
    w1 = torch.randint(-127, 128, (E_INT8, 2 * INTER, HIDDEN), device=device, generator=g)
    w2 = torch.randint(-127, 128, (E_INT8, HIDDEN, INTER), device=device, generator=g)
    s1 = (torch.rand(E_INT8, device=device, generator=g) / 2 + 0.5) / (16 * 127)
    s2 = (torch.rand(E_INT8, device=device, generator=g) / 2 + 0.5) / (16 * 127)
    x = torch.randn(m, HIDDEN, device=device, generator=g).to(torch.bfloat16)
    scores = torch.rand(m, E_INT8, device=device, generator=g)
    tw, ti = torch.topk(scores.softmax(-1), INT8_TOPK)
    return w1.to(torch.int8), w2.to(torch.int8), s1, s2, x, tw, ti.to(torch.int32)


def _int8_reference(w1, w2, s1, s2, x, tw, ti):
    """The layer in float32 on the dequantised weights, each GEMM's input quantised per
    tensor to INT8 (scale max|t| / 127, round to nearest even), each GEMM's output rounded
    to bf16 where the kernels store it."""

    def q(t):
        s = (t.abs().amax() / 127.0).clamp(min=1e-10)
        return torch.round(t / s).clamp(-128, 127) * s

    ti = ti.long()
    xq = q(x.float())
    h = torch.zeros(*ti.shape, INTER, device=x.device)
    for k in range(INT8_TOPK):
        g = torch.einsum("mh,mnh->mn", xq, w1[ti[:, k]].float() * s1[ti[:, k], None, None])
        g = g.to(x.dtype).float()  # GEMM1 stores its output in the activation dtype
        h[:, k] = torch.nn.functional.silu(g[:, :INTER]) * g[:, INTER:]
    hq = q(h.to(x.dtype).float())
    out = torch.zeros(x.shape, device=x.device)
    for k in range(INT8_TOPK):
        y = torch.einsum("mi,mhi->mh", hq[:, k], w2[ti[:, k]].float() * s2[ti[:, k], None, None])
        out += y * tw[:, k].float()[:, None]
    return out


def _int8_case(fused_experts_impl, m: int, device: str) -> dict:
    """One INT8 call of the tree's fused_experts_impl against the reference."""
    w1, w2, s1, s2, x, tw, ti = _int8_layer(m, device)
    ref = _int8_reference(w1, w2, s1, s2, x, tw, ti)
    try:
        out = fused_experts_impl(
            x, w1, w2, tw, ti, "silu", use_int8_w8a8=True, global_num_experts=E_INT8,
            w1_scale=s1, w2_scale=s2, a1_scale=None, a2_scale=None,
        ).float()  # fmt: skip
    except RuntimeError as e:
        return {"half": "int8", "m": m, "raised": str(e)[:200]}
    return {
        "half": "int8",
        "m": m,
        "finite": bool(out.isfinite().all()),
        "err": float((out - ref).abs().max() / ref.abs().max()),
    }


def _int8_verdicts(rows: list[dict]) -> list[str]:
    return moe_reference.verdicts(rows, INT8_TOL, lambda r: f"INT8, {r['m']} tokens")


# --- CPU: Triton's interpreter, vLLM's CUDA ops as torch stand-ins (vseries.lab.standins) --


def _cpu_child() -> None:
    """The CPU run of both halves, in its own interpreter: one JSON line per case."""
    from vseries.lab import standins

    fm = standins.install()
    for m, dynamic in EP_CASES:
        print(json.dumps(_ep_case(fm.fused_experts_impl, m, dynamic, "cpu", standins.inf_empty)))
    for m in INT8_MS:
        print(json.dumps(_int8_case(fm.fused_experts_impl, m, "cpu")))


@pytest.fixture(scope="module")
def cpu_rows() -> list[dict]:
    """The interpreter run's rows, one run for both halves (most of its time is the import)."""
    from vseries.lab import standins

    rows, output = standins.run_child(__file__)
    assert len(rows) == len(EP_CASES) + len(INT8_MS), output
    for r in rows:
        print(r)
    return rows


def test_ep_dynamic_scale_cpu_interpreter(cpu_rows):
    rows = [r for r in cpu_rows if r["half"] == "ep"]
    assert len(rows) == len(EP_CASES) and not _ep_verdicts(rows), _ep_verdicts(rows)


def test_int8_dynamic_scale_cpu_interpreter(cpu_rows):
    rows = [r for r in cpu_rows if r["half"] == "int8"]
    assert len(rows) == len(INT8_MS) and not _int8_verdicts(rows), _int8_verdicts(rows)


# --- CUDA: the real ops; the EP half with the allocator's free memory filled with inf -----


@contextlib.contextmanager
def _inf_pool():
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        junk = [
            torch.full((n,), float("inf"), dtype=torch.bfloat16, device="cuda")
            for n in [1 << 19] * 16 + [1 << 24] * 2
        ]
        del junk
        yield pool


def _cuda_impl():
    from vllm.model_executor.layers.fused_moe.fused_moe import fused_experts_impl

    return fused_experts_impl


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (FP8 Triton: SM89+)")
def test_ep_dynamic_scale_cuda():
    from vllm.config import VllmConfig, set_current_vllm_config

    with set_current_vllm_config(VllmConfig()):
        rows = [_ep_case(_cuda_impl(), m, dyn, "cuda", _inf_pool) for m, dyn in EP_CASES]
    for r in rows:
        print(r)
    assert not _ep_verdicts(rows), _ep_verdicts(rows)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (vLLM's INT8 kernels)")
def test_int8_dynamic_scale_cuda():
    from vllm.config import VllmConfig, set_current_vllm_config

    with set_current_vllm_config(VllmConfig()):
        rows = [_int8_case(_cuda_impl(), m, "cuda") for m in INT8_MS]
    for r in rows:
        print(r)
    assert not _int8_verdicts(rows), _int8_verdicts(rows)


if __name__ == "__main__" and sys.argv[1:] == ["--cpu"]:
    _cpu_child()
