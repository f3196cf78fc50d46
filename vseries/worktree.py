"""The base tree: a clean checkout of the plain pin beside vllm/, for running things (the
contract and upstream tiers) against the base."""

from pathlib import Path

from vseries import git
from vseries import pin as pinmod
from vseries.workspace import Workspace

# the release kernels: v0.21.0's names, and v0.34.0's (the stable-ABI builds)
KERNELS = (
    "_C.abi3.so",
    "_moe_C.abi3.so",
    "_C_stable_libtorch.abi3.so",
    "_moe_C_stable_libtorch.abi3.so",
    "cumem_allocator.abi3.so",
)


def base_tree(ws: Workspace) -> Path:
    """``.vseries/base``: a detached worktree of vllm/ at the pin, with the release kernels
    linked in from vllm/ when they are there (so GPU tests can load them). Made on first use,
    moved back to the pin (discarding nothing of the user's: it is ours) on later ones."""
    pin = pinmod.load(ws.pin_file)
    dest = git.add_worktree(ws.vllm, ws.state / "base", pin.commit)
    for so in KERNELS:
        src, link = ws.vllm / "vllm" / so, dest / "vllm" / so
        if src.exists() and not link.exists():
            link.symlink_to(src)
    return dest
