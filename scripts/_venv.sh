# shellcheck shell=bash
# Sourced by the scripts: use the active virtual environment, else create and activate .venv
# (VSERIES_VENV: another folder, e.g. .venv-v0.21.0 for a kept line), and install the
# workspace's own requirements when they changed since the last run.
venv=${VSERIES_VENV:-.venv}
if [ -z "${VIRTUAL_ENV:-}" ]; then
  if [ ! -x "$venv/bin/python" ]; then
    py=${PYTHON:-python3}
    if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      echo "error: Python >= 3.11 is needed (tomllib); set PYTHON=/path/to/python3.11" >&2
      exit 2
    fi
    echo "setup: creating $venv with $("$py" --version)"
    "$py" -m venv "$venv"
  fi
  # shellcheck disable=SC1091
  . "$venv/bin/activate"
fi
stamp="$VIRTUAL_ENV/.vseries-requirements"
# shellcheck source=scripts/_venv_wanted.sh
. scripts/_venv_wanted.sh
if ! wanted | cmp -s - "$stamp" 2>/dev/null; then
  echo "setup: installing the workspace requirements into $VIRTUAL_ENV"
  python -m pip install -q --upgrade pip
  python -m pip install -q -r requirements/workspace.txt
  # strict: link only the vseries package, not the root (whose vllm/ would shadow vLLM)
  python -m pip install -q --no-build-isolation --no-deps -e . \
    --config-settings editable_mode=strict
  wanted > "$stamp"
fi
