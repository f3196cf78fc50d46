"""vseries.lab.standins: rtne_downcasts (Triton's interpreter rounds float32 down to FP8 e4m3,
bf16 and fp16 as the GPU does, so that a contract can hold a kernel that rounds inside Triton to
a float32 reference on a CPU host), and the moe_sum stand-in skipping what the kernel skips."""

import numpy as np
import pytest
import torch

triton = pytest.importorskip("triton")

import triton.language as tl  # noqa: E402
from triton.runtime import interpreter  # noqa: E402  (after importorskip)

from vseries.lab import standins  # noqa: E402

RTNE = interpreter._ir.ROUNDING_MODE.RTNE
# mantissas that round up into the next power of two (the carry), ties, a subnormal, values
# past FP8's largest finite 448, signs, zero
VALUES = np.array(
    [126.2386, 31.6051, 1.97, 1.0625, 1.1875, 0.0009, 500.0, -3.99, -0.0, 0.0, 7.5, 1e-12],
    dtype=np.float32,
)


@pytest.fixture
def original(monkeypatch):
    """The interpreter's own conversion; put back after the test."""
    monkeypatch.setattr(interpreter, "_convert_float", interpreter._convert_float)
    return interpreter._convert_float


@pytest.fixture
def fixed(original):
    standins.rtne_downcasts()
    once = interpreter._convert_float
    standins.rtne_downcasts()  # a second call keeps the first
    assert interpreter._convert_float is once is not original
    return once


def _as(bits: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    return torch.from_numpy(bits.view(f"int{8 * bits.itemsize}")).view(dtype)


def test_fp8_e4m3_rounds_to_nearest_even_and_saturates(fixed):
    bits = fixed(VALUES, tl.float32, tl.float8e4nv, RTNE)
    got = _as(bits, torch.float8_e4m3fn).float()
    want = torch.from_numpy(VALUES).clamp(-448, 448).to(torch.float8_e4m3fn).float()
    assert torch.equal(got, want), (got, want)
    assert got[0] == 128 and got[6] == 448  # the carry kept; 500 saturates to 448


@pytest.mark.parametrize(
    "tl_dtype,dtype", [(tl.bfloat16, torch.bfloat16), (tl.float16, torch.float16)]
)
def test_16_bit_downcasts_round_as_torch(fixed, tl_dtype, dtype):
    x = np.random.default_rng(0).standard_normal(4096).astype(np.float32) * 100
    bits = fixed(x, tl.float32, tl_dtype, RTNE)
    assert torch.equal(_as(bits, dtype), torch.from_numpy(x).to(dtype))


def test_other_conversions_keep_the_interpreters_code(original, fixed):
    x = np.array([1.5, 2.25, -0.3], dtype=np.float16)  # not a float32 source
    want = original(x, tl.float16, tl.float8e4nv, RTNE)
    assert np.array_equal(fixed(x, tl.float16, tl.float8e4nv, RTNE), want)
    bits = fixed(VALUES, tl.float32, tl.float8e5, RTNE)  # a format it leaves alone
    assert np.array_equal(bits, original(VALUES, tl.float32, tl.float8e5, RTNE))


def test_the_moe_sum_stand_in_skips_the_slots_the_kernel_skips():
    """v0.34.0's moe_sum with topk_ids skips a slot whose expert is -1 or another rank's
    (its moe_sum_pad_aware_skip); the stand-in must too, or a CPU contract could pass or fail
    on rows the kernel never reads. Without topk_ids every slot adds up."""
    x = torch.ones(2, 3, 4)
    x[0, 1] = float("inf")  # expert 5: not this rank's
    x[1, 2] = float("nan")  # expert -1
    ids = torch.tensor([[0, 5, 1], [1, 0, -1]], dtype=torch.int32)
    emap = torch.tensor([0, 1, -1, -1, -1, -1], dtype=torch.int32)
    out = torch.empty(2, 4)
    standins.CudaOps.moe_sum(x, out, ids, emap)
    assert out.tolist() == [[2.0] * 4, [2.0] * 4]
    standins.CudaOps.moe_sum(x, out)
    assert torch.isinf(out[0]).all() and torch.isnan(out[1]).all()
