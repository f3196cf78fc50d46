"""Contract of the rope-nospec patch: no JIT variant per token count in the DeepSeek-V4 path.

Triton specialises every integer kernel argument that is not a constexpr and not in
``do_not_specialize`` (value 1 becomes a constant, a multiple of 16 gets a divisibility hint),
and compiles a new variant for each combination. Measured on an H200 with v0.21.0,
``_fused_inv_rope_fp8_quant_per_head`` compiled 4 variants over num_tokens 1..1024 (T=1, 2, 13,
16; 200-540 ms each after the first), because ``num_tokens`` and the scale strides (multiples
of the token count rounded up to 4) follow the token count.

The patch's promise: no integer argument whose value follows the token count is specialised
in the rope kernel (``num_tokens``, ``scale_stride_k``, ``scale_stride_group``) or in
``quantize_and_insert_k_kernel`` (``num_tokens``). The contract, against whichever vLLM
imports first, finding each kernel wherever that release keeps it
(``recompile.ROPE_LOCATIONS``: v0.21.0's deepseek_v4_ops, v0.22.0's
vllm/models/deepseek_v4/common/ops/, v0.33.0's ``FusedInvRopeFP8QuantKernel.kernel``):
- CPU: one test per (kernel, argument), read from the kernel's own JIT metadata, so that a
  release that made part of the change passes those ids and fails the others (v0.22.0 stopped
  specialising the rope kernel's ``num_tokens``, v0.33.0 also ``scale_stride_k``; neither
  ``scale_stride_group`` nor ``quantize_and_insert_k_kernel``'s ``num_tokens``). And the rope
  kernel's real host code, run on CPU tensors, selects one JIT specialisation (computed with
  Triton's own binder for sm_90) for every token count of the sweep, in both scale layouts,
  per launch-options class: the launch options (num_warps, num_stages) are the host code's
  own choice, not Triton's specialisation of an argument. v0.21.0 always launches with
  num_warps=1; v0.33.0+ picks 4 warps when the grid has fewer than 2048 programs and 1
  otherwise (a second, deliberate variant, first met at T=1000 with 16 heads in 2 groups,
  which its startup JIT warm-up compiles with ``WarmupChoices(1, 4)``).
  A guard (``@pytest.mark.guard``: run with the patch only, since on the base it compares
  the kernel with itself) checks that giving the hints up changes no instruction of the
  sm_90 PTX.
- CUDA (skipped elsewhere): warm up at T=1, then the sweep compiles nothing more than one
  variant per launch-options class, at the first T of that class; outputs are
  bit-identical to a variant that specialises every integer argument (``triton.jit(kernel.fn)``,
  the base behaviour, built in-process) and match a float32 reference; the largest T, where
  the input offsets pass 2**31 elements, runs without an illegal memory access.

Base v0.21.0 fails the CPU checks (4 variants; every token argument specialised), the patched
tree passes. A release where no known location holds a kernel fails with a LookupError, which
the rebase tool reads as "could not decide", not as "still needed". Run from the workspace root:
    PYTHONPATH=<vllm tree> python -P -m pytest -m contract tests/contract/test_rope_nospec.py
"""

from __future__ import annotations

import importlib
from collections import defaultdict

import pytest
import torch

pytestmark = pytest.mark.contract

triton = pytest.importorskip("triton")

from vseries.lab import recompile  # noqa: E402  (after importorskip)

# Before vLLM is imported: a plain upstream tree must not take itself for a CPU build,
# nor import the installed vLLM's modules.
recompile.use_vllm_tree()

KERNELS = {
    "fused_inv_rope_fp8_quant": recompile.ROPE_LOCATIONS,
    "quantize_and_insert_k": recompile.QUANT_INSERT_LOCATIONS,
}
# Integer arguments whose value follows the token count (see docs/recompile-audit.md for how
# each one follows it), one test id each.
TOKEN_ARGS = [
    ("fused_inv_rope_fp8_quant", "num_tokens"),
    ("fused_inv_rope_fp8_quant", "scale_stride_k"),
    ("fused_inv_rope_fp8_quant", "scale_stride_group"),
    ("quantize_and_insert_k", "num_tokens"),
]

TOKEN_COUNTS = [recompile.WARMUP, *recompile.SWEEP]


@pytest.mark.parametrize("kernel_name,arg", TOKEN_ARGS, ids=[f"{k}-{a}" for k, a in TOKEN_ARGS])
def test_token_arg_not_specialised(kernel_name, arg):
    kernel, loc = recompile.find_kernel(KERNELS[kernel_name])
    assert recompile.specialised_token_args(kernel, [arg]) == [], (
        f"{loc}: {arg} follows the token count and is still specialised "
        f"(do_not_specialize={kernel.do_not_specialize})"
    )


# heads_per_group 8 is DeepSeek-V4's; 2 makes scale_stride_group (2 * round_up(T, 4) in the
# SM100 layout) change its key with T as well.
@pytest.mark.parametrize("heads_per_group", [8, 2])
@pytest.mark.parametrize("tma_aligned_scales", [False, True], ids=["sm90_fp32", "sm100_ue8m0"])
def test_rope_one_jit_key_over_sweep(heads_per_group, tma_aligned_scales):
    kernel, loc = recompile.rope_kernel()
    launches = recompile.rope_launches(
        TOKEN_COUNTS, heads=2 * heads_per_group, groups=2, tma_aligned_scales=tma_aligned_scales
    )
    keys = recompile.specialisation_keys(kernel, launches)
    # key = (per-argument specialisation, launch options): one specialisation per options
    # class (v0.33.0+: num_warps 4 for decode-sized grids, 1 for prefill-sized ones).
    by_options: dict[tuple, dict[tuple, int]] = {}
    for t, (spec, options) in zip(TOKEN_COUNTS, keys, strict=True):
        by_options.setdefault(options, {}).setdefault(spec, t)
    bad = {
        options: sorted(first_seen.values())
        for options, first_seen in by_options.items()
        if len(first_seen) > 1
    }
    assert not bad, (
        f"{loc}: more than one JIT specialisation over T={TOKEN_COUNTS} for launch options "
        f"{list(bad)}, first compiled at T={list(bad.values())}; arguments changing the key: "
        f"{recompile.changing_args(kernel, keys)}"
    )


@pytest.mark.guard
def test_rope_ptx_unchanged_without_hints():
    """Guard, not a base/patched difference (on the base it compares the kernel with itself,
    so the contract runner runs it with the patch only): at T=16 every integer argument is a
    multiple of 16, so the fully specialised variant has every divisibility hint; the kernel
    as shipped must compile to the same sm_90 instructions (the hints fed no vectorised
    access)."""
    kernel, loc = recompile.rope_kernel()
    (launch,) = recompile.rope_launches([16])
    shipped = recompile.ptx_code(recompile.ptx(kernel, launch))
    specialised = recompile.ptx_code(recompile.ptx(triton.jit(kernel.fn), launch))
    assert recompile.global_accesses(shipped) == recompile.global_accesses(specialised), loc
    assert shipped == specialised, f"{loc}: sm_90 PTX differs from the fully specialised one"


def _cos_sin_cache(max_pos: int, rope_dim: int, device: str) -> torch.Tensor:
    """[max_pos, rope_dim] float32: cos of each frequency, then sin (DeepSeek-V4's layout)."""
    half = rope_dim // 2
    inv_freq = 10000.0 ** (-torch.arange(half, device=device, dtype=torch.float32) / half)
    freqs = torch.outer(torch.arange(max_pos, device=device, dtype=torch.float32), inv_freq)
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1)


def _reference(o, positions, cos_sin_cache, groups, rope_dim=64, block=128, fp8_max=448.0):
    """Float32 reference: inverse GPT-J RoPE on the last ``rope_dim`` dims of each head, then
    UE8M0 block quantisation (scale = 2**ceil(log2(absmax / 448)) per 128 values).

    Returns fp8 [T, groups, d] (float8_e4m3fn) and scales [T, groups, d // 128] (float32).
    """
    t, h, dim = o.shape
    x = o.float()
    half = rope_dim // 2
    cs = cos_sin_cache[positions]
    cos, sin = cs[:, None, :half], cs[:, None, half:]
    even, odd = x[..., dim - rope_dim :: 2], x[..., dim - rope_dim + 1 :: 2]
    rot = torch.stack([even * cos + odd * sin, odd * cos - even * sin], dim=-1)
    x = torch.cat([x[..., : dim - rope_dim], rot.flatten(-2)], dim=-1)
    blocks = x.reshape(t, groups, -1, block)
    absmax = blocks.abs().amax(-1).clamp(min=1e-10)
    scale = torch.exp2(torch.ceil(torch.log2(absmax * (1.0 / fp8_max))))
    q = (blocks / scale[..., None]).clamp(-fp8_max, fp8_max).to(torch.float8_e4m3fn)
    return q.reshape(t, groups, -1), scale


def _assert_close_to_reference(fp8, scale, ref_fp8, ref_scale, t):
    # Tolerance: Triton contracts x*cos + y*sin into one FMA while torch rounds each product,
    # so a rotated value can differ by 1 fp32 ulp. That moves an fp8 value (or a power-of-two
    # block scale) only when it sits on a rounding boundary: allow one scale step (x2) and
    # 1e-3 of the fp8 bytes to differ, and require vLLM's own dequantised cosine distance
    # (tests/kernels/test_fused_inv_rope_fp8_quant.py) below 1e-4.
    ratio = scale / ref_scale
    assert bool(((ratio == 0.5) | (ratio == 1.0) | (ratio == 2.0)).all()), f"T={t}: scales"
    differing = (fp8.view(torch.uint8) != ref_fp8.view(torch.uint8)).float().mean().item()
    assert differing <= 1e-3, f"T={t}: {differing:.2e} of fp8 values differ from fp32 ref"
    blocks = scale.shape[-1]
    deq = fp8.float().unflatten(-1, (blocks, -1)) * scale[..., None]
    ref = ref_fp8.float().unflatten(-1, (blocks, -1)) * ref_scale[..., None]
    cos = torch.nn.functional.cosine_similarity(deq.flatten(), ref.flatten(), dim=0).item()
    assert 1.0 - cos < 1e-4, f"T={t}: dequantised cosine distance {1.0 - cos:.2e}"


@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs a CUDA device: compiles and runs the rope kernel over the sweep",
)
@torch.inference_mode()
def test_rope_sweep_on_gpu(monkeypatch):
    kernel, loc = recompile.rope_kernel()
    module = importlib.import_module(loc.module)
    fully_specialised = triton.jit(kernel.fn)  # what v0.21.0 does with every integer arg
    # Count only the variants this test compiles (other tests may have filled the cache).
    monkeypatch.setattr(kernel, "device_caches", defaultdict(kernel.create_binder))

    # 128 heads in 16 groups of 8: at T=40000 the input offset T * 128 * 512 passes 2**31,
    # so the largest T exercises the kernel's int64 addressing.
    heads, groups, max_pos = 128, 16, 4096
    cache = _cos_sin_cache(max_pos, 64, "cuda")
    # The host code's launch options per T (recorded, not run): one variant per options class
    # is expected, compiled at the first T of that class (v0.21.0: T=1 only).
    options = [
        (launch.kwargs.get("num_warps"), launch.kwargs.get("num_stages"))
        for launch in recompile.rope_launches(TOKEN_COUNTS, heads=heads, groups=groups)
    ]
    first_of_class = {}
    for t, opts in zip(TOKEN_COUNTS, options, strict=True):
        first_of_class.setdefault(opts, t)
    compiled_at = []
    for t in TOKEN_COUNTS:
        gen = torch.Generator(device="cuda").manual_seed(t)
        o = torch.randn(t, heads, 512, device="cuda", dtype=torch.bfloat16, generator=gen)
        positions = torch.randint(0, max_pos, (t,), device="cuda", generator=gen)
        before = recompile.jit_variants(kernel)
        fp8, scale = module.fused_inv_rope_fp8_quant(o, positions, cache, groups, heads // groups)
        torch.cuda.synchronize()  # an illegal memory access raises here, at its own T
        if recompile.jit_variants(kernel) > before:
            compiled_at.append(t)
        with recompile.replace_kernel(loc, fully_specialised):
            spec_fp8, spec_scale = module.fused_inv_rope_fp8_quant(
                o, positions, cache, groups, heads // groups
            )
        torch.cuda.synchronize()
        assert torch.equal(fp8.view(torch.uint8), spec_fp8.view(torch.uint8)), f"T={t}: fp8"
        assert torch.equal(scale.view(torch.int32), spec_scale.view(torch.int32)), f"T={t}"
        if t <= 4096:  # the fp32 reference needs ~20 bytes per element; skip the largest T
            _assert_close_to_reference(fp8, scale, *_reference(o, positions, cache, groups), t)
        del o, fp8, scale, spec_fp8, spec_scale

    expected = sorted(first_of_class.values())
    assert expected[0] == recompile.WARMUP
    assert compiled_at == expected, (
        f"{loc}: compiled a variant at T={compiled_at}; expected one per launch-options "
        f"class, at T={expected} (the warm-up T=1 and where the host code changes num_warps)"
    )
    # The sweep must be able to fail: the fully specialised variant needs several.
    assert recompile.jit_variants(fully_specialised) > 1
