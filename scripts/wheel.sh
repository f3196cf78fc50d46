#!/usr/bin/env bash
# The line's release wheel with the series in it, as a wheel of its own (out/wheel/<tag>/).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/_venv.sh
VSERIES_PROG=$0 exec python -m vseries wheel "$@"
