#!/usr/bin/env bash
# Reset vllm/ to the pin and apply patches/series (git am -3), atomically.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/_venv.sh
VSERIES_PROG=$0 exec python -m vseries apply "$@"
