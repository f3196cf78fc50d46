#!/usr/bin/env bash
# Export vllm/'s commits on top of the pin back into patches/ (byte-stable).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/_venv.sh
VSERIES_PROG=$0 exec python -m vseries refresh "$@"
