"""Contract of the FP8 oracle patch: per-tensor FP8 MoE on SM90 defaults to TRITON.

v0.21.0's FP8 MoE oracle (`select_fp8_moe_backend` in
vllm/model_executor/layers/fused_moe/oracle/fp8.py) picks FLASHINFER_CUTLASS on SM90 for
per-tensor FP8 MoE (static per-tensor weights and activations) whenever FlashInfer is
installed. The patch puts TRITON first there when there is no expert parallelism, as
v0.21.0 already does for block FP8 under tensor parallelism.

The contract, checked against whatever vLLM is importable, on a mocked SM90 CUDA platform
with FlashInfer's MoE kernels mocked as installed and DeepGEMM as absent (no GPU touched):
- per-tensor FP8 MoE (static or dynamic per-tensor activations), no EP, no user choice:
  TRITON;
- the same for a compressed-tensors checkpoint (VLLM_CUTLASS allowed), with no setting;
- an explicit user choice still wins: `moe_backend="flashinfer_cutlass"` (--moe-backend)
  and, in releases that have it (up to v0.22.0), VLLM_USE_FLASHINFER_MOE_FP8=1 both give
  FLASHINFER_CUTLASS;
- with expert parallelism per-tensor FP8 keeps the release's order (FLASHINFER_CUTLASS);
- block FP8 keeps v0.21.0's rule: TRITON without EP, FLASHINFER_CUTLASS with EP.

The meaning of VLLM_USE_FLASHINFER_MOE_FP8=0 is not part of the contract: the v0.21.0 patch
also made it give TRITON instead of VLLM_CUTLASS on compressed-tensors checkpoints; the
v0.34.0 port dropped that (v0.34.0 has no such variable; where a release has it, its
meaning is the release's).

It runs against any release from v0.21.0 on: the FusedMoEConfig is built from the fields the
release's signature takes, and the oracle runs inside a current VllmConfig as it does when
vLLM builds a model (v0.33.0 asserts there is one). Where the contract cannot reach the
decision (a config it cannot build, FlashInfer CUTLASS not made available by the mocks, an
assert inside vLLM), the test errors with something other than an AssertionError, which the
rebase tool reads as "could not decide": a TRITON answer only counts when FLASHINFER_CUTLASS
was a real candidate.

Base v0.21.0 fails the first case for static activations (FLASHINFER_CUTLASS); the patched
tree passes. The lead's conftest sets CUDA_VISIBLE_DEVICES="" before vLLM is imported. Run:
    CUDA_VISIBLE_DEVICES="" PYTHONPATH=<vllm tree> \
        python -m pytest tests/contract/test_fp8_oracle.py
"""

from __future__ import annotations

import contextlib
import inspect
import sys

import pytest

pytestmark = pytest.mark.contract

torch = pytest.importorskip("torch")

from vseries.lab import recompile  # noqa: E402  (after importorskip)

# Before vLLM is imported: a plain upstream tree must not take itself for a CPU build,
# nor import the installed vLLM's modules.
recompile.use_vllm_tree()

# Availability checks the oracle's kernel classes call, mocked so that the answer does not
# depend on what the host has installed. Patched in every loaded vllm module that bound the
# name, so the test keeps working if an upstream release moves a kernel class.
_AVAILABILITY = {
    "has_flashinfer_cutlass_fused_moe": True,
    "has_flashinfer_trtllm_fused_moe": True,
    "is_deep_gemm_supported": False,
    "cutlass_group_gemm_supported": True,
}

# Environment variables the oracle reads; cleared so that only the test's choice counts.
_ORACLE_ENV = [
    "VLLM_USE_FLASHINFER_MOE_FP8",
    "VLLM_FLASHINFER_MOE_BACKEND",
    "VLLM_USE_DEEP_GEMM",
    "VLLM_MOE_USE_DEEP_GEMM",
    "VLLM_TEST_FORCE_FP8_MARLIN",
    "VLLM_ROCM_USE_AITER",
    "VLLM_ROCM_USE_AITER_MOE",
    "VLLM_BATCH_INVARIANT",
]


@pytest.fixture
def oracle(monkeypatch):
    """The FP8 oracle module of the vLLM under test, on a mocked SM90 (9.0) CUDA platform,
    inside a default current VllmConfig.

    Raises:
        RuntimeError: the mocks did not make FLASHINFER_CUTLASS a candidate for per-tensor
            FP8 MoE in this release, so no answer of the oracle could decide the contract.
    """
    from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.fused_moe.oracle import fp8 as fp8_oracle
    from vllm.platforms import current_platform
    from vllm.platforms.interface import DeviceCapability, PlatformEnum

    for name in _ORACLE_ENV:
        monkeypatch.delenv(name, raising=False)
    # The current config vLLM sets while it builds a model; v0.33.0's oracle reads its
    # model_config (None here). Made before the mocks, on this host's device: the oracle does
    # not read the device from it, and DeviceConfig cannot infer one on a host without a GPU.
    vllm_config = VllmConfig(device_config=DeviceConfig(device="cpu"))

    cap = DeviceCapability(9, 0)

    def to_int(c):
        return c[0] * 10 + c[1] if isinstance(c, tuple) else c

    p = current_platform
    monkeypatch.setattr(p, "_enum", PlatformEnum.CUDA)
    monkeypatch.setattr(p, "device_name", "cuda")
    monkeypatch.setattr(p, "device_type", "cuda")
    monkeypatch.setattr(p, "get_device_capability", lambda device_id=0: cap)
    monkeypatch.setattr(p, "has_device_capability", lambda c, device_id=0: to_int(c) <= 90)
    monkeypatch.setattr(p, "is_device_capability", lambda c, device_id=0: to_int(c) == 90)
    monkeypatch.setattr(
        p, "is_device_capability_family", lambda c, device_id=0: to_int(c) // 10 == 9
    )
    monkeypatch.setattr(p, "supports_fp8", lambda: True)
    monkeypatch.setattr(p, "support_deep_gemm", lambda: False)

    # Load every kernel class the oracle can return, then mock the availability checks
    # wherever they were bound.
    for backend in fp8_oracle.Fp8MoeBackend:
        # NONE raises ValueError; a backend may need another platform's packages.
        with contextlib.suppress(ImportError, ValueError):
            fp8_oracle.backend_to_kernel_cls(backend)
    for mod_name, mod in list(sys.modules.items()):
        if not mod_name.startswith("vllm.") or mod is None:
            continue
        for fn_name, value in _AVAILABILITY.items():
            if callable(getattr(mod, fn_name, None)):
                monkeypatch.setattr(mod, fn_name, lambda value=value: value)
    with set_current_vllm_config(vllm_config):
        supported, reason = _supports(fp8_oracle, "per_tensor_static")
        if not supported:
            raise RuntimeError(
                "precondition: FLASHINFER_CUTLASS does not support per-tensor FP8 MoE on the "
                f"mocked SM90 ({reason}); the mocks no longer reach this release's checks"
            )
        yield fp8_oracle


def _supports(oracle, quant: str, backend: str = "FLASHINFER_CUTLASS") -> tuple[bool, str | None]:
    """Whether a kernel class of the backend accepts the config (the oracle's own test)."""
    reason = None
    for k_cls in oracle.backend_to_kernel_cls(oracle.Fp8MoeBackend[backend]):
        supported, reason = k_cls.is_supported_config(
            k_cls, _moe_config(), *_keys(quant), oracle.mk.FusedMoEActivationFormat.Standard
        )
        if supported:
            return True, None
    return False, reason


def _moe_config(ep_size: int = 1, moe_backend: str = "auto"):
    """A Qwen3-30B-A3B-like FusedMoEConfig (E=128, top-8, hidden 2048, intermediate 768).

    Built from the fields the release's FusedMoEConfig takes (read from its signature): v0.24.0
    replaced the per-partition ``intermediate_size_per_partition`` by the full
    ``intermediate_size`` (the same here: no tensor parallelism). A release that requires a
    field this test does not know raises TypeError, which decides nothing (the rebase tool
    reads it as "could not decide"), not an assertion.
    """
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import (
        FusedMoEConfig,
        FusedMoEParallelConfig,
        RoutingMethodType,
    )

    parallel = FusedMoEParallelConfig.make_no_parallel()
    if ep_size > 1:
        parallel.ep_size = ep_size
        parallel.use_ep = True
    fields = inspect.signature(FusedMoEConfig).parameters
    values = dict(
        num_experts=128,
        experts_per_token=8,
        hidden_dim=2048,
        num_local_experts=128 // ep_size,
        num_logical_experts=128,
        moe_parallel_config=parallel,
        activation=MoEActivation.SILU,
        in_dtype=torch.bfloat16,
        device="cuda",
        routing_method=RoutingMethodType.Renormalize,
        max_num_tokens=512,
        moe_backend=moe_backend,
    )
    if "intermediate_size" in fields:  # v0.24.0 on: the full size, split by __post_init__
        values["intermediate_size"] = 768
    else:
        values["intermediate_size_per_partition"] = 768
    unknown = [n for n, f in fields.items() if f.default is f.empty and n not in values]
    if unknown:
        raise TypeError(f"this contract cannot build this release's FusedMoEConfig: {unknown}?")
    if "moe_backend" not in fields:
        raise TypeError("this release's FusedMoEConfig takes no moe_backend")
    return FusedMoEConfig(**{n: v for n, v in values.items() if n in fields})


def _keys(name: str):
    from vllm.model_executor.layers.quantization.utils import quant_utils as q

    return {
        "per_tensor_static": (q.kFp8StaticTensorSym, q.kFp8StaticTensorSym),
        "per_tensor_dynamic": (q.kFp8StaticTensorSym, q.kFp8DynamicTensorSym),
        "block_128x128": (q.kFp8Static128BlockSym, q.kFp8Dynamic128Sym),
    }[name]


def _select(oracle, config, quant: str, allow_vllm_cutlass: bool = False) -> str:
    """The backend the oracle selects.

    Raises:
        RuntimeError: vLLM raised an AssertionError of its own (not a decision; as an
            AssertionError it would read as "the patch is still needed"), or returned no
            kernel class.
    """
    try:
        backend, experts_cls = oracle.select_fp8_moe_backend(
            config, *_keys(quant), allow_vllm_cutlass=allow_vllm_cutlass
        )
    except AssertionError as e:
        raise RuntimeError(f"vLLM asserted inside select_fp8_moe_backend: {e}") from e
    if experts_cls is None:
        raise RuntimeError(f"select_fp8_moe_backend returned {backend} and no kernel class")
    return backend.value


@pytest.mark.parametrize("quant", ["per_tensor_static", "per_tensor_dynamic"])
def test_sm90_per_tensor_fp8_defaults_to_triton(oracle, quant):
    assert _select(oracle, _moe_config(), quant) == "TRITON"


def test_explicit_moe_backend_wins(oracle):
    config = _moe_config(moe_backend="flashinfer_cutlass")
    assert _select(oracle, config, "per_tensor_static") == "FLASHINFER_CUTLASS"


def test_explicit_flashinfer_env_wins(oracle, monkeypatch):
    from vllm import envs

    if "VLLM_USE_FLASHINFER_MOE_FP8" not in envs.environment_variables:
        pytest.skip(
            "not applicable from v0.24.0, which removed VLLM_USE_FLASHINFER_MOE_FP8 (the kept "
            "v0.21.0 line runs this case); here --moe-backend is the switch "
            "(test_explicit_moe_backend_wins)"
        )
    monkeypatch.setenv("VLLM_USE_FLASHINFER_MOE_FP8", "1")
    assert _select(oracle, _moe_config(), "per_tensor_static") == "FLASHINFER_CUTLASS"


def test_compressed_tensors_per_tensor_fp8_defaults_to_triton(oracle):
    # compressed-tensors passes allow_vllm_cutlass=True; FLASHINFER_CUTLASS is a candidate
    # (checked by the fixture), so TRITON only comes from the SM90 rule.
    config = _moe_config()
    assert _select(oracle, config, "per_tensor_static", allow_vllm_cutlass=True) == "TRITON"


def test_per_tensor_fp8_with_ep_keeps_flashinfer_cutlass(oracle):
    assert _select(oracle, _moe_config(ep_size=2), "per_tensor_static") == "FLASHINFER_CUTLASS"


@pytest.mark.parametrize(
    "ep_size,expected",
    [(1, "TRITON"), (2, "FLASHINFER_CUTLASS")],  # v0.21.0: TRITON for TP, FI CUTLASS for EP
)
def test_block_fp8_keeps_v0_21_rule(oracle, ep_size, expected):
    assert _select(oracle, _moe_config(ep_size=ep_size), "block_128x128") == expected
