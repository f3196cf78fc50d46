#!/usr/bin/env bash
# CPU side of an H200 session: pack the series tree (vllm/) and the base (.vseries/base, the
# plain pin) with the pinned release kernels and the host's extra wheels into parts of at
# most 56 MiB under .gpu/stage (ignored). The wheels: .gpu/wheels-<tag> (WHEELS= to choose),
# downloaded once with --download from benchmarks/h200/host-wheels-<tag>.txt (for a pin whose
# torch the host lacks, that list carries torch, Triton and NCCL). Send each part with its own
# device run, then benchmarks/h200/run.sh or kernels.sh on the host (after assemble.sh).
# Options after --download are passed to stage.py (--attention, --sources-only, ...).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/_venv.sh
tag=$(python -c 'from vseries import pin; print(pin.load().tag)')
wheels=${WHEELS:-.gpu/wheels-$tag}
if [ "${1:-}" = --download ]; then
  shift
  list=benchmarks/h200/host-wheels-$tag.txt
  [ -f "$list" ] || { echo "stage.sh: no $list for the pin $tag" >&2; exit 2; }
  plats=()
  for n in 28 27 24 18 17; do plats+=(--platform "manylinux_2_${n}_x86_64"); done
  python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${plats[@]}" --platform manylinux2014_x86_64 --platform any -d "$wheels" -r "$list"
fi
base=$(python -c 'from vseries import worktree; from vseries.workspace import Workspace; print(worktree.base_tree(Workspace.current()))')
wheel=$(python -c 'from vseries import fetch, pin; p = pin.load(); print(fetch.fetch(p.package, p.wheel))')
args=(--src series=vllm --src "base=$base" --wheel "$wheel" --out .gpu/stage)
[ -d "$wheels" ] && args+=(--wheels "$wheels")
python benchmarks/h200/stage.py "${args[@]}" "$@"
