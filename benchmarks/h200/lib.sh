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
# tree_with_so NEW SO [PATCH]: tree NEW, a copy of the base whose ops.scaled_fp8_quant takes its
# dynamic per-tensor quantization from the library SO (torch.ops._vseries_fp8, built from a
# change to common.cu by stage_quant_cuda.sh), with PATCH's changes to tests/ applied (its
# csrc/ part is the library), made once
tree_with_so() {
  local d
  d=$(tree_dir "$1")
  [ -d "$d" ] && return 0
  [ -f "$2" ] || { echo "!!! $1: no $2 (part pq: benchmarks/h200/stage_quant_cuda.sh)"; return 1; }
  tree_with_tests "$1" "${3:-}" || return 1
  python3 - "$d/vllm/_custom_ops.py" "$2" <<'PY' || { echo "!!! $1: not made"; rm -rf "$d"; return 1; }
import os
import sys
path, so = sys.argv[1:]
text = open(path).read()
call = "torch.ops._C.dynamic_scaled_fp8_quant(output, input, scale)"
assert text.count(call) == 1, "the dynamic per-tensor call is not where v0.34.0 has it"
text = text.replace(call, call.replace("_C.", "_vseries_fp8."))
text += f"\n\ntorch.ops.load_library({so!r})  # moved.sh tree_with_so\n"
os.remove(path)  # cp -a keeps links: never write through one into the base
open(path, "w").write(text)
PY
}
# tree_with_tests NEW [PATCH]: tree NEW, a copy of the base with PATCH's changes to tests/ only
# (its tests on v0.34.0), made once
tree_with_tests() {
  local d
  d=$(tree_dir "$1")
  [ -d "$d" ] && return 0
  cp -a "$(tree_dir base)" "$d"
  [ -n "${2:-}" ] || return 0
  with_tests "$d" "$2" || { echo "!!! $1: the tests of $2 did not apply"; rm -rf "$d"; return 1; }
}
# with_tests DIR PATCH: PATCH's changes to tests/ applied in the tree at DIR (the staged trees
# hold no csrc/), each file a copy of its own first (cp -a keeps links: the base's stays as it
# was)
with_tests() {
  local f
  while read -r f; do
    if [ -e "$1/$f" ]; then cp "$1/$f" "$1/$f.own" && mv "$1/$f.own" "$1/$f"; fi
  done < <(sed -n 's|^diff --git a/\(tests/[^ ]*\) b/.*|\1|p' "$2")
  awk '/^diff --git /{keep = ($3 ~ /^a\/tests\//)} keep' "$2" | (cd "$1" && patch -p1 -s)
}
# run_in TREE LIMIT CMD...: inside the tree (vLLM's own tests, the benchmarks);
# run_ws TREE LIMIT CMD...: from the workspace root (the contract tests)
run_in() { run_at "$(tree_dir "$1")" "$@"; }
run_ws() { run_at "$ws" "$@"; }
