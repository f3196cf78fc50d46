"""Where things live in the workspace. Everything is relative to the workspace root."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def root() -> Path:
    """The workspace root (VSERIES_ROOT overrides it, for tests on copies)."""
    return Path(os.environ.get("VSERIES_ROOT", ROOT)).resolve()


def vllm_dir() -> Path:
    """The submodule checkout, ``<root>/vllm``."""
    return root() / "vllm"


def patches_dir() -> Path:
    return root() / "patches"


def cache_dir() -> Path:
    """Download cache: VSERIES_CACHE, else $XDG_CACHE_HOME/vseries, else ~/.cache/vseries."""
    env = os.environ.get("VSERIES_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(xdg) / "vseries"


def state_dir() -> Path:
    """Workspace-local scratch (base worktree, reports); ignored by git."""
    return root() / ".vseries"
