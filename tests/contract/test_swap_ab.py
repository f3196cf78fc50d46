"""Contract of the swap-AB patch: FP8 decode tiles of fused_moe_kernel use wgmma on SM90.

Hopper's wgmma needs 64 rows in its M slot. v0.21.0 launches `fused_moe_kernel` at decode
with BLOCK_SIZE_M=16 tokens, and Triton then emits mma.sync for sm_90 (checked on
2026-11-29, FP8 w8a8, BLOCK_SIZE_N=128, BLOCK_SIZE_K=128). The patch swaps the operands
(C^T = B^T A^T) so that the output channels fill wgmma's M slot.

The promise: for FP8 w8a8 with per-tensor scales (the case measured to pay on the H200) and a
decode tile (BLOCK_SIZE_M 16 or 32, below wgmma's 64) of a GEMM with K >= 512,
`fused_moe_kernel` on SM90 compiles to wgmma, and the token tile is kept (no padded MMA rows).
Checked for the w13 and w2 GEMMs of Qwen3-30B-A3B, the w13 GEMM of a DeepSeek-V3 TP8 slice
and of Mixtral-8x7B. Modes the patched launcher declines to swap by default are not part of
it, neither required to use wgmma nor to avoid it: 16-bit activations and int8 w8a16 (measured
not to pay: mma.sync already runs bf16 natively), K < 512 (measured to lose), and, until they
are measured, FP8 per-token / per-channel and block-wise scales and INT8 w8a8 (a tuned config
can ask for the swap with "SWAP_AB": true). `OTHER_MODES` lists them; a guard
(``@pytest.mark.guard``: run with the patch only, since the base swaps nothing) checks that the
patched launcher declines the swap for each of them by default.

The test asks the launcher of whatever vLLM is importable, `invoke_fused_moe_triton_kernel`,
to launch a decode config on a mocked SM90 CUDA platform, records the Triton kernel and the
arguments and constexprs it launches with (no GPU is touched), compiles exactly that
specialisation for sm_90 with Triton's own binder (Triton 3.6 internals:
`create_function_from_signature`, `JITFunction._pack_args`), and asserts that the PTX holds
wgmma. Asking the launcher rather than a named decision function keeps the contract valid for
any implementation of the swap, including upstream's own (v0.33.0's `SWAP_AB` path).

It runs on a CPU-only machine: the lead's conftest sets CUDA_VISIBLE_DEVICES="" before vLLM
is imported, which keeps the real Triton in place of vLLM's placeholder up to v0.22.0; from
v0.24.0 vLLM also takes itself for a CPU build, and replaces Triton, when the installed vLLM's
version says "cpu" (this workspace's, built on a CPU-only torch), which
`recompile.use_vllm_tree()` answers for a plain tree put first on PYTHONPATH.

Base v0.21.0 fails (mma.sync, no wgmma); the patched tree passes. Run:
    CUDA_VISIBLE_DEVICES="" PYTHONPATH=<vllm tree> python -m pytest tests/contract/test_swap_ab.py
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import pytest
import torch

pytestmark = pytest.mark.contract

triton = pytest.importorskip("triton")

from vseries.lab import recompile  # noqa: E402  (after importorskip)

# Before vLLM is imported: a plain upstream tree must not take itself for a CPU build,
# nor import the installed vLLM's modules.
recompile.use_vllm_tree()


@dataclass(frozen=True)
class Mode:
    """A quantisation mode of fused_moe_kernel and the tensors the launcher gets for it."""

    a_dtype: torch.dtype  # activations as passed to the kernel (already quantised)
    b_dtype: torch.dtype  # expert weights
    out_dtype: torch.dtype
    use_fp8_w8a8: bool = False
    use_int8_w8a8: bool = False
    use_int8_w8a16: bool = False
    per_channel_quant: bool = False  # per-token activation, per-channel weight scales
    block_shape: tuple[int, int] | None = None


FP8 = torch.float8_e4m3fn
BF16 = torch.bfloat16
# The mode of the contract's promise.
MODES = {
    "fp8_w8a8_per_tensor": Mode(FP8, FP8, BF16, use_fp8_w8a8=True),
}
# Modes the patched launcher declines to swap by default (the guard below; not part of the
# contract, which upstream's own swap may extend to them).
OTHER_MODES = {
    "fp8_w8a8_per_token_channel": Mode(FP8, FP8, BF16, use_fp8_w8a8=True, per_channel_quant=True),
    "fp8_w8a8_block_128x128": Mode(FP8, FP8, BF16, use_fp8_w8a8=True, block_shape=(128, 128)),
    "int8_w8a8_per_tensor": Mode(torch.int8, torch.int8, BF16, use_int8_w8a8=True),
    "int8_w8a8_per_token_channel": Mode(
        torch.int8, torch.int8, BF16, use_int8_w8a8=True, per_channel_quant=True
    ),
    "int8_w8a8_block_128x128": Mode(
        torch.int8, torch.int8, BF16, use_int8_w8a8=True, block_shape=(128, 128)
    ),
    "bf16": Mode(BF16, BF16, BF16),
    "fp16": Mode(torch.float16, torch.float16, torch.float16),
    "fp32": Mode(torch.float32, torch.float32, torch.float32),
    "int8_w8a16": Mode(BF16, torch.int8, BF16, use_int8_w8a16=True),
}

# Decode GEMMs (N, K) of the design's model shapes, cut to E=8 experts (only sizes and strides
# reach the compiler; the specialisation depends on their divisibility by 16, which the real
# shapes share). DeepSeek-V3 TP8's w2 (K=256) is below the patch's K >= 512.
SHAPES = {
    "qwen3_30b_a3b_w13": (1536, 2048),
    "qwen3_30b_a3b_w2": (2048, 768),
    "deepseek_v3_tp8_w13": (512, 7168),
    "mixtral_8x7b_w13": (28672, 4096),
}
NUM_TOKENS, TOP_K, E = 16, 8, 8
N, K = SHAPES["qwen3_30b_a3b_w13"]


def _sm90_platform():
    """A CUDA platform that reports compute capability 9.0 (H100/H200) for every device."""
    from vllm.platforms.interface import DeviceCapability, Platform, PlatformEnum

    class _MockSM90Platform(Platform):
        _enum = PlatformEnum.CUDA
        device_name = "cuda"
        device_type = "cuda"
        dispatch_key = "CUDA"
        ray_device_key = "GPU"

        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> DeviceCapability:
            return DeviceCapability(major=9, minor=0)

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:
            return "NVIDIA H200"

    return _MockSM90Platform()


def _mock_sm90(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace vLLM's current_platform, wherever a loaded module bound it, by the SM90 mock."""
    import vllm.platforms

    real = vllm.platforms.current_platform
    fake = _sm90_platform()
    monkeypatch.setattr(vllm.platforms, "_current_platform", fake, raising=False)
    for name, module in list(sys.modules.items()):
        if name.startswith("vllm") and getattr(module, "current_platform", None) is real:
            monkeypatch.setattr(module, "current_platform", fake)


def _launch_decode(
    mode: Mode, block_size_m: int, monkeypatch: pytest.MonkeyPatch, n: int = N, k: int = K
):
    """Run the launcher for a decode config of an (n, k) GEMM on the mocked SM90 and return
    its Triton launch.

    Returns (kernel, args, kwargs, config): the JITFunction launched, the positional and
    keyword arguments it was launched with, and the config handed to the launcher.
    """
    from triton.runtime.jit import JITFunction
    from vllm.model_executor.layers.fused_moe import fused_moe as fm
    from vllm.model_executor.layers.fused_moe.config import _get_config_dtype_str
    from vllm.triton_utils import HAS_TRITON

    if not HAS_TRITON:
        pytest.skip(
            "vLLM replaced Triton by its placeholder (no GPU driver found, or a vLLM version "
            'that says "cpu"): set CUDA_VISIBLE_DEVICES="" and call '
            "recompile.use_vllm_tree() before vLLM is imported"
        )
    _mock_sm90(monkeypatch)
    block_shape = list(mode.block_shape) if mode.block_shape else None
    dtype_str = _get_config_dtype_str(
        dtype=mode.out_dtype,
        use_fp8_w8a8=mode.use_fp8_w8a8,
        use_int8_w8a16=mode.use_int8_w8a16,
    )
    # The launcher's own default decode config (BLOCK_SIZE_M=16 for M <= 32 tokens).
    config = fm.get_default_config(NUM_TOKENS, E, n, k, TOP_K, dtype_str, block_shape)
    config["BLOCK_SIZE_M"] = block_size_m

    # CPU tensors stand in for the device's: the launch is recorded, never run.
    a = torch.empty(NUM_TOKENS, k, dtype=mode.a_dtype)
    b = torch.empty(E, n, k, dtype=mode.b_dtype)
    c = torch.empty(NUM_TOKENS, TOP_K, n, dtype=mode.out_dtype)
    a_scale = b_scale = None
    if mode.use_fp8_w8a8 or mode.use_int8_w8a8:
        if mode.block_shape:
            bn, bk = mode.block_shape
            a_scale = torch.empty(NUM_TOKENS, triton.cdiv(k, bk))
            b_scale = torch.empty(E, triton.cdiv(n, bn), triton.cdiv(k, bk))
        elif mode.per_channel_quant:
            a_scale = torch.empty(NUM_TOKENS, 1)
            b_scale = torch.empty(E, n, 1)
        else:
            a_scale = torch.empty(1)
            b_scale = torch.empty(E)
    elif mode.use_int8_w8a16:
        b_scale = torch.empty(E, n)
    em = NUM_TOKENS * TOP_K + E * (block_size_m - 1)
    sorted_token_ids = torch.zeros(em, dtype=torch.int32)
    expert_ids = torch.zeros(triton.cdiv(em, block_size_m), dtype=torch.int32)
    num_tokens_post_padded = torch.zeros(1, dtype=torch.int32)
    topk_weights = torch.empty(NUM_TOKENS, TOP_K)
    compute_type = {
        torch.bfloat16: triton.language.bfloat16,
        torch.float16: triton.language.float16,
        torch.float32: triton.language.float32,
    }[mode.out_dtype]

    launches = []

    def _record(self, *args, grid, warmup, **kwargs):
        launches.append((self, args, kwargs))

    monkeypatch.setattr(JITFunction, "run", _record)
    try:
        fm.invoke_fused_moe_triton_kernel(
            a,
            b,
            c,
            a_scale,
            b_scale,
            topk_weights,
            sorted_token_ids,
            expert_ids,
            num_tokens_post_padded,
            False,
            TOP_K,
            config,
            compute_type,
            mode.use_fp8_w8a8,
            mode.use_int8_w8a8,
            mode.use_int8_w8a16,
            False,
            mode.per_channel_quant,
            block_shape,
        )
    except AssertionError as e:
        # vLLM's own input checks: the contract's tensors do not fit this release's launcher.
        # That decides nothing, and as an AssertionError it would read as "still needed".
        raise RuntimeError(f"vLLM asserted inside invoke_fused_moe_triton_kernel: {e!r}") from e
    finally:
        monkeypatch.undo()
    if len(launches) != 1:  # the launcher took another route: the contract cannot see it
        raise RuntimeError(f"expected one Triton launch, got {len(launches)}")
    return (*launches[0], config)


def _compile_sm90_ptx(kernel, args, kwargs) -> str:
    """Compile `kernel` for sm_90 with the specialisation its JIT would give these args."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    target = GPUTarget("cuda", 90, 32)
    backend = make_backend(target)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound_args, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(
        backend, kwargs, bound_args, specialization, options
    )
    src = ASTSource(kernel, signature, constexprs, attrs)
    return triton.compile(src, target=target, options=options.__dict__).asm["ptx"]


def launch_and_compile(
    mode_name: str, block_size_m: int, monkeypatch, shape: str = "qwen3_30b_a3b_w13"
) -> tuple[str, dict]:
    """PTX of the kernel the launcher picks on SM90 for a mode (from MODES or OTHER_MODES)
    and a GEMM of SHAPES, and the launch's keyword arguments (with the kernel's name)."""
    mode = MODES.get(mode_name) or OTHER_MODES[mode_name]
    n, k = SHAPES[shape]
    kernel, args, kwargs, _ = _launch_decode(mode, block_size_m, monkeypatch, n, k)
    return _compile_sm90_ptx(kernel, args, kwargs), dict(kwargs, kernel=kernel.__name__)


@pytest.mark.parametrize("block_size_m", [16, 32], ids=lambda m: f"M{m}")
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("mode_name", list(MODES))
def test_decode_tile_uses_wgmma_on_sm90(mode_name, shape, block_size_m, monkeypatch):
    """A decode launch (BLOCK_SIZE_M 16 or 32) of the MoE GEMM (v0.21.0..v0.33.0:
    fused_moe_kernel) compiles to wgmma for sm_90, and keeps its token tile."""
    ptx, launch = launch_and_compile(mode_name, block_size_m, monkeypatch, shape)
    shown = {k: v for k, v in launch.items() if k.isupper() or k.startswith("num_")}
    assert "wgmma" in ptx, (
        f"{mode_name} {shape}: PTX of {launch['kernel']} for sm_90 has no wgmma "
        f"({'mma.sync' if 'mma.sync' in ptx else 'no mma.sync either'}); launch: {shown}"
    )
    assert launch["BLOCK_SIZE_M"] == block_size_m, (
        f"{mode_name} {shape}: wgmma by padding the {block_size_m}-token tile to "
        f"{launch['BLOCK_SIZE_M']} rows, not by swapping"
    )


@pytest.mark.guard
@pytest.mark.parametrize("mode_name", list(OTHER_MODES))
def test_other_modes_keep_the_unswapped_decode_tile(mode_name, monkeypatch):
    """Guard of the patched tree, not a base/patched difference (the base swaps nothing):
    for every mode outside the promise the launcher declines the swap by default, so its
    decode launch is v0.21.0's (the configured BLOCK_SIZE_M, no SWAP_AB)."""
    _, _, kwargs, _ = _launch_decode(OTHER_MODES[mode_name], 16, monkeypatch)
    assert not kwargs.get("SWAP_AB"), f"{mode_name}: the launcher swaps by default"
    assert kwargs["BLOCK_SIZE_M"] == 16, f"{mode_name}: tile {kwargs['BLOCK_SIZE_M']}"
