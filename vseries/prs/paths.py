"""What a PR body may name: vLLM's own paths and commands, never the workspace's.

An upstream maintainer can run ``pytest tests/kernels/moe/test_moe.py``, ``vllm bench
latency`` or ``python benchmarks/kernels/benchmark_moe.py``: they are in vLLM's tree. They
cannot run ``benchmarks/h200/moved.sh`` or ``python -m benchmarks.ep_nan``: those are this
workspace's. ``foreign`` finds the latter in a text: every path-like token (a word with a
``/``) and every ``python -m <module>`` that exists in the workspace but not in vLLM's tree
at the PR branch. A path that exists in neither (``fused_moe/utils.py``, short for vLLM's
file) is not the workspace's and passes.
"""

import re
from collections.abc import Callable
from pathlib import Path

from vseries import git

# a relative path with at least one "/", not inside a URL or another path
PATH = re.compile(r"(?<![\w./~<:@-])((?:[\w.-]+/)+[\w.-]*)")
MODULE = re.compile(r"\bpython3?(?:\s+-[A-Za-z]+)*\s+-m\s+([\w.]+)")


def foreign(
    text: str, in_workspace: Callable[[str], bool], in_upstream: Callable[[str], bool]
) -> list[str]:
    """The workspace's paths and modules that ``text`` names and vLLM's tree lacks, in the
    order they first appear, once each (a module as ``python -m <name>``)."""
    out: dict[str, None] = {}
    for m in PATH.finditer(text):
        p = m.group(1).rstrip(".")
        if p.strip("/") and in_workspace(p) and not in_upstream(p):
            out[p] = None
    for m in MODULE.finditer(text):
        mod = m.group(1).replace(".", "/")
        files = (f"{mod}.py", f"{mod}/__init__.py", f"{mod}/__main__.py")
        if any(in_workspace(f) for f in files) and not any(in_upstream(f) for f in files):
            out[f"python -m {m.group(1)}"] = None
    return list(out)


def checker(root: Path, vdir: Path, commit: str) -> Callable[[str], list[str]]:
    """``foreign`` for one PR: the workspace at ``root`` (its vllm/ folder left out, which is
    vLLM's) against the tree of ``commit`` in ``vdir`` (the PR branch)."""
    files = set(git.run(vdir, "ls-tree", "-r", "--name-only", commit).splitlines())
    folders = {str(Path(f).parent) for f in files}
    folders |= {str(p) for f in folders for p in Path(f).parents}

    def in_upstream(p: str) -> bool:
        p = p.rstrip("/")
        return p in files or p in folders

    def in_workspace(p: str) -> bool:
        first = Path(p).parts[0] if Path(p).parts else ""
        return first not in ("vllm", ".", "..") and (root / p).exists()

    return lambda text: foreign(text, in_workspace, in_upstream)
