"""Contract tests run against whichever vLLM is importable: the installed (patched) tree, or
the base when vseries puts a plain checkout of the pin first on PYTHONPATH."""

import os
import sys

import pytest

from vseries import host

# vLLM replaces Triton with a placeholder when it finds no GPU driver, unless
# CUDA_VISIBLE_DEVICES is set (empty is enough) before vllm is imported; CPU hosts need the
# real Triton to compile kernels for sm_90. GPU hosts are left alone.
if not host.has_gpu():
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")


def pytest_report_header(config):
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    return f"vllm under test: {spec.origin if spec else 'not importable'}"


@pytest.fixture
def mock_sm90(monkeypatch):
    """A function that makes vLLM's current_platform an SM90 CUDA platform named "NVIDIA H200"
    (FP8 e4m3fn): the lazy ``vllm.platforms._current_platform`` and every loaded vLLM module
    that bound the real one. Call it after importing the vLLM modules the test uses, so that
    their import-time checks see this host."""

    def apply():
        import vllm.platforms

        from vseries.lab.platform import mock_h200

        real, fake = vllm.platforms.current_platform, mock_h200()
        monkeypatch.setattr(vllm.platforms, "_current_platform", fake, raising=False)
        for name, module in list(sys.modules.items()):
            if name.startswith("vllm") and getattr(module, "current_platform", None) is real:
                monkeypatch.setattr(module, "current_platform", fake)
        return fake

    return apply
