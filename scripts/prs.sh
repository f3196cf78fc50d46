#!/usr/bin/env bash
# One checked upstream PR branch per carried patch, its title/body/commands in out/prs/NNNN/.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/_venv.sh
VSERIES_PROG=$0 exec python -m vseries prs "$@"
