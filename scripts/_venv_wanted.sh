# shellcheck shell=bash
# Sourced by _venv.sh (and by a workspace test that must match its stamp): what the venv's
# install depends on, printed: the requirements, and the package's module list (a strict
# editable install links each module file, so a module added by a pull needs a reinstall).
wanted() {
  cat requirements/workspace.txt pyproject.toml
  find vseries benchmarks -name '*.py' -not -path 'benchmarks/results/*' | LC_ALL=C sort
}
