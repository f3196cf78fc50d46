#!/usr/bin/env bash
# Host side of an H200 session (after the staged parts are in /root/stage). Phases:
#   tests  assemble the trees; vLLM's kernel tests base vs patched (tests/upstream.toml);
#          the contract tests on the GPU, base and patched
#   bench  every benchmarks/bench_*.py on base and patched (same call, same GPU)
# Results go to $OUT (at most 8 files come back): a log per phase and one tarball.
set -uo pipefail
phase=${1:?usage: run.sh tests|bench}
OUT=${OUT:-/tmp/out}
R=$OUT/r && mkdir -p "$R"
SITE=/root/site
exec > >(tee "$OUT/log-$phase.txt") 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv
tree() { echo "/root/vllm-$1"; }
pp() { echo "$SITE:$(tree "$1")"; }
case $phase in
  tests)
    [ -d /root/vllm-patched ] || bash /root/stage/p1/assemble.sh
    timeout "${UPSTREAM_TIMEOUT:-420}" python3 -m vseries.upstream --base "$(tree base)" --patched "$(tree patched)" \
      --pythonpath "$SITE" --out "$R/upstream.md" --work "$R/junit"
    # CPU contracts run in CI; here only what needs the GPU (CONTRACT_K selects it)
    for t in base patched; do
      echo "=== contract tests, $t"
      PYTHONPATH=$(pp "$t"):$PWD timeout 150 python3 -P -m pytest -q -p no:cacheprovider -m contract \
        tests/contract -k "${CONTRACT_K:-cuda or gpu}" -rA 2>&1 | tail -40 | tee "$R/contract-$t.txt"
    done
    ;;
  bench)
    [ -d /root/vllm-patched ] || bash /root/stage/p1/assemble.sh
    for b in ${BENCHES:-benchmarks/bench_*.py}; do
      name=$(basename "$b" .py)
      # a benchmark that compares backends inside one tree says so: "# h200-trees: patched"
      trees=$(sed -n 's/^# h200-trees: //p' "$b"); trees=${trees:-base patched}
      for t in $trees; do
        echo "=== $name $t"
        extra=() && grep -q -- '"--dump"' "$b" && extra=(--dump "$R/$name-$t.pt")
        (cd "$(tree "$t")" && PYTHONPATH=$(pp "$t") timeout "${BENCH_TIMEOUT:-200}" \
          python3 "$OLDPWD/$b" --variant "$t" --out "$R/$name-$t.json" "${extra[@]}") \
          || echo "!!! $name $t failed"
      done
    done
    ;;
esac
tar czf "$OUT/$phase.tar.gz" -C "$R" .
