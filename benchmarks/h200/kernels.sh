#!/usr/bin/env bash
# Host side of an H200 session, MoE kernel phase (after the staged parts are in /root/stage):
#   1. benchmarks/bench_moe_decode.py on both trees (whole FP8 MoE layer, graph replay,
#      routings cycled, % of the read roofline; the series tree also with the decode path off)
#   2. vLLM's tests of patches 4 and 5 on the series tree (their GPU parts)
#   3. the GPU parts of the contracts of patches 4 and 5, series then base
#   4. benchmarks/moe_compile_audit.py on both trees (compiles after start-up over a sweep)
#   with ANATOMY=1, first: benchmarks/moe_decode_anatomy.py on the series tree (fixed cost
#   and streaming rate of each decode kernel; ANATOMY_TIMEOUT seconds, default 120)
#   VLLM_TESTS=0 skips step 2 (e.g. when the upstream tier of run.sh tests ran them in the
#   same session), GPU_CONTRACTS=0 step 3
# Trees: KTREES (default "base series"; the first is the reference, the second carries the
# series; one name runs that tree alone). Each step has its own timeout; the whole phase ends
# within KERNELS_BUDGET seconds (default 560, under the host's 10-minute limit a call).
# Results and logs in $OUT (one tarball).
set -uo pipefail
OUT=${OUT:-/tmp/out}
R=$OUT/r && mkdir -p "$R"
# shellcheck source=benchmarks/h200/lib.sh
. benchmarks/h200/lib.sh
deadline=$((SECONDS + ${KERNELS_BUDGET:-560}))
KTREES=${KTREES:-base series}
exec > >(tee "$OUT/log-kernels.txt") 2>&1
[ -d "$(tree_dir "${KTREES##* }")" ] || bash /root/stage/p1/assemble.sh
gpu_line
read -r ref tip <<<"$KTREES"
# one tree (KTREES="series"): it is both; each step runs it once
tip=${tip:-$ref}
trees=("$ref") && [ "$tip" != "$ref" ] && trees+=("$tip")
read -ra bench_args <<<"${BENCH_ARGS:-}"
if [ "${ANATOMY:-0}" = 1 ]; then
  run_in "$tip" "${ANATOMY_TIMEOUT:-120}" python3 -m benchmarks.moe_decode_anatomy \
    --variant "$tip" --out "$R/moe_decode_anatomy-$tip.json"
fi
for t in "${trees[@]}"; do
  run_in "$t" "${BENCH_TIMEOUT:-170}" python3 -m benchmarks.bench_moe_decode \
    --variant "$t" --out "$R/bench_moe_decode-$t.json" "${bench_args[@]}"
done
[ "${VLLM_TESTS:-1}" = 0 ] || run_in "$tip" 150 python3 -m pytest -q -p no:cacheprovider \
  tests/kernels/moe/test_fused_moe_fp8_decode.py tests/kernels/moe/test_fused_moe_warmup.py \
  --junitxml "$R/vllm-tests-$tip.xml"
[ "${GPU_CONTRACTS:-1}" = 0 ] || for ((i = ${#trees[@]} - 1; i >= 0; i--)); do
  t=${trees[i]}
  run_ws "$t" 60 python3 -P -m pytest -q -p no:cacheprovider -m contract -rA \
    tests/contract/test_moe_decode.py tests/contract/test_moe_warmup.py -k cuda \
    --junitxml "$R/contract-gpu-$t.xml"
done
for ((i = ${#trees[@]} - 1; i >= 0; i--)); do
  t=${trees[i]}
  run_in "$t" 60 python3 -m benchmarks.moe_compile_audit --variant "$t" \
    --out "$R/moe_compile_audit-$t.json"
done
tar czf "$OUT/kernels.tar.gz" -C "$R" .
echo "kernels phase done in ${SECONDS}s"
