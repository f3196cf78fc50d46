"""The benchmark annex: H200 benchmarks of the series' patches, their reports, and the
end-to-end serving harness (``e2e/``). See README.md beside this file.

An importable package, like ``vseries``: modules import each other as ``benchmarks.<name>``
and run as ``python -m benchmarks.<name>`` (or ``python benchmarks/<name>.py``) with the
workspace importable: the editable install (``scripts/setup.sh``) here, the workspace root on
``PYTHONPATH`` on the H200 host (``benchmarks/h200/lib.sh``). vLLM's source repository has a
top-level ``benchmarks`` package too: a full vLLM checkout ahead of the workspace on the path
would shadow this one (the staged H200 trees hold only ``vllm/`` and ``tests/``).
"""
