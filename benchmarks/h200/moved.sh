#!/usr/bin/env bash
# Host side of a GPU run on the main line (v0.34.0 with torch 2.14.0 / Triton 3.8.0 / NCCL
# 2.30.7: the host's own, or staged wheels installed into /root/site ahead of the host's
# torch), on trees made by assemble.sh (from the parts in /root/stage) or linked by hand
# (CONTRIBUTING.md "Run the GPU tiers"). Phases (PHASES, default "check tests"):
#   check  assemble (once), then what runs: torch, Triton, NCCL, the release kernels loading,
#          the GPU; the tree heads
#   tests  the series' own vLLM tests on the series tree (GPU parts included), the GPU parts
#          of the contracts on base and series
#   bench  benchmarks/bench_moe_layer.py (the FP8 MoE layer as the TRITON backend builds it),
#          trees alternating base, series, base, series ... (ROUNDS, default 2)
#   vllm   vLLM's tests of the touched areas, base vs series (tests/upstream.toml, sharded)
#   warmup the warm-up's GPU test alone; epnan the expert-parallel NaN test and ep_nan.py on
#          both trees; wheel the patched release wheel's GPU checks (parts w1..wN)
#   served benchmarks/served_decode.py: one engine process per SERVED entry (tree:backend),
#          greedy tokens and small-batch decode throughput, joined in served.md
# Trees: $TREE_ROOT/vllm-base (plain pin) and $TREE_ROOT/vllm-series (the series), TREE_ROOT
# /root by default (lib.sh). Each step has its own timeout and the whole call ends within
# BUDGET seconds (default 560).
# Results and logs in $OUT (one tarball, one log).
set -uo pipefail
OUT=${OUT:-/tmp/out}
R=$OUT/r && mkdir -p "$R"
# shellcheck source=benchmarks/h200/lib.sh
. benchmarks/h200/lib.sh
deadline=$((SECONDS + ${BUDGET:-560}))
exec > >(tee -a "$OUT/log-moved.txt") 2>&1
[ -d "$(tree_dir series)" ] || bash /root/stage/p1/assemble.sh > "$R/assemble.log" 2>&1 || {
  tail -30 "$R/assemble.log"
  echo "!!! assemble failed"
}
ln -sfn "$(tree_dir series)" "$(tree_dir patched)"
install_wheel() {  # once per host: the pieces in /root/stage/w*/ joined into /root/wsite
  [ -d /root/wsite/vllm ] && return 0
  local pieces=(/root/stage/w*/patched.whl.piece*) whl
  whl=/tmp/$(cat /root/stage/w1/NAME)
  cat "${pieces[@]}" >"$whl"
  echo "wheel: $whl sha256 $(sha256sum "$whl" | cut -d' ' -f1)"
  python3 -m pip install -q --no-index --no-deps --no-compile --target /root/wsite "$whl"
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
      run_in series 300 python3 -m pytest -q -p no:cacheprovider -x \
        tests/kernels/moe/test_fused_moe_fp8_decode.py --junitxml "$R/decode-series.xml"
      run_in series 150 python3 -m pytest -q -p no:cacheprovider \
        tests/kernels/moe/test_fused_moe_jit_warmup.py tests/kernels/moe/test_fused_moe_tuned_configs.py \
        tests/kernels/moe/test_fp8_oracle_hopper_default.py \
        tests/kernels/test_fused_inv_rope_fp8_quant.py -k "not einsum" \
        --junitxml "$R/others-series.xml"
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
    warmup)
      # the warm-up's GPU test alone (its failure names each recompile's binding difference)
      run_in series 150 python3 -m pytest -q -p no:cacheprovider -rf \
        tests/kernels/moe/test_fused_moe_jit_warmup.py -k no_compile_after_warmup \
        --junitxml "$R/warmup-series.xml"
      ;;
    epnan)
      # 0006's and 0007's vLLM tests (in test_moe.py) on both trees (base: the series'
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
      # the patched release wheel (scripts/wheel.sh, staged as pieces in w1..wN) installed
      # alone into /root/wsite; the contracts' GPU parts and the decode tests import it
      install_wheel
      mkdir -p /root/wtests && cp -r "$(tree_dir series)/tests" /root/wtests/ 2>/dev/null
      (cd "$ws" && PYTHONPATH="/root/wsite:$SITE:$ws" timeout 150 python3 -P -c \
        'import vllm, sys; print("vllm from", vllm.__file__, vllm.__version__)')
      (cd "$ws" && PYTHONPATH="/root/wsite:$SITE:$ws" timeout 150 python3 -P -m pytest -q \
        -p no:cacheprovider -m contract -rA tests/contract -k "cuda or gpu" \
        --junitxml "$R/contract-gpu-wheel.xml") || echo "!!! wheel contracts"
      (cd /root/wtests && PYTHONPATH="/root/wsite:$SITE" timeout 200 python3 -m pytest -q \
        -p no:cacheprovider tests/kernels/moe/test_fused_moe_fp8_decode.py -k modular_kernel_path \
        --junitxml "$R/decode-wheel.xml") || echo "!!! wheel decode tests"
      ;;
    served)
      # benchmarks/served_decode.py, one engine process each (SERVED: tree:moe_backend ...;
      # tree "wheel" is the patched release wheel in /root/wsite, which the wheel phase makes)
      install_wheel
      i=0
      for pb in ${SERVED:-series:auto series:triton wheel:auto base:auto}; do
        i=$((i + 1)) && t=${pb%%:*} && b=${pb#*:}
        if [ "$t" = wheel ]; then
          path="/root/wsite:$SITE:$ws" && pre=(env "PYTHONPATH=$path")
          tr=series
        else
          pre=() && tr=$t
        fi
        run_ws "$tr" "${SERVED_TIMEOUT:-240}" "${pre[@]}" env VLLM_USE_DEEP_GEMM=0 \
          python3 -P -m benchmarks.served_decode --variant "$t-$b" --moe-backend "$b" \
          --flavour "${FLAVOUR:-fp8static}" --out "$R/served-$i-$t-$b.json" \
          2>"$R/served-$i-$t-$b.log"
        grep -h -i "moe backend\|Using .*Experts\|Error" "$R/served-$i-$t-$b.log" | head -5
      done
      run_ws series 30 python3 -P -m benchmarks.served_decode --compare "$R"/served-*.json \
        --md "$R/served.md"
      ;;
    vllm)
      only=() && for o in ${UPSTREAM_ONLY:-}; do only+=(--only "$o"); done
      run_ws series "$(left)" python3 -m vseries.upstream --base "$(tree_dir base)" \
        --patched "$(tree_dir series)" --pythonpath "$SITE" --out "$R/upstream.md" \
        --work "$R/junit" --jobs "${UPSTREAM_JOBS:-8}" "${only[@]}"
      ;;
  esac
done
tar czf "$OUT/moved.tar.gz" -C "$R" .
echo "moved.sh done in ${SECONDS}s"
