#!/usr/bin/env bash
# CPU side of an H200 session: pack the patched tree (vllm/) and the base (.vseries/base) with
# the pinned release kernels and the host's extra wheels into parts of at most 56 MiB under
# .gpu/stage (ignored). Needs ../shared/gpu/stage.py (the team's recipe) and .gpu/wheels
# (see CONTRIBUTING.md "Run the GPU tiers"). Send each part with its own device run, then
# benchmarks/h200/run.sh on the host.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/_venv.sh
recipe=${RECIPE:-../shared/gpu}
base=$(python -c 'from vseries import worktree; print(worktree.base_tree())')
wheel=$(python -c 'from vseries import fetch, pin; p = pin.load(); print(fetch.fetch(p.package, p.wheel))')
args=(--src patched=vllm --src "base=$base" --wheel "$wheel" --out .gpu/stage)
[ -d .gpu/wheels ] && args+=(--wheels .gpu/wheels)
python "$recipe/stage.py" "${args[@]}" "$@"
