"""A clean checkout of the plain pin beside vllm/, for running things against the base."""

import shutil
from pathlib import Path

from vseries import git, paths
from vseries import pin as pinmod

KERNELS = ("_C.abi3.so", "_moe_C.abi3.so", "_C_stable_libtorch.abi3.so", "cumem_allocator.abi3.so")


def base_tree() -> Path:
    """``.vseries/base``: a detached worktree of vllm/ at the pin, with the release kernels
    linked in from vllm/ when they are there (so GPU tests can load them). Made on first use,
    moved back to the pin (discarding nothing of the user's: it is ours) on later ones."""
    pin = pinmod.load()
    vdir, dest = paths.vllm_dir(), paths.state_dir() / "base"
    if not git.is_repo(dest):
        shutil.rmtree(dest, ignore_errors=True)
        git.run(vdir, "worktree", "prune")
        git.run(vdir, "worktree", "add", "-q", "--detach", str(dest), pin.commit)
    elif git.rev(dest, "HEAD") != pin.commit or git.dirty(dest):
        git.run(dest, "checkout", "-q", "-f", "--detach", pin.commit)
    for so in KERNELS:
        src, link = vdir / "vllm" / so, dest / "vllm" / so
        if src.exists() and not link.exists():
            link.symlink_to(src)
    return dest
