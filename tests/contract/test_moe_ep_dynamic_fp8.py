"""Contract of the expert-parallel dynamic-scale patch: ``fused_experts`` under expert
parallelism with dynamic per-tensor FP8 activations gives every token a finite, right output.

v0.34.0's ``fused_experts_impl`` (``fused_moe/fused_moe.py``) aligns with
``ignore_invalid_experts=True``: the top-k slots routed to other ranks' experts are left out of
``moe_align_block_size``, so their rows of ``intermediate_cache1`` (``torch.empty``) are never
written. SiLU-and-mul carries that garbage into ``intermediate_cache2``, and the second GEMM's
dynamic per-tensor scale (``moe_kernel_quantize_input`` -> ``ops.scaled_fp8_quant``: one
abs-max over all M x top-k rows) takes it in: inf (or a large value that SiLU-and-mul
overflows to inf) makes the scale inf, every token quantises to 0, and GEMM2's epilogue gives
0 x inf = NaN for every token. Static scales take no max; the patch keeps those slots in the
alignment when the scale is reduced (as v0.34.0's ``TritonExperts.apply`` already does), so
their ``expert_id == -1`` blocks zero-fill the rows.

The promise, against whichever vLLM imports first (E: 8 local experts of 16, top-4, the last
token routed only to other ranks' experts):

- CPU: the tree's ``fused_experts_impl`` with its ``fused_moe_kernel`` run by Triton's
  interpreter (a fresh interpreter: Triton reads ``TRITON_INTERPRET`` at import), vLLM's CUDA
  ops replaced by torch stand-ins written to the CUDA kernels' semantics
  (``moe_align_block_size`` with and without ``expert_map``, ``dynamic_scaled_fp8_quant``
  whose abs-max drops NaN like ``fmaxf`` and keeps inf, ``silu_and_mul``, ``moe_sum``), and
  every floating ``torch.empty`` filled with +inf (uninitialised memory at its worst): for 2
  and 3 tokens, dynamic and static scales, the output is finite, 0 for the remote-only token,
  and within 6% (max |err| / max |ref|) of a float32 reference on the dequantised weights.
- CUDA (skipped elsewhere): the same with the real ops, the allocator's free memory filled
  with inf (a ``torch.cuda.MemPool``).

Base v0.34.0 fails (dynamic scales: NaN); the patched tree passes. Run from the workspace root:
``CUDA_VISIBLE_DEVICES="" PYTHONPATH=<vllm tree> python -P -m pytest -m contract
tests/contract/test_moe_ep_dynamic_fp8.py``.
"""

from __future__ import annotations

import contextlib
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

FP8 = torch.float8_e4m3fn
E_GLOBAL, E_LOCAL, TOPK = 16, 8, 4
HIDDEN, INTER = 512, 256  # small: the interpreter runs the GEMMs in numpy
CASES = [(m, dynamic) for m in (2, 3) for dynamic in (True, False)]
TOL = 0.06  # one FP8 e4m3 step is up to 6.25% of a value


def _layer(m: int, device: str):
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
    tw, ti = torch.topk(scores.softmax(-1), TOPK)
    ti = ti.to(torch.int32)
    ti[-1] = torch.tensor([0, 13, 2, 15], dtype=torch.int32, device=device)
    return w1, w2, s1, s2, x, tw, ti, expert_map


def _reference(w1, w2, s1, s2, x, tw, ti, expert_map, a1=None, a2=None):
    """This rank's share in float32 on the dequantised weights, the activations quantised per
    tensor (a scale given, or the abs-max of this rank's rows); also the intermediate."""

    def q(t, s):
        s = s if s is not None else (t.abs().amax() / 448).clamp(min=1e-10)
        return (t / s).clamp(-448, 448).to(FP8).float() * s

    loc = expert_map[ti.long()].long()
    valid = loc >= 0
    loc = loc.clamp(min=0)
    xq = q(x.float(), a1)
    h = torch.zeros(*ti.shape, INTER, device=x.device)
    for k in range(TOPK):
        g = torch.einsum("mh,mnh->mn", xq, w1[loc[:, k]].float() * s1[loc[:, k], None, None])
        h[:, k] = torch.nn.functional.silu(g[:, :INTER]) * g[:, INTER:]
    h = (h * valid[..., None]).to(x.dtype).float()
    hq = q(h, a2)
    out = torch.zeros(x.shape, device=x.device)
    for k in range(TOPK):
        y = torch.einsum("mi,mhi->mh", hq[:, k], w2[loc[:, k]].float() * s2[loc[:, k], None, None])
        out += y * (tw[:, k].float() * valid[:, k])[:, None]
    return out, h


def _case(fused_experts_impl, m: int, dynamic: bool, device: str, poisoned) -> dict:
    """One call of the tree's fused_experts_impl against the reference."""
    w1, w2, s1, s2, x, tw, ti, expert_map = _layer(m, device)
    a1 = a2 = None
    if not dynamic:
        _, h = _reference(w1, w2, s1, s2, x, tw, ti, expert_map)
        a1, a2 = (x.float().abs().amax() / 448).reshape(1), (h.abs().amax() / 448).reshape(1)
    ref, _ = _reference(w1, w2, s1, s2, x, tw, ti, expert_map, a1, a2)
    with poisoned() as keep:
        out = fused_experts_impl(
            x, w1, w2, tw, ti, "silu", use_fp8_w8a8=True, global_num_experts=E_GLOBAL,
            expert_map=expert_map, w1_scale=s1, w2_scale=s2, a1_scale=a1, a2_scale=a2,
        )  # fmt: skip
    out = out.float()  # outside the poisoned memory
    del keep
    return {
        "m": m,
        "scales": "dynamic" if dynamic else "static",
        "finite": bool(out.isfinite().all()),
        "remote_token_zero": bool(out[-1].abs().max() == 0),
        "err": float((out - ref).abs().max() / ref.abs().max()),
    }


def _verdicts(rows: list[dict]) -> list[str]:
    bad = []
    for r in rows:
        what = f"{r['m']} tokens, {r['scales']} scales"
        if not r["finite"]:
            bad.append(f"{what}: output not finite (NaN/inf)")
        elif not r["remote_token_zero"]:
            bad.append(f"{what}: the remote-only token has output")
        elif not r["err"] < TOL:
            bad.append(f"{what}: max |err| / max |ref| = {r['err']:.3f} >= {TOL}")
    return bad


# --- CPU: Triton's interpreter, vLLM's CUDA ops as torch stand-ins (vseries.lab.standins) --


def _cpu_child() -> None:
    """The CPU run, in its own interpreter: one JSON line per case."""
    from vseries.lab import standins

    fm = standins.install()
    for m, dynamic in CASES:
        print(json.dumps(_case(fm.fused_experts_impl, m, dynamic, "cpu", standins.inf_empty)))


def test_ep_dynamic_scale_cpu_interpreter():
    from vseries.lab import standins

    rows, output = standins.run_child(__file__)
    assert len(rows) == len(CASES), output
    for r in rows:
        print(r)
    assert not _verdicts(rows), _verdicts(rows)


# --- CUDA: the real ops, the allocator's free memory filled with inf ----------------------


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


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (FP8 Triton: SM89+)")
def test_ep_dynamic_scale_cuda():
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.fused_moe.fused_moe import fused_experts_impl

    with set_current_vllm_config(VllmConfig()):
        rows = [_case(fused_experts_impl, m, dyn, "cuda", _inf_pool) for m, dyn in CASES]
    for r in rows:
        print(r)
    assert not _verdicts(rows), _verdicts(rows)


if __name__ == "__main__" and sys.argv[1:] == ["--cpu"]:
    _cpu_child()
