"""Run by test_front.py as ``python -m pytest`` and ``pytest`` from the workspace root (not
collected on its own: its name is not test_*): vllm is the installed package, else absent,
never the root's vllm/ folder (the submodule) as a namespace package."""

import importlib.util


def test_vllm_is_not_the_root_folder():
    spec = importlib.util.find_spec("vllm")
    assert spec is None or spec.origin is not None, list(spec.submodule_search_locations)
