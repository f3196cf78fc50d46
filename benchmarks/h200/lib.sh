# shellcheck shell=bash
# Sourced by the H200 host scripts (run.sh, moved.sh, kernels.sh) from the workspace root:
# where a staged tree is, how a step runs in it, the GPU line a log starts with.
# Reads SITE (/root/site), TREE_ROOT (/root) and, for run_at, `deadline` (in $SECONDS).
SITE=${SITE:-/root/site}
TREE_ROOT=${TREE_ROOT:-/root}
ws=$PWD
# tree_dir NAME: the staged tree NAME (assemble.sh unpacks stage.py's src-NAME part there);
# benchmarks/e2e/names.py host_dir is the same rule for the Python side (a test holds them
# together)
tree_dir() { echo "$TREE_ROOT/vllm-$1"; }
# tree_path NAME: PYTHONPATH of a step in tree NAME: the staged wheels, the tree, then the
# workspace (last: its own vllm/ folder must not shadow the tree's package; the workspace
# gives vseries and benchmarks, which the staged trees, holding only vllm/ and tests/, lack)
tree_path() { echo "$SITE:$SITE/nvidia_cutlass_dsl/dsl_packages:$(tree_dir "$1"):$ws"; }
gpu_line() { nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv; }
left() {
  local d=${deadline:?set deadline (in $SECONDS) before run_at}
  echo $((d - SECONDS))
}
# bounded LIMIT: LIMIT seconds, or what is left before the deadline if that is less
bounded() {
  local t
  t=$(left)
  echo $(($1 < t ? $1 : t))
}
# run_at DIR TREE LIMIT CMD...: CMD in DIR with the tree's PYTHONPATH, at most LIMIT seconds
# and never past the deadline
run_at() {
  local dir=$1 tree=$2 limit
  limit=$(bounded "$3")
  shift 3
  if [ "$limit" -le 5 ]; then
    echo "!!! skipped (budget): $*"
    return 1
  fi
  if [ ! -d "$(tree_dir "$tree")" ]; then
    echo "!!! no tree '$tree' ($(tree_dir "$tree")): $*"
    return 1
  fi
  echo "=== [$tree, ${limit}s, at ${SECONDS}s] $*"
  (cd "$dir" && PYTHONPATH="$(tree_path "$tree")" timeout "$limit" "$@") ||
    echo "!!! failed or timed out ($tree): $*"
}
# tree_with_patch FROM NEW: tree NEW, a copy of tree FROM with the patch on stdin applied
# (patch -p1), made once (a later call keeps it and reads nothing)
tree_with_patch() {
  local d
  d=$(tree_dir "$2")
  [ -d "$d" ] && return 0
  cp -a "$(tree_dir "$1")" "$d"
  (cd "$d" && patch -p1 -s) || echo "!!! $2 did not apply"
}
# run_in TREE LIMIT CMD...: inside the tree (vLLM's own tests, the benchmarks);
# run_ws TREE LIMIT CMD...: from the workspace root (the contract tests)
run_in() { run_at "$(tree_dir "$1")" "$@"; }
run_ws() { run_at "$ws" "$@"; }
