#!/usr/bin/env bash
# Host side of the served-decode benchmark (benchmarks/served): waves of engine processes of
# vLLM's offline LLM, several alive at once on the one GPU, measuring in turns. Sourced by
# moved.sh (its `served` phase) after lib.sh; reads R (results), SITE, ws, deadline.
#   served_wave NAME LIMIT SPEC...   SPEC = name:tree:flavour[:trace[:backend[:layers[:arch]]]]
# tree: base or series (the staged trees), wheel (the patched release wheel in /root/wsite);
# backend: a --moe-backend to ask for (default: the oracle's choice); layers: the model's depth
# (default 24); arch: a record of benchmarks/shapes.py (default qwen3-30b-a3b). A wave whose
# processes do not fit in the GPU's memory together (benchmarks.served.fit) runs in parts,
# each a wave of its own (3a, 3b, ...), LIMIT each.
# Each process: $R/served/<name>.json (its record) and <name>.log (its output: vLLM logs to
# stdout; the engine reads the backend lines from there).
# shellcheck shell=bash
# shellcheck source=benchmarks/h200/lib.sh
. benchmarks/h200/lib.sh
served_env=(VLLM_USE_DEEP_GEMM=0 VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_CACHE_ROOT=/root/vcache
  PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false)
served_wave() {
  local wave=$1 limit=$2 name specs line
  shift 2
  gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -n 1)
  (cd "$ws" && PYTHONPATH="$ws" python3 -P -m benchmarks.served.fit --gpu-mib "$gpu_mib" \
    "$wave" "$@") >"$R/fit-$wave.txt" || { echo "!!! wave $wave not started"; return 1; }
  local -a cut
  mapfile -t cut <"$R/fit-$wave.txt" # read first: the engines must not inherit the file
  for line in "${cut[@]}"; do
    read -r name specs <<<"$line"
    # shellcheck disable=SC2086  # the part's specs, one word each
    served_part "$name" "$limit" $specs || return 1
  done
}
served_part() {
  local wave=$1 limit=$2 t
  shift 2
  t=$(left)
  [ "$t" -lt "$limit" ] && limit=$t
  if [ "$limit" -lt 150 ]; then
    echo "!!! wave $wave skipped (budget)"
    return 1
  fi
  local dir=/tmp/turns-$wave n=$# i=0 pids=() spec name tree flavour trace backend layers arch path
  rm -rf "$dir" && mkdir -p "$R/served"
  echo "=== wave $wave: $n engines, ${limit}s, at ${SECONDS}s: $*"
  for spec in "$@"; do
    IFS=: read -r name tree flavour trace backend layers arch <<<"$spec"
    if [ "$tree" = wheel ]; then path="/root/wsite:$SITE:$SITE/nvidia_cutlass_dsl/dsl_packages:$ws"; else path=$(tree_path "$tree"); fi
    # the engine reads its own stderr file at the end (--log: the backend lines)
    # shellcheck disable=SC2094
    (cd "$ws" && env "${served_env[@]}" PYTHONPATH="$path" timeout "$limit" python3 -P -m \
      benchmarks.served.engine --name "$name" --tree "$tree" --flavour "$flavour" \
      --turns "$dir" --index "$i" --count "$n" ${trace:+--trace --trace-keep "$R/served/traces"} \
      --moe-backend "${backend:-auto}" \
      ${layers:+--layers "$layers"} ${arch:+--arch "$arch"} --gpu-mib "$gpu_mib" \
      --wait-s $((limit - 60)) --log "$R/served/$name.log" --out "$R/served/$name.json" \
      >"$R/served/$name.log" 2>&1) &
    pids+=($!)
    i=$((i + 1))
  done
  # a process that ended (finished, crashed or killed) is marked gone, so that the rest of
  # the wave never waits for it
  local left=$n j
  local -A marked=()
  while [ "$left" -gt 0 ]; do
    sleep 2
    for j in "${!pids[@]}"; do
      if [ -z "${marked[$j]:-}" ] && ! kill -0 "${pids[$j]}" 2>/dev/null; then
        marked[$j]=1
        left=$((left - 1))
        echo "engine $j of wave $wave ended at ${SECONDS}s"
        (cd "$ws" && PYTHONPATH="$ws" python3 -P -m benchmarks.served.turns "$dir" \
          --index "$j" --count "$n")
      fi
    done
  done
  wait "${pids[@]}"
  for spec in "$@"; do
    name=${spec%%:*}
    grep -h "^{" "$R/served/$name.log" 2>/dev/null | tail -n 1 | cut -c1-300
    grep -h "Error\|error:" "$R/served/$name.log" 2>/dev/null | tail -n 3 | cut -c1-300
  done
  echo "=== wave $wave done at ${SECONDS}s"
}
