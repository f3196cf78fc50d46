#!/usr/bin/env bash
# Run the test tiers: workspace (CPU), contract (each patch: base must fail, patched must pass),
# and upstream (vLLM's own kernel tests, base vs patched; only where CUDA is present).
# Exits non-zero on any failure, and on a tier that collected no test. --fast: the quick loop
# (the workspace tier without the tests marked slow); CI runs everything.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/_venv.sh
exec python -m vseries test "$@"
