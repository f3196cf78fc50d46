"""vLLM's platform as an SM90 H200, for host-side code that must believe it runs on one.

The config lookup (``get_config_file_name`` reads the device name), the SWAP_AB rule and the
decode path's rules (compute capability 9.0) and FP8 (e4m3fn) read ``current_platform``;
tests, the compile audit and the warm-up enumeration use this stand-in on CPU-only hosts.
vLLM is imported when called, so this module imports without it.
"""

from typing import Any


def mock_h200() -> Any:
    """An instance of a CUDA ``Platform`` with capability 9.0, named "NVIDIA H200", FP8
    e4m3fn."""
    import torch
    from vllm.platforms.interface import DeviceCapability, Platform, PlatformEnum

    class MockH200(Platform):
        _enum = PlatformEnum.CUDA
        device_name = device_type = "cuda"

        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> DeviceCapability:
            return DeviceCapability(9, 0)

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:
            return "NVIDIA H200"

        @classmethod
        def fp8_dtype(cls) -> torch.dtype:
            return torch.float8_e4m3fn

    return MockH200()
