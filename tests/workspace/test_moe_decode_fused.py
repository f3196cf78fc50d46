"""The experimental one-launch FP8 MoE decode kernel (benchmarks/moe_decode_fused.py, issue 13)
on a CPU host: in Triton's interpreter it gives the same output, bit for bit, as patch 0005's two
kernels (same tiles, sums and order), leaves its counters zero for the next call, and it
compiles for sm_90 with wgmma, pipelined weight loads and the L2 prefetch of GEMM2's weights
("early": before GEMM1's wgmma), and refuses an unknown prefetch mode by name.
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
sys.path.insert(0, sys.argv[1])
import moe_decode_fused as mf

for c in mf.SMALL_CASES:
    mf.compare_with_two_kernels(*c)  # CPU, grid 1, no prefetch (no inline PTX here)
print("OK")
"""

BAD_MODES = r"""
import sys
sys.path.insert(0, sys.argv[1])
import moe_decode_fused as mf

# the modes are checked before any tensor is read: no tensors needed
cases = [("late", "one of"), (2, "one of"), (None, "one of"), ("item", "interpreter")]
said = []
for mode, why in cases:
    try:
        mf.fused_moe_fp8_decode_one_kernel(*[None] * 10, grid=1, prefetch=mode)
    except ValueError as e:
        assert why in str(e), (mode, str(e))
        said.append(why)
print(said.count("one of"), said[-1])
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
    TOPK_P=8, BLOCK_A=1024, PREFETCH=int(sys.argv[2]), PREFETCH_LINES=8,
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
print(ptx.count("wgmma.mma_async"), ptx.count("prefetch.global.L2"), ptx.count("cp.async"),
      ptx.index("prefetch.global.L2") < ptx.index("wgmma.mma_async"))
"""


def run(code: str, interpret: bool, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    return subprocess.run(
        [sys.executable, "-c", code, str(ROOT / "benchmarks"), *args],
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


@pytest.mark.parametrize("prefetch", ["1", "2"], ids=["item", "early"])
def test_one_kernel_compiles_for_sm90_with_wgmma_and_the_l2_prefetch(prefetch):
    p = run(PTX, False, prefetch)
    assert p.returncode == 0, p.stderr[-4000:]
    *counts, prefetch_first = p.stdout.split()[-4:]
    wgmma, l2_prefetch, cp_async = map(int, counts)
    assert wgmma > 0 and l2_prefetch > 0 and cp_async > 0, p.stdout
    # "early" asks for GEMM2's weights before GEMM1's wgmma; "item" only in the GEMM2 items
    assert prefetch_first == str(prefetch == "2"), p.stdout


def test_prefetch_modes_are_checked():
    p = run(BAD_MODES, interpret=True)
    # three bad modes refused by name, a prefetch refused in the interpreter (vLLM's import may
    # print warnings first)
    said = p.stdout.split()[-2:]
    assert p.returncode == 0 and said == ["3", "interpreter"], p.stdout + p.stderr[-3000:]
