#!/usr/bin/env bash
# pip install -e vllm with the release kernels of the pinned wheel, then a summary.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/_venv.sh
VSERIES_PROG=$0 exec python -m vseries build "$@"
