"""Contract of the H200 per-tensor FP8 fused-MoE config patch (config files only).

vLLM v0.34.0 ships H200 configs for the Qwen3-30B-A3B (E=128, N=768) and DeepSeek-V3 TP8
(E=256, N=256) MoE shapes in block-FP8 and bf16 only; per-tensor FP8 layers of these shapes
run `get_default_config`. The patch adds
`E=128,N=768,device_name=NVIDIA_H200,dtype=fp8_w8a8.json` and
`E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8.json`, written in v0.34.0's format: the
v0.21.0 series carried the same tiles with a "SWAP_AB" key, which v0.34.0's launcher would
pass twice (it sets `SWAP_AB=` itself from `fused_moe/utils.py` `enable_swap_ab` and then
spreads `**config`: a duplicate-keyword TypeError at the first MoE call).

The promise, against whichever vLLM imports first, on a mocked SM90 "NVIDIA H200" platform
(the lead's `mock_sm90` fixture):
- the release's own lookup (`get_moe_configs`, `try_get_optimal_moe_config`) finds a tuned
  per-tensor FP8 file for both shapes, from batch 1 to at least 4096 tokens;
- every entry launches through the release's `invoke_fused_moe_triton_kernel` for both GEMMs
  of the layer (w13 and w2) without a TypeError, every keyword reaching `fused_moe_kernel`
  is one of its parameters or a Triton launch option, and the entry's tile is what reaches
  the kernel (nothing is run: `JITFunction.run` is recorded, CPU tensors stand in).

Plain v0.34.0 fails (no file: the default config), the patched tree passes; v0.34.0 with the
v0.21.0 files copied in fails on the launcher (SWAP_AB passed twice). v0.21.0 with the series
passes too (its launcher consumed the key). Run from the workspace root:
    CUDA_VISIBLE_DEVICES="" PYTHONPATH=<vllm tree> python -P -m pytest -m contract \
        tests/contract/test_h200_fp8_configs.py
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

pytestmark = pytest.mark.contract

triton = pytest.importorskip("triton")

from vseries.lab import recompile  # noqa: E402  (after importorskip)

# Before vLLM is imported: a plain upstream tree must not take itself for a CPU build,
# nor import the installed vLLM's modules.
recompile.use_vllm_tree()

# (E, N = w2's K, hidden size = w13's K, top_k) of the per-tensor FP8 layer slice.
SHAPES = {
    "qwen3_30b_a3b": (128, 768, 2048, 8),
    "deepseek_v3_tp8": (256, 256, 7168, 8),
}
DTYPE = "fp8_w8a8"
NUM_TOKENS = 4


@pytest.fixture
def h200(mock_sm90):
    """The fused_moe module on a mocked H200, with the config caches cleared around the test
    (and VLLM_TUNED_CONFIG_FOLDER ignored: only the tree's own files count)."""
    import os

    from vllm.model_executor.layers.fused_moe import fused_moe as fm
    from vllm.model_executor.layers.fused_moe import utils as moe_utils
    from vllm.triton_utils import HAS_TRITON

    if not HAS_TRITON:
        pytest.skip('vLLM replaced Triton by its placeholder: set CUDA_VISIBLE_DEVICES=""')
    folder = os.environ.pop("VLLM_TUNED_CONFIG_FOLDER", None)
    caches = [fm.get_moe_configs] + [
        f for f in [getattr(moe_utils, "enable_swap_ab", None)] if hasattr(f, "cache_clear")
    ]
    for f in caches:
        f.cache_clear()
    mock_sm90()
    try:
        yield fm
    finally:
        for f in caches:
            f.cache_clear()
        if folder is not None:
            os.environ["VLLM_TUNED_CONFIG_FOLDER"] = folder


def _configs(fm, shape):
    E, N, _, _ = SHAPES[shape]
    name = fm.get_config_file_name(E, N, DTYPE)
    assert name == f"E={E},N={N},device_name=NVIDIA_H200,dtype={DTYPE}.json", name
    configs = fm.get_moe_configs(E, N, DTYPE)
    assert configs, f"{name}: not found by get_moe_configs (the default config would run)"
    return configs


@pytest.mark.parametrize("shape", list(SHAPES))
def test_h200_fp8_config_found(shape, h200):
    fm = h200
    E, N, hidden, top_k = SHAPES[shape]
    configs = _configs(fm, shape)
    assert min(configs) == 1 and max(configs) >= 4096, sorted(configs)
    for m, config in configs.items():
        got = fm.try_get_optimal_moe_config((E, 2 * N, hidden), (E, hidden, N), top_k, DTYPE, m)
        assert got == config, f"M={m}: try_get_optimal_moe_config gave {got}"


def _launch(fm, config, n, k, top_k, monkeypatch):
    """Record the Triton launch of the release's launcher for one per-tensor FP8 GEMM."""
    from triton.runtime.jit import JITFunction

    experts, bm = 2, config["BLOCK_SIZE_M"]  # the launcher reads only B's shape and strides
    em = NUM_TOKENS * top_k + experts * (bm - 1)
    launches = []

    def run(self, *args, grid, warmup, **kwargs):
        launches.append((self, args, kwargs))

    with monkeypatch.context() as m:
        m.setattr(JITFunction, "run", run)
        fm.invoke_fused_moe_triton_kernel(
            torch.empty(NUM_TOKENS, k, dtype=torch.float8_e4m3fn),
            torch.empty(experts, n, k, dtype=torch.float8_e4m3fn),
            torch.empty(NUM_TOKENS, top_k, n, dtype=torch.bfloat16),
            torch.empty(1),
            torch.empty(experts),
            torch.empty(NUM_TOKENS, top_k),
            torch.zeros(em, dtype=torch.int32),
            torch.zeros(triton.cdiv(em, bm), dtype=torch.int32),
            torch.zeros(1, dtype=torch.int32),
            False,
            top_k,
            dict(config),
            triton.language.bfloat16,
            True,
            False,
            False,
            False,
            False,
            None,
        )
    if len(launches) != 1:
        raise RuntimeError(f"expected one Triton launch, got {len(launches)}")
    return launches[0]


@pytest.mark.parametrize("gemm", ["w13", "w2"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_h200_fp8_configs_launch(shape, gemm, h200, monkeypatch):
    from triton.backends.nvidia.compiler import CUDAOptions

    fm = h200
    _, N, hidden, top_k = SHAPES[shape]
    n, k = (2 * N, hidden) if gemm == "w13" else (hidden, N)
    options = {f.name for f in dataclasses.fields(CUDAOptions)}
    for m, config in _configs(fm, shape).items():
        try:
            kernel, args, kwargs = _launch(fm, config, n, k, top_k, monkeypatch)
        except TypeError as e:
            pytest.fail(f"M={m}: the launcher rejects {config}: {e}")
        params = set(kernel.arg_names[len(args) :])
        unknown = set(kwargs) - params - options
        assert not unknown, f"M={m}: {sorted(unknown)} reach {kernel.__name__} unused"
        missing = [p.name for p in kernel.params[len(args) :] if p.name not in kwargs]
        missing = [p for p in missing if not kernel.params[kernel.arg_names.index(p)].has_default]
        assert not missing, f"M={m}: {kernel.__name__} lacks {missing}"
        assert kwargs["BLOCK_SIZE_M"] == config["BLOCK_SIZE_M"], f"M={m}: token tile changed"
