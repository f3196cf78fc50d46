#!/usr/bin/env bash
# The main job on a fresh machine: a virtual environment, vllm/ at the pin (git, else the
# verified PyPI source release), the series applied, the editable install with the release
# kernels; then every kept line's trees (lines/<tag>/: its pin and series), for its contract
# tier, with the packages they need and .venv lacks in .vseries/lines/<tag>/site (never in
# .venv); the summary last. Safe to run again: each step does nothing when it is already done.
set -euo pipefail
cd "$(dirname "$0")/.."
kept() { find lines -mindepth 2 -maxdepth 2 -name upstream.toml 2>/dev/null | cut -d/ -f2 | sort | tr '\n' ' '; }
usage() {
  echo "usage: scripts/setup.sh [--force] [--line <tag>]"
  echo "  venv + vllm/ at the pin + the series applied + pip install -e vllm + summary,"
  echo "  and the trees of every kept line (lines/<tag>/) for scripts/test.sh's contract tier,"
  echo "  the packages they need and the venv lacks in .vseries/lines/<tag>/site (not the venv)."
  echo "  --force: let apply drop uncommitted work or commits outside the series in vllm/,"
  echo "           after keeping them under refs/vseries/backup/ (see scripts/apply.sh -h)."
  echo "  --line <tag>: set up a kept line instead (e.g. v0.21.0, the series before the move"
  echo "           to the main pin): its own venv .venv-<tag>, its tree"
  echo "           .vseries/lines/<tag>/vllm with its series, installed editable there."
  echo "  kept lines: $(kept)"
}
force=()
line=""
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --force) force=(--force) ;;
    --line | --line=*)
      if [ "$1" = --line ]; then
        [ $# -ge 2 ] || { echo "scripts/setup.sh: --line needs a tag (see scripts/setup.sh --help)" >&2; exit 2; }
        line=$2
        shift
      else
        line=${1#--line=}
      fi
      [ -n "$line" ] || { echo "scripts/setup.sh: --line needs a tag, not an empty value (see scripts/setup.sh --help)" >&2; exit 2; }
      ;;
    *)
      echo "scripts/setup.sh: unknown option $1 (see scripts/setup.sh --help)" >&2
      exit 2
      ;;
  esac
  shift
done
if [ -n "$line" ]; then
  if [[ ! "$line" =~ ^v[0-9][0-9.]*[A-Za-z0-9.]*$ ]] || [ ! -f "lines/$line/upstream.toml" ]; then
    echo "scripts/setup.sh: no kept line '${line:0:80}' (lines/ holds: $(kept))" >&2
    echo "next: scripts/setup.sh --line <one of them>, or scripts/setup.sh for the main line" >&2
    exit 2
  fi
  export VSERIES_LINE=$line VSERIES_VENV=.venv-$line
fi
# the steps; pip's warnings about the host's missing index folders counted in one line (see
# scripts/_pip_locations.sh), the summary last
steps() {
  set -e
  echo "setup: the editable installs below (this workspace's package, then vLLM) make" \
    "setuptools print banners (\"Please be careful ...\"): expected (CONTRIBUTING.md#set-up)"
  . scripts/_venv.sh
  python -m vseries materialise
  python -m vseries apply "${force[@]}"
  python -m vseries build --no-summary
  if [ -z "$line" ]; then
    for pin in lines/*/upstream.toml; do
      [ -e "$pin" ] || continue
      tag=$(basename "$(dirname "$pin")")
      VSERIES_LINE=$tag python -m vseries materialise
      VSERIES_LINE=$tag python -m vseries apply "${force[@]}"
      VSERIES_LINE=$tag python -m vseries build --line-requirements
    done
  fi
}
# shellcheck source=scripts/_pip_locations.sh
. scripts/_pip_locations.sh
note=$(mktemp)
trap 'rm -f "$note"' EXIT
set +e # steps sets -e in its own subshell; its status is read below
{ steps 2>&1 1>&3 3>&- | pip_locations "$note" >&2; } 3>&1
status=$?
set -e
pip_locations_said "$note"
[ "$status" -eq 0 ] || exit "$status"
. scripts/_venv.sh
python -m vseries build --summary-only
