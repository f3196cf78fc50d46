#!/usr/bin/env bash
# The main job on a fresh machine: a virtual environment, vllm/ at the pin (git, else the
# verified PyPI source release), the series applied, the editable install with the release
# kernels, and a summary. Safe to run again: each step does nothing when it is already done.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/_venv.sh
python -m vseries materialise
python -m vseries apply "$@"
python -m vseries build
