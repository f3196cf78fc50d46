#!/usr/bin/env bash
# Rebase the series onto a newer upstream release: rebase.sh <tag> | --continue | --skip | --abort
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/_venv.sh
VSERIES_PROG=$0 exec python -m vseries rebase "$@"
