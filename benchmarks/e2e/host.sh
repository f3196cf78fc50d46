#!/usr/bin/env bash
# Host side of the end-to-end runs (issue 11), called by `benchmarks/h200/run.sh e2e` with its
# result folder; see benchmarks/e2e/README.md. Settings (environment, all optional):
#   MODEL      a record of benchmarks/shapes.py: qwen3-30b-a3b | mixtral-8x7b | deepseek-v4
#                                                                  (qwen3-30b-a3b)
#   FLAVOUR    one of the record's flavours                        (the record's first)
#   LAYERS     decoder layers                                      (the record's default)
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
# What the model needs of the host, and which MoE backend each tree must log, is
# benchmarks/e2e/host.py's to say (from the model's record).
set -uo pipefail
R=${1:?usage: host.sh RESULT_DIR}
t0=$SECONDS
# shellcheck source=benchmarks/h200/lib.sh
. benchmarks/h200/lib.sh
STAGE_DIR=${STAGE_DIR:-/root/stage}
E2E=${E2E_DIR:-/root/e2e}
PY=${PYTHON:-python3}
MODEL=${MODEL:-qwen3-30b-a3b}
read -ra trees <<<"${TREES:-base series}"
mkdir -p "$R" "$E2E"

[ -d "$(tree_dir "${trees[0]}")" ] || bash "$STAGE_DIR/p1/assemble.sh"

# FlashInfer's reduced FP8 MoE module (the base tree's FLASHINFER_CUTLASS), once per host
fi_so=$SITE/flashinfer/data/aot/fused_moe_90/fused_moe_90.so
if [ ! -f "$fi_so" ] && [ -d "$STAGE_DIR/pf" ]; then
  bash benchmarks/h200/flashinfer_fp8_link.sh "$STAGE_DIR/pf" "$SITE" || echo "!!! FlashInfer link failed"
fi

host=$("$PY" -m benchmarks.e2e.host --model "$MODEL" --flavour "${FLAVOUR:-}" --tree-root "$TREE_ROOT" \
  --site "$SITE" --python "$PY" --fi-so "$fi_so" "${trees[@]}") || {
  echo "$host"
  exit 1
}
mapfile -t backends <<<"$host"
FLAVOUR=${backends[0]}

layers=() && [ -n "${LAYERS:-}" ] && layers=(--layers "$LAYERS")
"$PY" -m benchmarks.e2e.models --out "$E2E/models" --arch "$MODEL" --flavour "$FLAVOUR" "${layers[@]}" \
  >"$R/models.txt" 2>"$R/models-err.txt" || { echo "!!! models.py failed: $(tail -1 "$R/models-err.txt")"; exit 1; }
model_dir=$(tail -1 "$R/models.txt")

args=(--model "$model_dir" --trees "${trees[@]}" --tree-root "$TREE_ROOT" --site "$SITE"
  --python "$PY" --out "$R" --work "$E2E/work" --cache-root "$E2E/vllm-cache"
  --results "$E2E/results.jsonl" --processes "${PROCESSES:-2}" --tensor-parallel-size "${TP:-1}"
  "${backends[@]:1}")
[ "${QUICK:-1}" = 1 ] && args+=(--quick)
[ -n "${CELLS:-}" ] && args+=(--cells "$CELLS")
[ -n "${REPS:-}" ] && args+=(--reps "$REPS")
[ -n "${TARGET_S:-}" ] && args+=(--target-s "$TARGET_S")
[ "${OFFLINE:-0}" = 1 ] && args+=(--offline-throughput)
for f in ${RESUME:-}; do args+=(--resume "$f"); done
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
