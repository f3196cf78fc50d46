#!/usr/bin/env bash
# Host side of a GPU run on the main line (v0.34.0 with torch 2.14.0 / Triton 3.8.0 / NCCL
# 2.30.7: the host's own, or staged wheels installed into /root/site ahead of the host's
# torch), on trees made by assemble.sh (from the parts in /root/stage) or linked by hand
# (CONTRIBUTING.md "Run the GPU tiers"). Phases (PHASES, default "check tests"):
#   check  assemble (once), then what runs: torch, Triton, NCCL, the release kernels loading,
#          the GPU; the tree heads
#   tests  the series' own vLLM tests on the series tree (GPU parts included), the GPU parts
#          of the contracts on base and series
#   bench  benchmarks/bench_moe_layer.py (the FP8 MoE layer as the oracle builds it),
#          trees alternating base, series, base, series ... (ROUNDS, default 2)
#   vllm   vLLM's tests of the touched areas, base vs series (tests/upstream.toml, sharded)
#   branches each PR branch alone (trees prNNNN, staged by stage_branches.sh): the pytest
#          commands of its patch's Test Plan on the branch, then on v0.34.0 with the
#          branch's test files (where a fix's tests must fail); BRANCHES="0004 0003" picks
#          and orders them
#   warmup the warm-up's GPU test alone; epnan the expert-parallel NaN test and ep_nan.py on
#          both trees; wheel the patched release wheel's GPU checks (parts w1..wN)
#   fi     FlashInfer's SM90 CUTLASS fused-MoE module (FP8 only, built on a CPU machine by
#          flashinfer_fp8_prepare.sh, staged as part pf) linked into /root/site; vLLM's own
#          test of its per-tensor FP8 FLASHINFER_CUTLASS path on the base tree
#   layer  benchmarks/bench_moe_layer.py, M = 1..16 and 64: base (TRITON and, with
#          FlashInfer, FLASHINFER_CUTLASS autotuned), series (default: its decode backend,
#          general: its TRITON, decode16);
#          trees alternating base, series (ROUNDS, default 1); BENCH_ARGS replaces the
#          shapes, e.g. "--shapes dsv3-tp8 --decode16-split-by-batch" adds split-K sized from
#          the batch (benchmarks/decode_split.py)
#   epcost benchmarks/ep_nan.py --time-only on base, base+0002, base+0004, series (EP_TREES;
#          EP_PATCHES: series patches by number, candidate patch files by path; a candidate
#          also runs 0004's tests and ep_nan.py's numerics; EP_ROUNDS: the trees in turns)
#   served benchmarks/served: waves of engine processes (served.sh), every process a record;
#          WAVES names the waves to run (default "1 2 3 4 5"; 6 to 16: 48 layers, a pair
#          each; 17, 18: three each, for an H200; 19 to 21: DeepSeek-V3 TP8's MoE in a
#          one-rank stand-in, a pair each; 22, 23: 48-layer dynamic pairs; 24: one more, traced,
#          its trace files kept; 25, 26: the quant phase's candidate against v0.34.0,
#          48-layer dynamic triples, TRITON on both sides (35-38 the same as pairs, for an
#          H100); 27, 28: 0003 against TRITON untuned
#          and tuned (the tune phase's tree), static triples); the series'
#          processes ask for its decode backend (--moe-backend triton_fp8_decode) but sa*
#          (its auto)
#   sweep  benchmarks/decode_sweep.py: the decode kernels' split-K and stages swept at one
#          token (SWEEP_ARGS: other shapes, batches, --grid with tiles, K steps or warps), the
#          fastest beside 0003's own configuration
#   cand   a candidate patch on the series (CAND: its file, e.g. patches/candidates/0003-pdl.patch;
#          tree c<its name>): the decode tests there, then the sweep there (SWEEP_ARGS, e.g.
#          "--grid PDL=0,1 PREFETCH=0": the candidate beside its switches off, one process);
#          CAND_TESTS=0 skips the tests (a later call of the same candidate)
#   quant  a candidate change to v0.34.0 (QUANT_CAND, default
#          patches/candidates/fp8-quant-one-program.patch) on a copy of the base (tree c<its
#          name>): its test file there, benchmarks/bench_fp8_quant.py there (for
#          fp8-quant-one-block.patch, the CUDA form: the tree calls part pq's library, vLLM's
#          test_fp8_quant.py runs there (its own tests also on v0.34.0: tree c<name>-before),
#          bench_fp8_quant --one-block on the base (and --sweep across its limit), vLLM's
#          benchmarks/kernels/benchmark_quant.py
#          at 1 and 16 tokens on the base, a control (tree c<name>-control: the pin's own
#          common.cu through the same library) and the candidate), then the layer
#          (bench_moe_layer.py, TRITON, M = 1..16, both scales) on base and there in turns
#          (ROUNDS, default 2; BENCH_ARGS replaces the shapes)
#   tune   a tuned TRITON baseline (0003's review): vLLM's fused-MoE tuner
#          (benchmarks/tune_fused_moe.py; Ray from parts pt1, pt2 of stage_tune.sh) on the base for
#          TUNE_SHAPE (default qwen3-30b-a3b) at TUNE_BATCHES; tree `tuned` = the base with the
#          config file it wrote; then the layer (bench_moe_layer.py) on base, tuned and series in
#          turns (ROUNDS, default 1; a later call runs only these); waves 27, 28 serve tree tuned
#          (a triple each; 29-34 the same as pairs, for an H100, where a triple does not fit)
#   kbench 0003's layer benchmark in vLLM's benchmarks/kernels/ (the command its PR shows), on
#          its branch alone where staged (pr0003), KBENCH_RUNS times (default 3); KBENCH_MODELS
#          picks the shapes, KBENCH_TUNED=1 gives its triton arm the tune phase's config file
#   latency vLLM's own `vllm bench latency` (batch 1, 1024 output tokens) on base and series
#          (--moe-backend triton_fp8_decode); LATENCY_FLAVOUR (default fp8static) and
#          LATENCY_LAYERS (default 48): the served benchmark's row it cross-checks
# Trees: $TREE_ROOT/vllm-base (plain pin) and $TREE_ROOT/vllm-series (the series), TREE_ROOT
# /root by default (lib.sh). Each step has its own timeout and the whole call ends within
# BUDGET seconds (default 560).
# Results and logs in $OUT (one tarball, one log).
set -uo pipefail
# A misspelt phase or wave would run nothing and still cost a GPU call: refuse it first. The
# names are this file's own case labels.
phases=$(sed -n 's/^    \([a-z]*\))$/\1/p' "${BASH_SOURCE[0]}" | tr '\n' ' ')
waves=$(sed -n 's/^          \([0-9]*\)) served_wave .*/\1/p' "${BASH_SOURCE[0]}" | tr '\n' ' ')
for p in ${PHASES:-check tests}; do
  [[ " $phases" == *" $p "* ]] || { echo "moved.sh: no phase '$p' (phases: $phases)" >&2; exit 2; }
done
for w in ${WAVES:-}; do
  [[ " $waves" == *" $w "* ]] || { echo "moved.sh: no wave '$w' (waves: $waves)" >&2; exit 2; }
done
# Seconds and counts are whole numbers ("10m" once turned the budget off); a call is killed at
# 600 s, so the budget leaves 20 s for the tarball.
for v in BUDGET ROUNDS BENCH_TIMEOUT LATENCY_TIMEOUT UPSTREAM_JOBS KBENCH_RUNS KBENCH_TIMEOUT \
  EP_ROUNDS; do
  [[ ${!v:-1} =~ ^[0-9]+$ ]] || { echo "moved.sh: $v=${!v} is not a whole number" >&2; exit 2; }
done
((${BUDGET:-560} <= 580)) || { echo "moved.sh: BUDGET=$BUDGET: a call ends at 600 s" >&2; exit 2; }
OUT=${OUT:-/tmp/out} && mkdir -p "$OUT"
# results persist on the host across calls (a later phase reads an earlier one's files); each
# call returns all of them
R=${R:-${HOME:-/root}/r} && mkdir -p "$R"
# shellcheck source=benchmarks/h200/lib.sh
. benchmarks/h200/lib.sh
deadline=$((SECONDS + ${BUDGET:-560}))
exec > >(tee -a "$R/log-moved.txt" "$OUT/log-moved.txt") 2>&1
# every way out returns what the host holds, also a step that stopped the script
trap 'tar czf "$OUT/moved.tar.gz" -C "$R" .; echo "moved.sh done in ${SECONDS}s"' EXIT
[ -d "$(tree_dir series)" ] || bash /root/stage/p1/assemble.sh > "$R/assemble.log" 2>&1 || {
  tail -30 "$R/assemble.log"
  echo "!!! assemble failed: send the parts it names again; nothing else was run"
  exit 1
}
ln -sfn "$(tree_dir series)" "$(tree_dir patched)"
# the quant phase's candidate patch (served too, by waves 25 and 26) and its tree's name
QUANT_CAND=${QUANT_CAND:-patches/candidates/fp8-quant-one-program.patch}
Q=c$(basename "$QUANT_CAND" .patch)
# the one-block CUDA form (fp8-quant-one-block.patch) is a change to common.cu, which the release
# wheel cannot take: its tree is the base calling the library stage_quant_cuda.sh built (part pq)
QUANT_SO=${QUANT_SO:-/root/stage/pq/fp8_one_block.so}
make_quant_tree() {
  case $QUANT_CAND in
    *one-block.patch) tree_with_so "$Q" "$QUANT_SO" "$QUANT_CAND" ;;
    *) tree_with_patch base "$Q" <"$QUANT_CAND" ;;
  esac
}
install_wheel() {  # once per host: the patched wheel (part w1, wheel_parts.py) into /root/wsite
  [ -d /root/wsite/vllm ] && return 0
  local whl
  whl=$(python3 benchmarks/h200/wheel_parts.py restore /root/stage/w1 \
    --kernels /root/stage/kernels --out /tmp) || { echo "!!! wheel restore failed"; return 1; }
  echo "wheel: $whl sha256 $(sha256sum "$whl" | cut -d' ' -f1)"
  python3 -m pip install -q --no-index --no-deps --no-compile --target /root/wsite "$whl"
}
install_tune_wheels() {  # once per host: Ray and what it imports (parts pt*, stage_tune.sh)
  [ -d /root/tsite/ray ] && return 0
  compgen -G "/root/stage/pt[0-9]*/tune.tar.*" >/dev/null ||
    { echo "!!! no part pt1: run benchmarks/h200/stage_tune.sh and send pt1, pt2"; return 1; }
  rm -rf /tmp/tune-wheels && mkdir -p /tmp/tune-wheels
  # the parts in order (the glob sorts): pt1/tune.tar.0, pt2/tune.tar.1, ... (at most nine)
  cat /root/stage/pt[1-9]/tune.tar.* | tar xf - -C /tmp/tune-wheels
  python3 -m pip install -q --no-index --no-deps --no-compile --target /root/tsite \
    /tmp/tune-wheels/*.whl || { echo "!!! tune wheels did not install"; return 1; }
}
make_tuned() {  # tree `tuned`: the base with the tune phase's config file(s)
  local d f
  d=$(tree_dir tuned)
  f=$(compgen -G "$R/tuned/E=*.json" | head -n 1)
  [ -n "$f" ] || { echo "!!! tune: no config file in $R/tuned"; return 1; }
  [ -d "$d" ] || cp -a "$(tree_dir base)" "$d"
  cp "$R"/tuned/E=*.json "$d/vllm/model_executor/layers/fused_moe/configs/"
  echo "tuned: $(basename "$f"), batches $(python3 -c 'import json,sys; print(*[k for k in json.load(open(sys.argv[1])) if k.isdigit()])' "$f")"
}
for phase in ${PHASES:-check tests}; do
  case $phase in
    check)
      gpu_line
      for t in base series; do
        run_in "$t" 120 python3 - <<'PY'
import glob, os, torch, triton
print("torch", torch.__version__, torch.__file__)
print("triton", triton.__version__)
print("cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0))
print("nccl", torch.cuda.nccl.version())
import vllm
from vllm import _custom_ops as ops  # loads the release kernels
import vllm._C_stable_libtorch, vllm._moe_C_stable_libtorch  # noqa: F401
x = torch.randn(4, 256, device="cuda", dtype=torch.bfloat16)
q, s = ops.scaled_fp8_quant(x)
print("vllm", vllm.__version__, vllm.__file__, "scaled_fp8_quant ok", q.dtype, float(s))
PY
      done
      ;;
    tests)
      run_in series 300 python3 -m pytest -q -p no:cacheprovider -rf \
        tests/kernels/moe/test_fused_moe_fp8_decode.py --junitxml "$R/decode-series.xml"
      run_in series 150 python3 -m pytest -q -p no:cacheprovider \
        tests/kernels/moe/test_fused_moe_jit_warmup.py tests/kernels/moe/test_fp8_oracle_hopper_default.py \
        --junitxml "$R/others-series.xml"
      # 0003's test in test_moe.py (vLLM's L4 MoE step runs it): the amax kernel, one variant
      run_in series 120 python3 -m pytest -q -p no:cacheprovider -rf tests/kernels/moe/test_moe.py \
        -k masked_amax_scale --junitxml "$R/amax-series.xml"
      for t in series base; do
        run_ws "$t" 120 python3 -P -m pytest -q -p no:cacheprovider -m contract -rA \
          tests/contract -k "cuda or gpu" --junitxml "$R/contract-gpu-$t.xml"
      done
      ;;
    bench)
      read -ra bench_args <<<"${BENCH_ARGS:-}"
      for ((r = 1; r <= ${ROUNDS:-2}; r++)); do
        for t in base series; do
          run_in "$t" "${BENCH_TIMEOUT:-200}" python3 -m benchmarks.bench_moe_layer \
            --variant "$t" --out "$R/moe_layer-$t-r$r.json" "${bench_args[@]}"
        done
      done
      ;;
    branches)
      # BRANCHES: the patch numbers to run, in that order (a round short of time runs the
      # cheaper one first); default every staged branch
      dirs=() && for n in ${BRANCHES:-}; do dirs+=("$TREE_ROOT/vllm-pr$n"); done
      ((${#dirs[@]})) || dirs=("$TREE_ROOT"/vllm-pr[0-9][0-9][0-9][0-9])
      for d in "${dirs[@]}"; do
        [ -d "$d" ] || { echo "!!! no branch tree $d: send part pb${d##*/vllm-pr}"; continue; }
        t=${d##*/vllm-} && n=${t#pr}
        # the Test Plan's pytest lines (indented four spaces in the patch message)
        mapfile -t cmds < <(sed -n '/^## Test Plan/,/^## /s/^    pytest \(.*\)$/\1/p' patches/"$n"-*.patch)
        b=$(tree_dir "$t-before")
        if [ ! -d "$b" ]; then
          cp -a "$(tree_dir base)" "$b"
          sed -n 's|^diff --git a/\(tests/[^ ]*\) b/.*|\1|p' patches/"$n"-*.patch | while read -r f; do
            [ -f "$d/$f" ] && mkdir -p "$b/$(dirname "$f")" && cp "$d/$f" "$b/$f"
          done
        fi
        i=0
        for c in "${cmds[@]}"; do
          i=$((i + 1))
          for tr in "$t" "$t-before"; do
            run_in "$tr" 300 bash -c "python3 -m pytest -q -p no:cacheprovider -rf $c --junitxml $R/$tr-$i.xml"
          done
        done
      done
      ;;
    warmup)
      # the warm-up's GPU test alone (its failure names each recompile's binding difference)
      run_in series 150 python3 -m pytest -q -p no:cacheprovider -rf \
        tests/kernels/moe/test_fused_moe_jit_warmup.py -k no_compile_after_warmup \
        --junitxml "$R/warmup-series.xml"
      ;;
    epnan)
      # 0004's vLLM tests (in test_moe.py) on both trees (base: the series'
      # test_moe.py beside its own, where they must fail), then benchmarks/ep_nan.py per
      # tree (numerics and the layer's time)
      t=tests/kernels/moe/test_moe_series.py
      cp "$(tree_dir series)/tests/kernels/moe/test_moe.py" "$(tree_dir series)/$t"
      cp "$(tree_dir series)/tests/kernels/moe/test_moe.py" "$(tree_dir base)/$t"
      for tr in series base; do
        run_in "$tr" 150 python3 -m pytest -q -p no:cacheprovider -rf "$t" \
          -k "ep_dynamic_tensor_scale or int8_dynamic_per_tensor" \
          --junitxml "$R/epnan-test-$tr.xml"
        run_ws "$tr" 150 python3 -m benchmarks.ep_nan --variant "$tr" --time \
          --out "$R/ep_nan-$tr.json"
      done
      run_ws series 30 python3 -m benchmarks.ep_nan --compare "$R/ep_nan-base.json" \
        "$R/ep_nan-series.json"
      ;;
    wheel)
      # the patched release wheel (scripts/wheel.sh, staged as part w1 by wheel_parts.py) installed
      # alone into /root/wsite; the contracts' GPU parts and the decode tests import it
      install_wheel
      mkdir -p /root/wtests && cp -r "$(tree_dir series)/tests" /root/wtests/ 2>/dev/null
      (cd "$ws" && PYTHONPATH="/root/wsite:$SITE:$ws" timeout "$(bounded 150)" python3 -P -c \
        'import vllm, sys; print("vllm from", vllm.__file__, vllm.__version__)')
      (cd "$ws" && PYTHONPATH="/root/wsite:$SITE:$ws" timeout "$(bounded 150)" python3 -P -m pytest -q \
        -p no:cacheprovider -m contract -rA tests/contract -k "cuda or gpu" \
        --junitxml "$R/contract-gpu-wheel.xml") || echo "!!! wheel contracts"
      (cd /root/wtests && PYTHONPATH="/root/wsite:$SITE" timeout "$(bounded 200)" python3 -m pytest -q \
        -p no:cacheprovider tests/kernels/moe/test_fused_moe_fp8_decode.py -k modular_kernel_path \
        --junitxml "$R/decode-wheel.xml") || echo "!!! wheel decode tests"
      ;;
    fi)
      # the module linked on the CPU machine (pf/fused_moe_90.so.gz), else linked here
      aot=$SITE/flashinfer/data/aot/fused_moe_90
      if ls /root/stage/pf/fused_moe_90.so.gz* >/dev/null 2>&1; then
        mkdir -p "$aot" && cat /root/stage/pf/fused_moe_90.so.gz* | gunzip >"$aot/fused_moe_90.so"
        ls -la "$aot"
      else
        bash benchmarks/h200/flashinfer_fp8_link.sh /root/stage/pf "$SITE" >"$R/fi-link.log" 2>&1 ||
          echo "!!! flashinfer link failed"
        tail -n 4 "$R/fi-link.log"
      fi
      # without the module FlashInfer compiles its 248 sources: longer than the call
      [ -s "$aot/fused_moe_90.so" ] || { echo "!!! no $aot/fused_moe_90.so: send part pf"; continue; }
      run_in base 60 python3 -c 'import flashinfer, vllm.utils.flashinfer as f; print("flashinfer", flashinfer.__version__, "cutlass fused moe:", f.has_flashinfer_cutlass_fused_moe())'
      run_in base 240 python3 -m pytest -q -p no:cacheprovider -rA \
        tests/kernels/moe/test_flashinfer.py -k "cutlass_moe_fp8_no_graph" \
        --junitxml "$R/fi-vllm-test.xml"
      ;;
    layer)
      read -ra bench_args <<<"${BENCH_ARGS:---shapes qwen3-30b-a3b dsv3-tp8}"
      for ((r = 1; r <= ${ROUNDS:-1}; r++)); do
        run_in base "${BENCH_TIMEOUT:-200}" python3 -m benchmarks.bench_moe_layer \
          --variant base --flashinfer --out "$R/moe_layer-base-r$r.json" "${bench_args[@]}"
        run_in series "${BENCH_TIMEOUT:-200}" python3 -m benchmarks.bench_moe_layer \
          --variant series --decode16 --out "$R/moe_layer-series-r$r.json" "${bench_args[@]}"
      done
      ;;
    sweep)
      # the decode kernels under other launch configurations (benchmarks/decode_sweep.py;
      # SWEEP_ARGS replaces its defaults: Qwen3-30B-A3B and DeepSeek-V3 TP8, static, M=1, 18
      # configurations each), then its table
      read -ra sweep_args <<<"${SWEEP_ARGS:-}"
      run_in series "${BENCH_TIMEOUT:-240}" python3 -m benchmarks.decode_sweep \
        --variant series --out "$R/decode_sweep.json" "${sweep_args[@]}"
      run_ws series 30 python3 -P -m benchmarks.decode_sweep --report "$R/decode_sweep.json"
      ;;
    cand)
      [ -f "${CAND:-}" ] || { echo "!!! cand: CAND=$CAND is not a patch file here"; continue; }
      t=c$(basename "$CAND" .patch)
      tree_with_patch series "$t" <"$CAND"
      [ "${CAND_TESTS:-1}" = 0 ] || run_in "$t" 300 python3 -m pytest -q -p no:cacheprovider -rf \
        tests/kernels/moe/test_fused_moe_fp8_decode.py --junitxml "$R/decode-$t.xml"
      read -ra sweep_args <<<"${SWEEP_ARGS:-}"
      run_in "$t" "${BENCH_TIMEOUT:-240}" python3 -m benchmarks.decode_sweep \
        --variant "$t" --out "$R/decode_sweep-$t.json" "${sweep_args[@]}"
      run_ws series 30 python3 -P -m benchmarks.decode_sweep --report "$R/decode_sweep-$t.json"
      ;;
    quant)
      [ -f "$QUANT_CAND" ] || { echo "!!! quant: QUANT_CAND=$QUANT_CAND is not a patch file here"; continue; }
      make_quant_tree || continue
      case $QUANT_CAND in
        *one-block.patch)
          # vLLM's own tests of the op (ops.scaled_fp8_quant calls the library in that tree);
          # the op alone against v0.34.0's, on the base (its bytes compared there)
          run_in "$Q" 300 python3 -m pytest -q -p no:cacheprovider -rf \
            tests/kernels/quantization/test_fp8_quant.py -k "per_tensor or large" \
            --junitxml "$R/quant-test-$Q.xml"
          # its own tests on v0.34.0 (the base with the patch's test file): the contract fails there
          tree_with_tests "$Q-before" "$QUANT_CAND"
          run_in "$Q-before" 120 python3 -m pytest -q -p no:cacheprovider -rf \
            tests/kernels/quantization/test_fp8_quant.py -k "one_block or one_launch" \
            --junitxml "$R/quant-test-$Q-before.xml"
          # what ptxas said of the build that runs (stage_quant_cuda.sh keeps it beside the library)
          cp "${QUANT_SO%.so}-ptxas.txt" "$R/" 2>/dev/null || echo "!!! quant: no ptxas file beside $QUANT_SO"
          run_in base 150 python3 -m benchmarks.bench_fp8_quant --variant base \
            --one-block "$QUANT_SO" --out "$R/fp8_quant-$Q.json"
          # across the limit: flat inputs of 2K-48K values, bf16 and float32 (where it stops winning)
          run_in base 120 python3 -m benchmarks.bench_fp8_quant --variant base \
            --one-block "$QUANT_SO" --sweep --out "$R/fp8_quant-sweep-$Q.json"
          # vLLM's own benchmark of the op (the PR's command: wall time a call, launches
          # included) at 1 and 16 tokens of Qwen3-30B-A3B's hidden size, the trees in turns;
          # tree $Q-control calls the pin's own common.cu through the same library (part pq's
          # fp8_control.so): what the library itself costs on the host
          qt=(base "$Q")
          tree_with_so "$Q-control" "${QUANT_SO%/*}/fp8_control.so" && qt=(base "$Q-control" "$Q")
          for m in 1 16; do
            for v in "${qt[@]}"; do
              run_in "$v" 60 python3 benchmarks/kernels/benchmark_quant.py --quant-dtype fp8 \
                --dtype bfloat16 --num-tokens "$m" --hidden-size 2048 --num-iters 5000 \
                | tee -a "$R/benchmark_quant-$v-M$m.txt"
            done
          done
          ;;
        *)
          run_in "$Q" 200 python3 -m pytest -q -p no:cacheprovider -rf \
            tests/kernels/moe/test_moe_fp8_quant_one_program.py --junitxml "$R/quant-test-$Q.xml"
          run_in "$Q" 150 python3 -m benchmarks.bench_fp8_quant --variant "$Q" \
            --out "$R/fp8_quant-$Q.json"
          ;;
      esac
      read -ra bench_args <<<"${BENCH_ARGS:---shapes qwen3-30b-a3b dsv3-tp8}"
      for ((r = 1; r <= ${ROUNDS:-2}; r++)); do
        for v in base "$Q"; do
          run_in "$v" "${BENCH_TIMEOUT:-120}" python3 -m benchmarks.bench_moe_layer --variant "$v" \
            --batches {1..16} --out "$R/moe_layer-q-$v-r$r.json" "${bench_args[@]}"
        done
      done
      ;;
    epcost)
      # which patch makes the series' fused_experts under EP slower than v0.34.0's: trees
      # of the base with one patch each (patch -p1 on a copy of the base; its tests left out)
      # EP_PATCHES: a number names a patch of the series (tree pNNNN), a path any patch file,
      # e.g. a candidate in patches/candidates/ (tree p<its name without .patch>)
      cands=()
      for n in ${EP_PATCHES:-0002 0004}; do
        if [[ $n == */* ]]; then
          f=$n n=$(basename "$n" .patch) && cands+=("p$n")
        else
          f=$(echo patches/"$n"-*.patch)
        fi
        # its vllm/ hunks only (its tests left out)
        awk '/^diff --git a\/tests\//{skip=1} /^diff --git a\/vllm\//{skip=0} !skip' "$f" |
          tree_with_patch base "p$n"
      done
      # the table compares the trees timed in this call (a fixed list once stopped it)
      # EP_ROUNDS > 1: the trees in turns, each run its own file and column (<tree>.r<round>)
      costs=()
      for ((r = 1; r <= ${EP_ROUNDS:-1}; r++)); do
        for t in ${EP_TREES:-base p0004 p0002 series}; do
          v=$t && ((${EP_ROUNDS:-1} > 1)) && v=$t.r$r
          rm -f "$R/epcost-$v.json"
          run_ws "$t" 90 python3 -P -m benchmarks.ep_nan --variant "$v" --time-only \
            --out "$R/epcost-$v.json"
          [ -f "$R/epcost-$v.json" ] && costs+=("$R/epcost-$v.json")
        done
      done
      ((${#costs[@]})) && run_ws series 30 python3 -P -m benchmarks.ep_nan --compare "${costs[@]}"
      # the timing snippet a PR body shows (torch and vllm only), once per tree
      for t in ${EP_TREES:-base p0004 p0002 series}; do
        echo "snippet on $t"
        run_in "$t" 90 python3 "$ws/benchmarks/upstream/time_fused_experts_ep.py" |
          tee "$R/snippet-ep-$t.txt"
      done
      # a candidate also gets what 0004 must pass: its tests (the series' test_moe.py beside
      # the tree's own) and ep_nan.py's numerics
      for t in "${cands[@]}"; do
        cp "$(tree_dir series)/tests/kernels/moe/test_moe.py" \
          "$(tree_dir "$t")/tests/kernels/moe/test_moe_series.py" || echo "!!! no series test_moe.py"
        run_in "$t" 150 python3 -m pytest -q -p no:cacheprovider -rf \
          tests/kernels/moe/test_moe_series.py -k "ep_dynamic_tensor_scale or int8_dynamic_per_tensor" \
          --junitxml "$R/epnan-test-$t.xml"
        run_ws "$t" 150 python3 -P -m benchmarks.ep_nan --variant "$t" --out "$R/ep_nan-$t.json"
      done
      ;;
    served)
      # the wheel's processes (ws*, Lws*) need part w1; a round staged without it serves trees
      if [ -d /root/stage/w1 ]; then install_wheel; else echo "served: no part w1, no wheel processes"; fi
      # shellcheck source=benchmarks/h200/served.sh
      . benchmarks/h200/served.sh
      # the series' processes ask for its decode backend (D), except the sa* ones (its auto)
      D=triton_fp8_decode V=dsv3-tp8
      # waves 25, 26 and 35-38 serve the quant phase's candidate tree: made here if that phase has not
      case " ${WAVES:-} " in
        *" 25 "* | *" 26 "* | *" 3"[5-8]" "*) make_quant_tree ;;
      esac
      # waves 27 to 34 serve the tune phase's tree (its config file from an earlier call)
      case " ${WAVES:-} " in
        *" 2"[789]" "* | *" 3"[0-4]" "*) [ -d "$(tree_dir tuned)" ] || make_tuned || echo "!!! no tree tuned: run PHASES=tune first" ;;
      esac
      for w in ${WAVES:-1 2 3 4 5}; do
        case $w in
          1) served_wave 1 340 bd1:base:fp8dyn:trace sd1:series:fp8dyn:trace:$D \
            bs1:base:fp8static:trace ss1:series:fp8static:trace:$D bd2:base:fp8dyn \
            sd2:series:fp8dyn::$D ;;
          2) served_wave 2 270 bs2:base:fp8static ss2:series:fp8static::$D bd3:base:fp8dyn \
            sd3:series:fp8dyn::$D bs3:base:fp8static ss3:series:fp8static::$D ;;
          3) served_wave 3 270 ws1:wheel:fp8static::$D bd4:base:fp8dyn sd4:series:fp8dyn::$D \
            bs4:base:fp8static ss4:series:fp8static::$D sa1:series:fp8static ;;
          # v0.34.0 with the rule of #50040 alone (TRITON asked for) against its default
          4) served_wave 4 240 bt1:base:fp8static::triton bs6:base:fp8static \
            bt2:base:fp8static::triton bs7:base:fp8static bt3:base:fp8static::triton \
            bs8:base:fp8static ;;
          # fifth processes of each arm; sa*: the series as it is with static scales (auto:
          # 0001's TRITON, against FLASHINFER_CUTLASS)
          5) served_wave 5 270 bd5:base:fp8dyn sd5:series:fp8dyn::$D bs5:base:fp8static \
            ss5:series:fp8static::$D sa2:series:fp8static sa3:series:fp8static ;;
          # the model's full depth (48 layers, about 34 GiB an engine): a decode step twice as
          # long on the GPU, longer than the host's part of it (at 24 layers and batch 1 the
          # series' step waits for the host); a pair per wave, one call each
          6) served_wave 6 330 Lbd1:base:fp8dyn:trace::48 Lsd1:series:fp8dyn:trace:$D:48 ;;
          7) served_wave 7 330 Lbs1:base:fp8static:trace::48 Lss1:series:fp8static:trace:$D:48 ;;
          # second pairs at 48 layers, the series measuring first (turns alternate trees)
          8) served_wave 8 300 Lsd2:series:fp8dyn::$D:48 Lbd2:base:fp8dyn:::48 ;;
          9) served_wave 9 300 Lss2:series:fp8static::$D:48 Lbs2:base:fp8static:::48 ;;
          10) served_wave 10 300 Lbd3:base:fp8dyn:::48 Lsd3:series:fp8dyn::$D:48 ;;
          11) served_wave 11 300 Lbs4:base:fp8static:::48 Lss3:series:fp8static::$D:48 ;;
          # the series as it is (auto: 0001's TRITON) against
          # v0.34.0's autotuned FLASHINFER_CUTLASS at 48 layers: 0001 on its own
          12) served_wave 12 300 Lsa1:series:fp8static:::48 Lbs3:base:fp8static:::48 ;;
          13) served_wave 13 300 Lbs7:base:fp8static:::48 Lsa2:series:fp8static:::48 ;;
          # fourth and fifth processes of the static arms (the series measuring first in 14)
          14) served_wave 14 300 Lss4:series:fp8static::$D:48 Lbs5:base:fp8static:::48 ;;
          15) served_wave 15 300 Lbs6:base:fp8static:::48 Lss5:series:fp8static::$D:48 ;;
          # the patched release wheel (part w1) served beside the staged series tree
          16) served_wave 16 300 Lws1:wheel:fp8static::$D:48 Lss6:series:fp8static::$D:48 ;;
          # 48 layers on the H200 (141 GiB: three engines at once): the static arms, the base
          # twice in 17 and the series twice in 18
          17) served_wave 17 330 Hbs1:base:fp8static:::48 Hss1:series:fp8static::$D:48 \
            Hbs2:base:fp8static:::48 ;;
          18) served_wave 18 330 Hss2:series:fp8static::$D:48 Hbs3:base:fp8static:::48 \
            Hss3:series:fp8static::$D:48 ;;
          # fourth and fifth pairs of the dynamic arms at 48 layers (after 6, 8 and 10)
          22) served_wave 22 300 Lsd4:series:fp8dyn::$D:48 Lbd4:base:fp8dyn:::48 ;;
          23) served_wave 23 300 Lbd5:base:fp8dyn:::48 Lsd5:series:fp8dyn::$D:48 ;;
          # a traced 48-layer dynamic pair whose trace files come back whole (served/traces/):
          # with the layer phase in the same call, prediction and TPOT from one machine
          24) served_wave 24 330 Lsd6:series:fp8dyn:trace:$D:48 Lbd6:base:fp8dyn:trace::48 ;;
          # the one-launch dynamic FP8 quantization candidate ($Q, made above) against v0.34.0,
          # TRITON on both sides, 48-layer dynamic triples in the two orders (an H200 holds the
          # three engines at once; an H100 runs them in parts)
          25) served_wave 25 330 "Lqd1:$Q:fp8dyn:::48" Lbd7:base:fp8dyn:::48 \
            "Lqd2:$Q:fp8dyn:::48" ;;
          26) served_wave 26 330 Lbd8:base:fp8dyn:::48 "Lqd3:$Q:fp8dyn:::48" \
            Lbd9:base:fp8dyn:::48 ;;
          # 0003's review: its decode backend against v0.34.0's TRITON, untuned and with the
          # tune phase's config (tree `tuned`), static scales, 48 layers, a triple each order
          27) served_wave 27 330 Tbt1:base:fp8static::triton:48 Tss1:series:fp8static::$D:48 \
            Ttt1:tuned:fp8static::triton:48 ;;
          28) served_wave 28 330 Ttt2:tuned:fp8static::triton:48 Tss2:series:fp8static::$D:48 \
            Tbt2:base:fp8static::triton:48 ;;
          # the same on a GPU where a triple does not fit (an H100): a pair each, tuned first
          29) served_wave 29 330 Ttt3:tuned:fp8static::triton:48 Tss3:series:fp8static::$D:48 ;;
          30) served_wave 30 330 Tss4:series:fp8static::$D:48 Tbt3:base:fp8static::triton:48 ;;
          31) served_wave 31 330 Tss5:series:fp8static::$D:48 Ttt4:tuned:fp8static::triton:48 ;;
          32) served_wave 32 330 Tbt4:base:fp8static::triton:48 Tss6:series:fp8static::$D:48 ;;
          33) served_wave 33 330 Ttt5:tuned:fp8static::triton:48 Tss7:series:fp8static::$D:48 ;;
          34) served_wave 34 330 Tss8:series:fp8static::$D:48 Tbt5:base:fp8static::triton:48 ;;
          # the quant candidate against v0.34.0 where a triple does not fit (an H100): a pair
          # each, the orders alternating
          35) served_wave 35 330 "Lqd4:$Q:fp8dyn:::48" Lbd10:base:fp8dyn:::48 ;;
          36) served_wave 36 330 Lbd11:base:fp8dyn:::48 "Lqd5:$Q:fp8dyn:::48" ;;
          37) served_wave 37 330 "Lqd6:$Q:fp8dyn:::48" Lbd12:base:fp8dyn:::48 ;;
          38) served_wave 38 330 Lbd13:base:fp8dyn:::48 "Lqd7:$Q:fp8dyn:::48" ;;
          # DeepSeek-V3 TP8's MoE layer served in a one-rank stand-in (benchmarks/shapes.py
          # says what it leaves out), 16 layers, about 27 GiB an engine: a pair fits an H100.
          # v0.34.0's default against the decode backend (19 static, 21 dynamic) and against
          # the series as it is (20: 0001's TRITON)
          19) served_wave 19 300 Dbs1:base:fp8static:::16:$V Dss1:series:fp8static::$D:16:$V ;;
          20) served_wave 20 300 Dsa1:series:fp8static:::16:$V Dbs2:base:fp8static:::16:$V ;;
          21) served_wave 21 300 Dbd1:base:fp8dyn:::16:$V Dsd1:series:fp8dyn::$D:16:$V ;;
        esac
      done
      # the layer rows only where a layer phase ran on this host (an unmatched glob stays
      # literal and stopped the report)
      mapfile -t lrows < <(compgen -G "$R/moe_layer-*.json")
      # a report per model whose engines ran (served.md: Qwen3-30B-A3B's; served-<arch>.md)
      for a in qwen3-30b-a3b "$V"; do
        grep -lq "\"arch\": \"$a\"" "$R"/served/*.json 2>/dev/null || continue
        sfx=-$a && [ "$a" = qwen3-30b-a3b ] && sfx=
        run_ws series 60 python3 -P -m benchmarks.served.report "$R"/served/*.json \
          --layer "${lrows[@]}" --shape "$a" --md "$R/served$sfx.md" --json "$R/served$sfx.json"
      done
      # the quant candidate's processes held to v0.34.0's default (the report above holds the
      # series' arms)
      if compgen -G "$R/served/Lqd*.json" >/dev/null; then
        run_ws series 60 python3 -P -m benchmarks.served.report "$R"/served/*.json \
          --layer "${lrows[@]}" --arms "$Q" --md "$R/served-quant.md" --json "$R/served-quant.json"
      fi
      ;;
    tune)
      install_tune_wheels || continue
      ts=${TUNE_SHAPE:-qwen3-30b-a3b}
      read -ra tb <<<"${TUNE_BATCHES:-1 2 3 4 8 16}"
      # the tuner once per host (a later call runs the layer rounds only)
      [ -f "$R/tune-$ts.json" ] ||
        run_in base "${TUNE_TIMEOUT:-360}" env PYTHONPATH="$(tree_path base):/root/tsite" \
          python3 -m benchmarks.tune_fused_moe --shape "$ts" --batches "${tb[@]}" \
          --save-dir "$R/tuned" --out "$R/tune-$ts.json"
      make_tuned || continue
      # files of one call and round sort together (tune_report.py pairs the trees by name)
      c=$(date +%H%M%S)
      for ((r = 1; r <= ${ROUNDS:-1}; r++)); do
        for t in base tuned series; do
          run_in "$t" "${BENCH_TIMEOUT:-90}" python3 -m benchmarks.bench_moe_layer \
            --variant "$t" --shapes "$ts" --out "$R/moe_layer-t-$t-$c-r$r.json"
        done
      done
      ;;
    kbench)
      # 0003's own layer benchmark, the command its PR shows (vLLM's benchmarks/kernels/), on
      # its branch alone where staged (tree pr0003), KBENCH_RUNS times (default 3)
      # KBENCH_TUNED=1: its triton arm with the tune phase's config file
      # (VLLM_TUNED_CONFIG_FOLDER, as 0003's review asks); KBENCH_MODELS: the model shapes
      kt=pr0003 && [ -d "$(tree_dir pr0003)" ] || kt=series
      kenv=() k=$kt
      if [ -n "${KBENCH_TUNED:-}" ]; then
        compgen -G "$R/tuned/E=*.json" >/dev/null || { echo "!!! kbench: no tuned config: run PHASES=tune first"; continue; }
        kenv=(VLLM_TUNED_CONFIG_FOLDER="$R/tuned") k=$kt-tuned
      fi
      read -ra km <<<"${KBENCH_MODELS:-qwen3-30b-a3b deepseek-v3-tp8 mixtral-8x7b}"
      for ((r = 1; r <= ${KBENCH_RUNS:-3}; r++)); do
        echo "kbench run $r on $k"
        run_in "$kt" "${KBENCH_TIMEOUT:-200}" env "${kenv[@]}" python3 \
          benchmarks/kernels/benchmark_moe_fp8_decode.py --model "${km[@]}" --batch-sizes 1 2 3 4 \
          2>"$R/kbench-$k-r$r.log" | tee "$R/kbench-$k-r$r.txt"
      done
      ;;
    latency)
      # vLLM's own latency benchmark, the command a maintainer reruns (batch 1)
      lf=${LATENCY_FLAVOUR:-fp8static} ll=${LATENCY_LAYERS:-48}
      run_ws series 60 python3 -P -m benchmarks.e2e.models --out /root/models \
        --arch qwen3-30b-a3b --flavour "$lf" --layers "$ll"
      for t in base series; do
        # the series with its decode backend asked for; the base with its defaults
        asked=() && [ "$t" = series ] && asked=(--moe-backend triton_fp8_decode)
        run_in "$t" "${LATENCY_TIMEOUT:-230}" env VLLM_USE_DEEP_GEMM=0 VLLM_USE_FLASHINFER_SAMPLER=0 \
          VLLM_CACHE_ROOT=/root/vcache python3 -m vllm.entrypoints.cli.main bench latency \
          --model "/root/models/qwen3-30b-a3b-$lf-L$ll" --load-format dummy --quantization fp8 \
          --skip-tokenizer-init --disable-detokenize --input-len 32 --output-len 1024 \
          --batch-size 1 --num-iters-warmup 2 --num-iters 6 --max-model-len 1120 \
          --kv-cache-memory-bytes 2147483648 --no-enable-prefix-caching \
          --compilation-config '{"cudagraph_capture_sizes": [1, 4, 8, 16]}' "${asked[@]}" \
          --output-json "$R/latency-$t.json" >"$R/latency-$t.log" 2>&1
        # vLLM logs to stdout: its result lines, the backend the oracle chose, FlashInfer's autotune
        grep -h "latency\|percentile" "$R/latency-$t.log" | tail -n 8 | cut -c1-200
        grep -h "Fp8 MoE backend\|Autotuning" "$R/latency-$t.log" | tail -n 3 | cut -c1-200
      done
      ;;
    vllm)
      only=() && for o in ${UPSTREAM_ONLY:-}; do only+=(--only "$o"); done
      run_ws series "$(left)" python3 -m vseries.upstream --base "$(tree_dir base)" \
        --patched "$(tree_dir series)" --pythonpath "$SITE" --out "$R/upstream.md" \
        --work "$R/junit" --jobs "${UPSTREAM_JOBS:-8}" "${only[@]}"
      ;;
  esac
done
