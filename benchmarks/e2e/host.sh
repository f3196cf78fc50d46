#!/usr/bin/env bash
# Host side of the end-to-end runs (issue 11), called by `benchmarks/h200/run.sh e2e` with its
# result folder; see benchmarks/e2e/README.md. Settings (environment, all optional):
#   MODEL      qwen3-30b-a3b | mixtral-8x7b | deepseek-v4          (qwen3-30b-a3b)
#   FLAVOUR    fp8static | fp8dyn; deepseek-v4: fp8block only      (fp8static; deepseek-v4: fp8block)
#   LAYERS     decoder layers                                      (full depth; deepseek-v4: 4)
#   TREES      staged trees /root/vllm-NAME, the first is the reference   ("base series")
#   PROCESSES  server processes per tree                           (2)
#   QUICK      1: the quick preset, 0: the full one                (1)
#   CELLS REPS TARGET_S   override the preset (serve.py --cells/--reps/--target-s)
#   LIMIT      seconds the device call allows this script          (570)
#   BUDGET     seconds for serve.py                  (LIMIT - time used so far - 45)
#   RESUME     earlier results files (space-separated paths, e.g. carried in the working tree)
#   OFFLINE    1: vllm bench throughput (one process per run) instead of serving
#   TP         tensor-parallel size                                (1)
#   EXTRA      more serve.py arguments (word-split), e.g. --dry-run
#   TREE_ROOT STAGE_DIR E2E_DIR SITE PYTHON   /root, /root/stage, /root/e2e, /root/site, python3
# The results of every call on a warm host accumulate in $E2E_DIR/results.jsonl (also used
# to resume); the folder that comes back gets that file, log tails, compile logs and e2e.md.
set -uo pipefail
R=${1:?usage: host.sh RESULT_DIR}
t0=$SECONDS
TREE_ROOT=${TREE_ROOT:-/root}
STAGE_DIR=${STAGE_DIR:-/root/stage}
E2E=${E2E_DIR:-/root/e2e}
SITE=${SITE:-/root/site}
PY=${PYTHON:-python3}
MODEL=${MODEL:-qwen3-30b-a3b}
if [ "$MODEL" = deepseek-v4 ]; then FLAVOUR=${FLAVOUR:-fp8block}; else FLAVOUR=${FLAVOUR:-fp8static}; fi
read -ra trees <<<"${TREES:-base series}"
mkdir -p "$R" "$E2E"

[ -d "$TREE_ROOT/vllm-${trees[0]}" ] || bash "$STAGE_DIR/p1/assemble.sh"
for t in "${trees[@]}"; do
  [ -d "$TREE_ROOT/vllm-$t" ] || { echo "!!! $TREE_ROOT/vllm-$t is not staged (stage.py --src $t=...)"; exit 1; }
done

# DeepSeek-V4 imports tilelang in every decoder layer (vllm mhc.py raises without it), needs
# DeepGEMM (indexer, wo_a einsum) and FlashMLA (its only attention backend): check the staged
# site and trees before a server spends minutes failing.
if [ "$MODEL" = deepseek-v4 ]; then
  miss=()
  [ -d "$SITE/tilelang" ] || miss+=("tilelang in $SITE")
  [ -d "$SITE/z3" ] || miss+=("z3-solver in $SITE (tilelang's libtvm loads libz3)")
  PYTHONPATH=$SITE "$PY" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("ml_dtypes") is None)' \
    || miss+=("ml-dtypes (neither in $SITE nor in $PY's own packages)")
  compgen -G "$SITE/apache_tvm_ffi-0.1.9.dist-info" >/dev/null \
    || miss+=("apache-tvm-ffi 0.1.9 in $SITE (tilelang 0.1.9 fails to import with other versions)")
  for t in "${trees[@]}"; do
    compgen -G "$TREE_ROOT/vllm-$t/vllm/third_party/deep_gemm/_C*.so" >/dev/null \
      || miss+=("DeepGEMM in $TREE_ROOT/vllm-$t (vllm/third_party/deep_gemm/_C*.so)")
    [ -f "$TREE_ROOT/vllm-$t/vllm/_flashmla_C.abi3.so" ] \
      || miss+=("FlashMLA in $TREE_ROOT/vllm-$t (vllm/_flashmla_C.abi3.so)")
  done
  if [ ${#miss[@]} -gt 0 ]; then
    echo "!!! MODEL=deepseek-v4 needs what is not staged:"
    printf '!!!   %s\n' "${miss[@]}"
    echo "!!! stage with stage.py --attention --deepgemm (the line of"
    echo "!!! 'benchmarks/e2e/trees.py ${trees[*]} --print-stage --deepgemm'), with .gpu/wheels also"
    echo "!!! holding benchmarks/h200/host-wheels-dsv4.txt (tilelang==0.1.9, z3-solver==4.15.4.0,"
    echo "!!! ml-dtypes, apache-tvm-ffi==0.1.9); see benchmarks/e2e/README.md"
    exit 1
  fi
fi

# FlashInfer's reduced FP8 MoE module (the base tree's FLASHINFER_CUTLASS), once per host
fi_so=$SITE/flashinfer/data/aot/fused_moe_90/fused_moe_90.so
if [ ! -f "$fi_so" ] && [ -d "$STAGE_DIR/pf" ]; then
  bash benchmarks/h200/flashinfer_fp8_link.sh "$STAGE_DIR/pf" "$SITE" || echo "!!! FlashInfer link failed"
fi

# Trees without patch 2 pick FLASHINFER_CUTLASS for static per-tensor FP8 on SM90, trees
# with it TRITON; dynamic per-tensor FP8 is TRITON on both.
npatches() {
  "$PY" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["patches"]))' \
    "$TREE_ROOT/vllm-$1/vllm/VSERIES_TREE.json" 2>/dev/null \
    || case $1 in base) echo 0 ;; p1) echo 1 ;; *) echo 9 ;; esac
}
expect=() tenv=() note=()
for t in "${trees[@]}"; do
  if [ "$FLAVOUR" = fp8static ] && [ "$(npatches "$t")" -lt 2 ]; then
    if [ -f "$fi_so" ]; then
      expect+=(--expect-backend "$t=FLASHINFER_CUTLASS")
    else
      # without the module FlashInfer would JIT-build for longer than a call: a stand-in
      tenv+=(--tree-env "$t:VLLM_USE_FLASHINFER_MOE_FP8=0")
      expect+=(--expect-backend "$t=TRITON")
      note+=("tree $t: no FlashInfer FP8 MoE build on the host, so TRITON (VLLM_USE_FLASHINFER_MOE_FP8=0) stands in for FLASHINFER_CUTLASS")
    fi
  else
    expect+=(--expect-backend "$t=TRITON")
  fi
done

layers=() && [ -n "${LAYERS:-}" ] && layers=(--layers "$LAYERS")
"$PY" -m benchmarks.e2e.models --out "$E2E/models" --arch "$MODEL" --flavour "$FLAVOUR" "${layers[@]}" \
  >"$R/models.txt" 2>"$R/models-err.txt" || { echo "!!! models.py failed: $(tail -1 "$R/models-err.txt")"; exit 1; }
model_dir=$(tail -1 "$R/models.txt")

args=(--model "$model_dir" --trees "${trees[@]}" --tree-root "$TREE_ROOT" --site "$SITE"
  --python "$PY" --out "$R" --work "$E2E/work" --cache-root "$E2E/vllm-cache"
  --results "$E2E/results.jsonl" --processes "${PROCESSES:-2}" --tensor-parallel-size "${TP:-1}"
  "${expect[@]}" "${tenv[@]}")
[ "${QUICK:-1}" = 1 ] && args+=(--quick)
[ -n "${CELLS:-}" ] && args+=(--cells "$CELLS")
[ -n "${REPS:-}" ] && args+=(--reps "$REPS")
[ -n "${TARGET_S:-}" ] && args+=(--target-s "$TARGET_S")
[ "${OFFLINE:-0}" = 1 ] && args+=(--offline-throughput)
for f in ${RESUME:-}; do args+=(--resume "$f"); done
[ ${#note[@]} -gt 0 ] && args+=(--note "$(IFS=';' && echo "${note[*]}")")
read -ra extra <<<"${EXTRA:-}"
budget=${BUDGET:-$((${LIMIT:-570} - (SECONDS - t0) - 45))}
echo "=== e2e: $MODEL $FLAVOUR ${LAYERS:-default depth}, trees ${trees[*]}, budget ${budget} s"
timeout $((budget + 30)) "$PY" -m benchmarks.e2e.serve "${args[@]}" --budget-s "$budget" "${extra[@]}" \
  || echo "!!! serve.py exited $?"
cp "$E2E/results.jsonl" "$R/results.jsonl" 2>/dev/null || true
if [ -s "$R/results.jsonl" ]; then
  timeout 20 "$PY" -m benchmarks.e2e.report "$R/results.jsonl" --ref "${trees[0]}" --out "$R/e2e.md" \
    || echo "!!! report failed"
fi
