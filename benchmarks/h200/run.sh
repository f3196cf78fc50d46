#!/usr/bin/env bash
# Host side of an H200 session (after the staged parts are in /root/stage). Phases:
#   tests  assemble the trees; vLLM's kernel tests base vs patched (tests/upstream.toml);
#          the contract tests on the GPU, base and patched
#   bench  every benchmarks/bench_*.py on base and patched (same call, same GPU); with
#          TUNED=DIR the patched tree reads fused-MoE configs from DIR first
#          (VLLM_TUNED_CONFIG_FOLDER), e.g. the files the tune phase wrote
#   tune   benchmarks/tune_swap_ab.py on the patched tree; configs to /root/tuned (kept on the
#          host while it stays warm) and $OUT
#   fi     link the reduced FlashInfer FP8 MoE module from the staged part pf
#          (benchmarks/h200/flashinfer_fp8_link.sh) and check that FlashInfer loads it
#   e2e    end-to-end serving, trees compared (benchmarks/e2e/host.sh: MODEL, TREES, QUICK,
#          PROCESSES, BUDGET, RESUME, ...; see benchmarks/e2e/README.md)
# Results go to $OUT (at most 8 files come back): a log per phase and one tarball.
set -uo pipefail
phase=${1:?usage: run.sh tests|bench|tune|fi|e2e}
OUT=${OUT:-/tmp/out}
R=$OUT/r && mkdir -p "$R"
# shellcheck source=benchmarks/h200/lib.sh
. benchmarks/h200/lib.sh
exec > >(tee "$OUT/log-$phase.txt") 2>&1
gpu_line
case $phase in
  tests)
    [ -d "$(tree_dir patched)" ] || bash /root/stage/p1/assemble.sh
    # UPSTREAM_JOBS: pytest-xdist workers per run (the host has pytest-xdist; Triton's compiles
    # are the bottleneck, one core each); UPSTREAM_ONLY: selections whose patch/path has it
    only=() && for o in ${UPSTREAM_ONLY:-}; do only+=(--only "$o"); done
    timeout "${UPSTREAM_TIMEOUT:-420}" python3 -m vseries.upstream --base "$(tree_dir base)" --patched "$(tree_dir patched)" \
      --pythonpath "$SITE" --out "$R/upstream.md" --work "$R/junit" --jobs "${UPSTREAM_JOBS:-1}" "${only[@]}"
    # CPU contracts run in CI; here only what needs the GPU (CONTRACT_K selects it; CONTRACTS=0
    # skips them)
    [ "${CONTRACTS:-1}" = 0 ] || for t in base patched; do
      echo "=== contract tests, $t"
      PYTHONPATH=$(tree_path "$t") timeout 150 python3 -P -m pytest -q -p no:cacheprovider -m contract \
        tests/contract -k "${CONTRACT_K:-cuda or gpu}" -rA 2>&1 | tail -40 | tee "$R/contract-$t.txt"
    done
    ;;
  bench)
    [ -d "$(tree_dir patched)" ] || bash /root/stage/p1/assemble.sh
    for b in ${BENCHES:-benchmarks/bench_*.py}; do
      name=$(basename "$b" .py)
      # a benchmark that compares backends inside one tree says so: "# h200-trees: patched"
      trees=$(sed -n 's/^# h200-trees: //p' "$b"); trees=${trees:-base patched}
      for t in $trees; do
        echo "=== $name $t"
        extra=() && grep -q -- '"--dump"' "$b" && extra=(--dump "$R/$name-$t.pt")
        tuned=() && [ -n "${TUNED:-}" ] && [ "$t" = patched ] && tuned=(env "VLLM_TUNED_CONFIG_FOLDER=$TUNED")
        (cd "$(tree_dir "$t")" && PYTHONPATH=$(tree_path "$t") "${tuned[@]}" timeout "${BENCH_TIMEOUT:-200}" \
          python3 -m "benchmarks.$name" --variant "$t" --out "$R/$name-$t.json" "${extra[@]}") \
          || echo "!!! $name $t failed"
      done
    done
    ;;
  tune)
    [ -d "$(tree_dir patched)" ] || bash /root/stage/p1/assemble.sh
    read -ra targs <<<"${TUNE_ARGS:-}"
    (cd "$(tree_dir patched)" && PYTHONPATH=$(tree_path patched) timeout "${TUNE_TIMEOUT:-420}" \
      python3 -m benchmarks.tune_swap_ab --out "$R/tune_swap_ab.json" --configs-out "$R/tuned" \
      "${targs[@]}") || echo "!!! tune failed"
    mkdir -p /root/tuned && cp -r "$R/tuned/." /root/tuned/ || true
    ;;
  fi)
    [ -d "$(tree_dir patched)" ] || bash /root/stage/p1/assemble.sh
    bash benchmarks/h200/flashinfer_fp8_link.sh /root/stage/pf "$SITE"
    # smoke test in its own process: a tactic whose kernels the reduced build left out would
    # end the process (lazy symbol binding), not just raise
    (cd "$(tree_dir patched)" && PYTHONPATH=$(tree_path patched) timeout 240 python3 \
      -m benchmarks.bench_fp8_oracle --variants flashinfer_cutlass --shapes qwen3-30b-a3b \
      --batches 1 64 --variant patched --out "$R/fi-smoke.json") || echo "!!! FlashInfer smoke test failed"
    ;;
  e2e)
    bash benchmarks/e2e/host.sh "$R/e2e"
    ;;
esac
tar czf "$OUT/$phase.tar.gz" -C "$R" .
