#!/usr/bin/env bash
# CPU side: the one-block dynamic FP8 quantization (patches/candidates/fp8-quant-one-block.patch,
# a change to v0.34.0's csrc/quantization/w8a8/fp8/common.cu) built as a library of its own,
# since the release wheel cannot be rebuilt on the GPU host: nvcc (CUDA 13, sm_90a) compiles the
# patched common.cu at the pin against torch 2.14.0's headers (from the wheel that
# `stage.sh --download` fetched) and cuBLAS's (torch_utils.h includes them), with
# fp8_one_block_bind.cpp registering torch.ops._vseries_fp8.dynamic_scaled_fp8_quant.
# Part .gpu/stage/pq (fp8_one_block.so, and fp8_control.so: the pin's own common.cu through the
# same library, the control for its host cost); moved.sh's `quant` phase with
# QUANT_CAND=patches/candidates/fp8-quant-one-block.patch uses it.
#   benchmarks/h200/stage_quant_cuda.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/_venv.sh
cand=patches/candidates/fp8-quant-one-block.patch
shopt -s nullglob
torch_whl=(.gpu/wheels-v0.34.0/torch-2.14.0-*.whl)
((${#torch_whl[@]})) ||
  { echo "stage_quant_cuda: no torch 2.14.0 wheel in .gpu/wheels-v0.34.0: run benchmarks/h200/stage.sh --download first" >&2; exit 2; }
command -v nvcc >/dev/null ||
  { echo "stage_quant_cuda: no nvcc on PATH (CUDA 13 builds for the host's torch 2.14.0+cu130)" >&2; exit 2; }
pin=$(python -c 'from vseries import pin; print(pin.load().commit)')
tmp=$(mktemp -d)
trap 'git -C vllm worktree remove --force "$tmp/v" >/dev/null 2>&1; rm -rf "$tmp"' EXIT
git -C vllm worktree add -q --detach "$tmp/v" "$pin"
# the headers, and the libraries the op links against as torch's own extensions do (the host's
# torch has them loaded when it loads this one)
libs=(c10 c10_cuda torch torch_cpu torch_cuda)
members=('torch/include/*')
for l in "${libs[@]}"; do members+=("torch/lib/lib$l.so"); done
unzip -q "${torch_whl[0]}" "${members[@]}" -d "$tmp/torch"
python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_27_x86_64 -d "$tmp/w" nvidia-cublas==13.1.1.3
unzip -q "$tmp"/w/nvidia_cublas-*.whl 'nvidia/cu13/include/*' -d "$tmp/cublas"
inc=(-I "$tmp/v/csrc" -I "$tmp/cublas/nvidia/cu13/include" -I "$tmp/torch/torch/include")
# as vLLM's _C_stable_libtorch (ENABLE_FP8: the FP8 conversions of quantization/utils.cuh)
defs=(-DTORCH_TARGET_VERSION=0x020B000000000000ULL -DUSE_CUDA -DENABLE_FP8)
g++ -std=c++17 -O2 -fPIC "${defs[@]}" -I "$tmp/torch/torch/include" -I /usr/local/cuda/include \
  -c benchmarks/h200/fp8_one_block_bind.cpp -o "$tmp/bind.o"
rm -rf .gpu/stage/pq && mkdir -p .gpu/stage/pq
# build NAME: common.cu as the worktree holds it into .gpu/stage/pq/NAME.so; every symbol of
# the op resolved at link time (-z defs) in torch's libraries, and the CUDA runtime torch has
# loaded (shared, not a static copy of its own)
build() {
  nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Xcompiler -fPIC \
    --expt-relaxed-constexpr --expt-extended-lambda "${defs[@]}" "${inc[@]}" -Xptxas -v \
    -c "$tmp/v/csrc/quantization/w8a8/fp8/common.cu" -o "$tmp/common.o" 2>"$tmp/ptxas.txt" ||
    { cat "$tmp/ptxas.txt" >&2; exit 1; }
  # registers and spills of each one-block kernel (ptxas's lines after its entry)
  awk '/Compiling entry function/ {keep = /one_block/} keep && /Function properties|spill|registers/' "$tmp/ptxas.txt" |
    sed 's/^ptxas info *: //; s/^ *//' | tee ".gpu/stage/pq/$1-ptxas.txt"
  nvcc -shared -cudart shared -o ".gpu/stage/pq/$1.so" "$tmp/common.o" "$tmp/bind.o" \
    -L "$tmp/torch/torch/lib" "${libs[@]/#/-l}" -Xlinker -z -Xlinker defs \
    -Xlinker --allow-shlib-undefined
}
# the control: v0.34.0's own common.cu through the same library (what the library's loading
# and registration cost, apart from the change)
build fp8_control
git -C "$tmp/v" apply "$PWD/$cand" ||
  { echo "stage_quant_cuda: $cand does not apply at the pin $pin" >&2; exit 1; }
build fp8_one_block
echo "pq: fp8_one_block.so from $cand and fp8_control.so (the pin's own) at $(git -C vllm rev-parse --short "$pin"), $(du -sk .gpu/stage/pq | cut -f1) KiB"
