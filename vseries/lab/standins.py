"""Torch stand-ins for the vLLM CUDA ops that ``fused_experts_impl`` reaches, so that a contract
can run the tree's own ``fused_moe_kernel`` under Triton's interpreter on a CPU-only host.

Each stand-in follows its CUDA kernel's semantics where a contract depends on them
(``csrc/moe/moe_align_sum_kernels.cu``, ``csrc/quantization/w8a8/fp8/common.cu``,
``csrc/quantization/w8a8/int8/scaled_quant.cu``, ``csrc/activation_kernels.cu``): the
alignment with and without an ``expert_map``, the FP8 per-tensor abs-max that drops NaN like
``fmaxf`` and keeps inf, the INT8 kernels that read their scale as ``float`` (a scale of another
dtype raises, as ``const_data_ptr<float>()`` does), round-to-nearest-even and saturation.
``install`` puts them in place inside a child interpreter that imported vLLM with
``TRITON_INTERPRET=1`` (``run_child`` starts one); vLLM is imported when called, so this
module imports without it.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0


class CudaOps:
    """``vllm._custom_ops`` with the ops of the fused-MoE Triton path replaced."""

    def __init__(self, real: Any):
        self.real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    @staticmethod
    def moe_align_block_size(topk_ids, num_experts, block_size, sorted_ids, expert_ids,
                             num_tokens_post_pad, expert_map=None, scatter_idx=None):  # fmt: skip
        """Slots grouped by expert, each group padded to the block size with ``numel``; with
        ``expert_map``, local ids and the slots of other ranks' experts left out."""
        flat = topk_ids.view(-1).long()
        ids = torch.where((flat >= 0) & (flat < num_experts), flat, -1)
        if expert_map is not None:
            ids = torch.where(ids >= 0, expert_map.long()[ids.clamp(min=0)], -1)
        sorted_ids.fill_(flat.numel())
        expert_ids.fill_(-1)
        pos = 0
        for e in range(num_experts):
            slots = (ids == e).nonzero().view(-1)
            if len(slots):
                padded = -(-len(slots) // block_size) * block_size
                sorted_ids[pos : pos + len(slots)] = slots.to(torch.int32)
                expert_ids[pos // block_size : (pos + padded) // block_size] = e
                pos += padded
        num_tokens_post_pad.fill_(pos)

    @staticmethod
    def scaled_fp8_quant(x, scale=None, use_per_token_if_dynamic=False, **kwargs):
        """Per-tensor FP8; dynamic: abs-max by fmaxf (drops NaN, keeps inf) / 448, and the
        reciprocal scale (1 / inf = 0)."""
        assert not use_per_token_if_dynamic
        a = x.float()
        if scale is None:
            scale = torch.where(a.isnan(), 0, a.abs()).amax().reshape(1) / FP8_MAX
        inv = torch.where(scale == 0, torch.inf, 1 / scale)
        return (a * inv).clamp(-FP8_MAX, FP8_MAX).to(FP8), scale.float().reshape(1)

    @staticmethod
    def scaled_int8_quant(x, scale=None, azp=None, symmetric=True):
        """Static per-tensor INT8 (``static_scaled_int8_quant``): the kernel reads the scale
        as ``float``, so another dtype raises; x / scale rounded to nearest even, saturated.
        Dynamic (no scale) is per token: max|row| / 127."""
        assert symmetric and azp is None
        a = x.float()
        if scale is None:
            s = (a.abs().amax(dim=-1, keepdim=True) / 127.0).clamp(min=1e-10)
            return torch.round(a / s).clamp(-128, 127).to(torch.int8), s, None
        if scale.dtype != torch.float32:
            raise RuntimeError(f"expected scalar type Float but found {scale.dtype}")
        q = torch.round(a / scale.reshape(())).clamp(-128, 127).to(torch.int8)
        return q, scale, None

    @staticmethod
    def moe_sum(x, out, topk_ids=None, expert_map=None):
        """The top-k sum; given topk_ids, pad-aware as v0.34.0's kernel
        (csrc/moe/moe_align_sum_kernels.cu, moe_sum_pad_aware_skip): a slot whose expert
        is -1, or not this rank's under expert_map, is skipped, whatever its row holds."""
        x = x.float()
        if topk_ids is not None:
            keep = topk_ids >= 0
            if expert_map is not None:
                keep &= expert_map[topk_ids.clamp(min=0).long()] >= 0
            x = torch.where(keep[..., None], x, torch.zeros((), device=x.device))
        out.copy_(x.sum(1).to(out.dtype))


def silu_and_mul(activation, output, x, **kwargs):
    """SiLU(gate) * up over the last dimension, in float32, stored in ``output``'s dtype."""
    n = output.size(-1)
    gate, up = x[..., :n].float(), x[..., n:].float()
    output.copy_((torch.nn.functional.silu(gate) * up).to(output.dtype))
    return output


@contextlib.contextmanager
def inf_empty() -> Iterator[None]:
    """Every floating torch.empty / empty_like (wider than a byte) filled with +inf:
    uninitialised memory at its worst."""
    empty, empty_like = torch.empty, torch.empty_like

    def poison(t):
        if t.is_floating_point() and t.element_size() > 1:
            t.fill_(float("inf"))
        return t

    torch.empty = lambda *a, **k: poison(empty(*a, **k))
    torch.empty_like = lambda *a, **k: poison(empty_like(*a, **k))
    try:
        yield None
    finally:
        torch.empty, torch.empty_like = empty, empty_like


def rtne_downcasts() -> None:
    """Triton's interpreter rounding float32 down to bf16, fp16 and FP8 e4m3 as the GPU does:
    to nearest even (``cvt.rn``; FP8 saturated at 448, ``satfinite``). Triton 3.8's interpreter
    (``_convert_float``) rounds ties away from zero and drops the carry when rounding overflows
    the mantissa, so a value whose mantissa is all ones comes out about half its size wherever
    the exponent's lowest bit is set: triton-lang/triton#8322 (open; fixes proposed in open PRs
    #9808 and #11897). A kernel that rounds inside Triton (an FP8 quantisation, a bf16 store)
    then strays several percent from a float32 reference on the interpreter alone. The other
    conversions keep the interpreter's own code."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    convert = interpreter._convert_float
    if getattr(convert, "rtne_downcasts", False):
        return
    targets = {tl.bfloat16: torch.bfloat16, tl.float16: torch.float16, tl.float8e4nv: FP8}

    def fixed(input, input_dtype, output_dtype, rounding_mode):
        target = targets.get(output_dtype)
        if not (
            input_dtype == tl.float32
            and target is not None
            and rounding_mode == interpreter._ir.ROUNDING_MODE.RTNE
        ):
            return convert(input, input_dtype, output_dtype, rounding_mode)
        t = torch.from_numpy(np.ascontiguousarray(input, dtype=np.float32))
        if target == FP8:
            t = torch.where(t.isnan(), t, t.clamp(-FP8_MAX, FP8_MAX))
        bits = torch.uint8 if target == FP8 else torch.int16
        return (
            t.to(target).view(bits).numpy().view(f"uint{8 * target.itemsize}").reshape(input.shape)
        )

    fixed.rtne_downcasts = True
    interpreter._convert_float = fixed


def _use_h200() -> None:
    """vLLM's current_platform as an SM90 H200 in every vLLM module imported so far."""
    import vllm.platforms

    from vseries.lab.platform import mock_h200

    real, fake = vllm.platforms.current_platform, mock_h200()
    vllm.platforms._current_platform = fake
    for name, module in list(sys.modules.items()):
        if name.startswith("vllm") and getattr(module, "current_platform", None) is real:
            module.current_platform = fake


def install() -> Any:
    """In an interpreter that runs Triton interpreted (``TRITON_INTERPRET=1`` before the
    import): the stand-ins in the fused-MoE modules, the platform an H200. Returns the tree's
    ``fused_moe`` module, whose ``fused_experts_impl`` then runs on the CPU.

    Raises:
        AssertionError: ``fused_moe_kernel`` is not interpreted.
    """
    fm = importlib.import_module("vllm.model_executor.layers.fused_moe.fused_moe")
    align = importlib.import_module("vllm.model_executor.layers.fused_moe.moe_align_block_size")
    utils = importlib.import_module("vllm.model_executor.layers.fused_moe.utils")
    from triton.runtime.interpreter import InterpretedFunction

    kernel = fm.fused_moe_kernel
    assert isinstance(kernel, InterpretedFunction), f"not interpreted: {type(kernel)}"
    _use_h200()
    ops = CudaOps(fm.ops)
    fm.ops = align.ops = utils.ops = ops
    fm.apply_moe_activation = silu_and_mul
    return fm


def run_child(script: str, *, timeout: float = 900) -> tuple[list[dict], str]:
    """Run ``python -P <script> --cpu`` under Triton's interpreter with no CUDA device: the
    JSON lines it prints, and its output for an error message.

    The child imports this vseries from a directory that holds only a link to it: vseries
    need not be installed where vLLM is (a venv with the patched wheel), and the workspace
    root on the path would shadow an editable vLLM with the root's ``vllm/`` submodule
    folder. The rest of ``PYTHONPATH`` (the vLLM tree under test) is kept, after it.
    """
    with tempfile.TemporaryDirectory(prefix="vseries-path-") as where:
        os.symlink(Path(__file__).resolve().parents[1], Path(where) / "vseries")
        path = [where, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        env = {
            **os.environ,
            "TRITON_INTERPRET": "1",
            "CUDA_VISIBLE_DEVICES": "",
            "PYTHONPATH": os.pathsep.join(path),
        }
        p = subprocess.run(
            [sys.executable, "-P", script, "--cpu"],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    output = p.stdout[-2000:] + p.stderr[-4000:]
    if p.returncode != 0:
        raise AssertionError(f"the interpreter run exited {p.returncode}:\n{output}")
    rows = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    return rows, output
