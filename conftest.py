"""Keep the workspace root off sys.path while it would shadow the installed vLLM.

``python -m pytest`` puts the working directory first on sys.path, and pytest puts a
conftest's folder there to import it (this file's: the root). The root's ``vllm/`` is the
submodule (the package is ``vllm/vllm``), so Python would import it as an empty namespace
package ``vllm`` instead of the installed vLLM. ``scripts/test.sh`` runs ``python -P``; this
makes ``python -m pytest`` and ``pytest`` from the root do the same. Where a tree on the path
holds a real vLLM first (the GPU host's ``PYTHONPATH=<tree>:<root>``), the root stays: it is
how vseries is found there. Either way vseries and benchmarks are this root's own (imported
first).
"""

import importlib
import importlib.machinery
import os
import sys


def keep_root_off_path() -> None:
    """Drop the root (and '', the working directory, when that is the root) from sys.path
    when Python would import the root's vllm/ as the package vllm."""
    root = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.machinery.PathFinder.find_spec("vllm")
    if spec is not None and spec.origin is None:  # a namespace: the root's vllm/ folder
        # The tool under test is this root's vseries and benchmarks, which need not be the
        # installed ones (a clone of the workspace run with another checkout's venv, whose
        # editable install points at that checkout): import them while the root is still on
        # the path, so that dropping the root cannot swap them for the installed.
        for name in ("vseries", "benchmarks"):
            if name not in sys.modules and os.path.isdir(os.path.join(root, name)):
                importlib.import_module(name)
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != root]


keep_root_off_path()
