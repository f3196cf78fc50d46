"""What this host has: a GPU, a torch that can use it, and what a fresh interpreter says.

Standard library only (the contract tests' conftest imports it on the GPU host too).
"""

import shutil
import subprocess
import sys
from pathlib import Path


def has_gpu() -> bool:
    """True when the host has an NVIDIA GPU and driver: ``nvidia-smi`` on PATH, or the
    driver's ``/dev/nvidiactl`` or ``/proc/driver/nvidia``. Cheap (no import of torch)."""
    return (
        shutil.which("nvidia-smi") is not None
        or Path("/dev/nvidiactl").exists()
        or Path("/proc/driver/nvidia").exists()
    )


def probe(code: str) -> tuple[bool, str]:
    """Run python ``code`` in a fresh interpreter started in ``/`` (so that no vllm/ folder
    of a workspace shadows the installed one); returns (exit 0, last line of its output)."""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    lines = (p.stdout + p.stderr).strip().splitlines()
    return p.returncode == 0, (lines[-1] if lines else "")


def torch_cuda() -> bool:
    """True when the torch of this environment sees a CUDA device (a fresh interpreter).
    Stricter than has_gpu(): a GPU host with a CPU-only torch answers False."""
    return probe("import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)")[0]


def short_of_disk(need: int, folders: list[str]) -> list[str]:
    """``<folder> (<n> MiB free)`` for each of ``folders`` with less than ``need`` bytes free
    (where a full disk fails writes with "No space left on device")."""
    low = []
    for folder in dict.fromkeys(folders):
        free = shutil.disk_usage(folder).free
        if free < need:
            low.append(f"{folder} ({free >> 20} MiB free)")
    return low
