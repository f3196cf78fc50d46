"""Contract tests run against whichever vLLM is importable: the installed (patched) tree, or
the base when vseries puts a plain checkout of the pin first on PYTHONPATH."""

import os

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
