# shellcheck shell=bash
# Sourced by the scripts: use the active virtual environment, else create and activate .venv
# (VSERIES_VENV: another folder, e.g. .venv-v0.21.0 for a kept line), and install the
# workspace's own requirements when they changed since the last run.
# -h/--help creates and installs nothing: the verb's help from the venv's python when there is
# one, else from python3 >= 3.11 (vseries' command line is standard library), else a line.
venv=${VSERIES_VENV:-.venv}
# scripts/<verb>.sh are vseries' verbs; another script that sources this file
# (benchmarks/h200/stage.sh) parses its own options
verb_script=false
[ "$(basename "$(dirname "$0")")" = scripts ] && verb_script=true
for arg in "$@"; do
  $verb_script || break
  case "$arg" in
    --) break ;;
    -h | --help)
      verb=$(basename "$0" .sh)
      py=""
      if [ -n "${VIRTUAL_ENV:-}" ]; then
        py=python
      elif [ -x "$venv/bin/python" ]; then
        py="$venv/bin/python"
      elif "${PYTHON:-python3}" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        py=${PYTHON:-python3}
      fi
      if [ -n "$py" ] && VSERIES_PROG=$0 PYTHONDONTWRITEBYTECODE=1 "$py" -m vseries "$verb" --help; then
        exit 0
      fi
      echo "usage: scripts/$verb.sh [options]"
      if [ -n "$py" ]; then # a Python was found, and its --help failed (said above)
        echo "  (the full --help failed with $("$py" --version 2>&1); scripts/setup.sh makes"
        echo "   the workspace's venv, whose python prints it)"
      else
        echo "  (the full --help needs Python >= 3.11; scripts/setup.sh makes the workspace's venv)"
      fi
      exit 0
      ;;
  esac
done
# Bad options are refused before anything is created or installed: the verb parses them first
# (its command line is standard library); setup.sh parses its own.
options_ok() {
  local verb
  verb=$(basename "$0" .sh)
  { [ "$verb" = setup ] || ! $verb_script; } && return 0
  VSERIES_ARGS_ONLY=1 VSERIES_PROG=$0 PYTHONDONTWRITEBYTECODE=1 "$1" -m vseries "$verb" "${@:2}"
}
if [ -z "${VIRTUAL_ENV:-}" ]; then
  if [ ! -x "$venv/bin/python" ]; then
    py=${PYTHON:-python3}
    if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      echo "error: Python >= 3.11 is needed (tomllib); set PYTHON=/path/to/python3.11" >&2
      exit 2
    fi
    options_ok "$py" "$@" || exit
    echo "setup: creating $venv with $("$py" --version)"
    "$py" -m venv "$venv"
  fi
  # shellcheck disable=SC1091
  . "$venv/bin/activate"
  # a venv copied or moved with its workspace still activates the one it was made in: its
  # python and editable vseries would then act on that other workspace
  if [ ! "$VIRTUAL_ENV" -ef "$venv" ]; then
    echo "error: $venv belongs to $VIRTUAL_ENV (copied or moved here with the workspace?);" \
      "its python and vseries are not this workspace's, so nothing was run" >&2
    echo "  next: rm -rf $venv && scripts/setup.sh   # a venv of this workspace's own" >&2
    exit 2
  fi
fi
# the verbs act on the workspace of the script that runs them, whichever venv is active
export VSERIES_ROOT=$PWD
stamp="$VIRTUAL_ENV/.vseries-requirements"
# shellcheck source=scripts/_venv_wanted.sh
. scripts/_venv_wanted.sh
if ! wanted | cmp -s - "$stamp" 2>/dev/null; then
  options_ok python "$@" || exit
  echo "setup: installing the workspace requirements into $VIRTUAL_ENV"
  # strict: link only the packages (vseries, benchmarks), not the root (whose vllm/ would
  # shadow vLLM)
  if ! { python -m pip install -q --upgrade pip &&
    python -m pip install -q -r requirements/workspace.txt &&
    python -m pip install -q --no-build-isolation --no-deps -e . \
      --config-settings editable_mode=strict; }; then
    echo "error: installing the workspace requirements into $VIRTUAL_ENV failed (pip says" \
      "why above); nothing else was run, and the next run installs them again" >&2
    echo "  next: PIP_INDEX_URL=<a reachable package index> $0   # pip needs PyPI or a mirror" >&2
    exit 1
  fi
  wanted > "$stamp"
fi
