"""The experimental one-launch FP8 MoE decode kernel (benchmarks/moe_decode_fused.py, issue 13)
on a CPU host: in Triton's interpreter it gives the same output, bit for bit, as patch 0005's two
kernels (same tiles, sums and order), leaves its counters zero for the next call, and it
compiles for sm_90 with wgmma, pipelined weight loads and the L2 prefetch of GEMM2's weights.
Both run in a fresh interpreter (Triton reads TRITON_INTERPRET at import; CUDA hidden so that
vLLM loads the real Triton, not its placeholder)."""

import importlib.util
import os
import subprocess
import sys

import pytest
from conftest import ROOT

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None
        or not (ROOT / "vllm/vllm/model_executor/layers/fused_moe/fused_moe_decode.py").exists(),
        reason="needs vLLM with patch 0005 (scripts/setup.sh applies the series)",
    ),
]

NUMERICS = r"""
import sys
import torch
sys.path.insert(0, sys.argv[1])
from vllm.model_executor.layers.fused_moe import fused_moe_decode as fd
import moe_decode_fused as mf

FP8 = torch.float8_e4m3fn


def case(m, e, topk, k, i, static, seed, split=None, ep=False):
    g = torch.Generator().manual_seed(seed)  # fresh random inputs per case
    x = torch.randn(m, k, generator=g).to(torch.bfloat16)
    w1 = (torch.randn(e, 2 * i, k, generator=g) * 0.5).to(FP8)
    w2 = (torch.randn(e, k, i, generator=g) * 0.5).to(FP8)
    s1 = torch.rand(e, generator=g) * 0.01 + 0.005
    s2 = torch.rand(e, generator=g) * 0.01 + 0.005
    ids = torch.stack([torch.randperm(e, generator=g)[:topk] for _ in range(m)]).to(torch.int32)
    ids[0, -1] = ids[0, 0]  # a token that chooses an expert twice
    ids[-1, 1] = -1  # no expert
    tw = torch.rand(m, topk, generator=g)
    a1 = torch.full((1,), 0.02) if static else None
    a2 = torch.full((1,), 0.05) if static else None
    emap = None
    if ep:  # every other expert on this rank
        emap = torch.full((e,), -1, dtype=torch.int32)
        local = torch.arange(0, e, 2)
        emap[local] = torch.arange(local.numel(), dtype=torch.int32)
        w1, w2, s1, s2 = w1[local], w2[local], s1[local], s2[local]
    cfg = fd.get_decode_config(m, topk, k, i, 132)
    if split:
        cfg = dict(cfg, SPLIT_K1=split[0], SPLIT_K2=split[1], BLOCK_K1=128, BLOCK_K2=128)
    two = torch.full((m, k), float("nan"), dtype=torch.bfloat16)
    fd.fused_moe_fp8_decode(x, w1, w2, s1, s2, tw, ids, a1, a2, two, expert_map=emap, config=cfg)
    outs = []
    for _ in range(2):  # the second call starts from the counters the first one left
        out = torch.full((m, k), float("nan"), dtype=torch.bfloat16)
        mf.fused_moe_fp8_decode_one_kernel(
            x, w1, w2, s1, s2, tw, ids, a1, a2, out, grid=1, expert_map=emap, config=cfg,
            prefetch=False,
        )
        outs.append(out)
        assert (mf._BUFFERS[torch.device("cpu")] == 0).all(), "counters not left zero"
    assert not two.isnan().any() and two.abs().max() > 0
    assert torch.equal(outs[0], two), (outs[0].float() - two.float()).abs().max()
    assert torch.equal(outs[1], two)


case(1, 16, 4, 256, 96, static=True, seed=0)
case(2, 16, 4, 256, 96, static=False, seed=1)
case(2, 16, 4, 192, 64, static=False, seed=2, ep=True)
case(1, 16, 4, 1024, 256, static=True, seed=3, split=(4, 2))
case(3, 8, 2, 1088, 200, static=False, seed=4, split=(2, 1))  # odd K and I
print("OK")
"""

PTX = r"""
import sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
sys.path.insert(0, sys.argv[1])
import moe_decode_fused as mf

kernel = mf._moe_decode_fused_kernel
ints = ("topk_ids_ptr", "expert_map_ptr", "count1_ptr", "count2_ptr", "sync_ptr")
types = {n: "*i32" for n in ints}
types.update(
    x_ptr="*bf16", a1_scale_ptr="*fp32", w1_ptr="*fp8e4nv", w1_scale_ptr="*fp32",
    w2_ptr="*fp8e4nv", w2_scale_ptr="*fp32", a2_scale_ptr="*fp32", topk_weights_ptr="*fp32",
    h_ptr="*bf16", amax_ptr="*fp32", part1_ptr="*fp32", part2_ptr="*fp32", out_ptr="*bf16",
)
consts = dict(
    A_MODE=1, A2_MODE=1, MUL_ROUTED_WEIGHT=True, HAS_EXPERT_MAP=False, SPLIT_K1=4,
    SPLIT_K2=1, BLOCK_I=32, BLOCK_K1=256, BLOCK_N=64, BLOCK_K2=128, BLOCK_T=16, BLOCK_P=128,
    TOPK_P=8, BLOCK_A=1024, PREFETCH=True, PREFETCH_LINES=8,
)
# sizes and strides divisible by 16, as Triton specialises them for real layer shapes
aligned = ("K", "inter", "N", "stride_xm", "stride_w1e", "stride_w1n", "stride_hm",
           "stride_w2e", "stride_w2n", "stride_om")
names = kernel.arg_names
sig = {n: types.get(n, "constexpr" if n in consts else "i32") for n in names}
src = ASTSource(
    fn=kernel,
    signature=sig,
    constexprs={(names.index(k),): v for k, v in consts.items()},
    attrs={
        (names.index(n),): [["tt.divisibility", 16]]
        for n in names
        if sig[n][0] == "*" or n in aligned
    },
)
options = {"num_warps": 4, "num_stages": 3, "launch_cooperative_grid": True}
c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
ptx = c.asm["ptx"]
print(ptx.count("wgmma.mma_async"), ptx.count("prefetch.global.L2"), ptx.count("cp.async"))
"""


def run(code: str, interpret: bool) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    return subprocess.run(
        [sys.executable, "-c", code, str(ROOT / "benchmarks")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_one_kernel_equals_the_two_kernels_in_the_interpreter():
    p = run(NUMERICS, interpret=True)
    assert p.returncode == 0 and p.stdout.strip().endswith("OK"), (
        p.stdout[-2000:] + p.stderr[-4000:]
    )


def test_one_kernel_compiles_for_sm90_with_wgmma_and_the_l2_prefetch():
    p = run(PTX, interpret=False)
    assert p.returncode == 0, p.stderr[-4000:]
    wgmma, prefetch, cp_async = map(int, p.stdout.split()[-3:])
    assert wgmma > 0 and prefetch > 0 and cp_async > 0, p.stdout
