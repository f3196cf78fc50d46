#!/usr/bin/env bash
# Run the test tiers: workspace (CPU), contract (each patch: base must fail, patched must pass),
# and upstream (vLLM's own kernel tests, base vs patched; only where CUDA is present).
# Exits non-zero on any failure, and on a tier that collected no test. --fast: the quick loop
# (the workspace tier without the tests marked slow); CI runs everything.
set -euo pipefail
cd "$(dirname "$0")/.."
# --line <tag>: a kept line's tiers alone, from its own venv when scripts/setup.sh --line made one
for ((i = 1; i <= $#; i++)); do
  if [ "${!i}" = --line ] && [ $i -lt $# ]; then
    j=$((i + 1))
    [ -x ".venv-${!j}/bin/python" ] && export VSERIES_VENV=".venv-${!j}"
  fi
done
. scripts/_venv.sh
VSERIES_PROG=$0 exec python -m vseries test "$@"
