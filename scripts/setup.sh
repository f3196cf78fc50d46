#!/usr/bin/env bash
# The main job on a fresh machine: a virtual environment, vllm/ at the pin (git, else the
# verified PyPI source release), the series applied, the editable install with the release
# kernels, and a summary. Safe to run again: each step does nothing when it is already done.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  -h | --help)
    echo "usage: scripts/setup.sh [--force]"
    echo "  venv + vllm/ at the pin + the series applied + pip install -e vllm + summary."
    echo "  --force: let apply drop uncommitted work or commits outside the series in vllm/,"
    echo "           after keeping them under refs/vseries/backup/ (see scripts/apply.sh -h)."
    exit 0
    ;;
  "" | --force) ;;
  *)
    echo "scripts/setup.sh: unknown option $1 (see scripts/setup.sh --help)" >&2
    exit 2
    ;;
esac
. scripts/_venv.sh
python -m vseries materialise
python -m vseries apply "$@"
python -m vseries build
