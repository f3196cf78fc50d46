#!/usr/bin/env bash
# Build the reduced FlashInfer FP8 MoE module on this CPU machine, from nothing but the package
# index: the part `.gpu/fi/pf` that the static-scale end-to-end run carries to the H200 (the
# base's automatic backend for per-tensor FP8 there is FLASHINFER_CUTLASS; flashinfer_fp8_link.sh
# links the objects on the host).
#
#   benchmarks/h200/flashinfer_fp8_prepare.sh [WORK]      # default WORK=.gpu/fi
#
# Downloads (no dependencies, into WORK/dl, reused when present): FlashInfer's wheel at the
# version of the release wheel's list, unpacked to WORK/wheel; nvidia-ml-py, which FlashInfer's
# JIT imports, into WORK/pydeps; the cuBLAS, cuRAND and NVRTC header wheels of nvcc's CUDA
# release (this machine's toolkit lacks those headers), unpacked to WORK/hdr. Then
# flashinfer_fp8_build.py compiles the objects (-j nproc; 2 cores: about 18 min) into WORK/pf.
# Needs: nvcc (CUDA 13) and ninja on PATH, .venv from scripts/setup.sh (torch).
# Environment: FI_VERSION (default 0.6.8.post1, FlashInfer of vLLM 0.21.0's wheel list),
# PYTHON (default .venv/bin/python).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
work=${1:-.gpu/fi}
py=${PYTHON:-.venv/bin/python}
fi_version=${FI_VERSION:-0.6.8.post1}

die() { echo "flashinfer_fp8_prepare: $*" >&2; exit 1; }
[ -x "$py" ] || die "$py not found: run scripts/setup.sh first (or set PYTHON)"
command -v nvcc >/dev/null || die "nvcc not on PATH: the objects are compiled with CUDA 13's nvcc"
command -v ninja >/dev/null || die "ninja not on PATH: install it (apt-get install ninja-build, or pip install ninja)"
# the header wheels must match nvcc's release (13.0 -> cuBLAS 13.0.*, NVRTC 13.0.*, cuRAND 10.4.0.*)
cuda=$(nvcc --version | sed -n 's/.*release \([0-9]*\)\.\([0-9]*\).*/\1.\2/p')
[ "${cuda%%.*}" = 13 ] || die "nvcc is CUDA '$cuda'; FlashInfer's SM90 MoE objects for the host's torch need CUDA 13"
curand_minor=${cuda#13.}

mkdir -p "$work/dl"
"$py" -m pip download --quiet --no-deps --only-binary=:all: -d "$work/dl" \
  "flashinfer-python==$fi_version" nvidia-ml-py "nvidia-cublas==$cuda.*" \
  "nvidia-cuda-nvrtc==$cuda.*" "nvidia-curand==10.4.$curand_minor.*" ||
  die "download failed (needs the package index; nothing was built)"

unpack() {  # unpack <wheel glob> <folder> [only members under a folder of this name]
  local whl
  whl=$(find "$work/dl" -maxdepth 1 -name "$1" | sort | tail -n 1)
  [ -n "$whl" ] || die "no wheel $1 in $work/dl"
  "$py" - "$whl" "$2" "${3:-}" <<'PY'
import sys, zipfile
whl, dest, only = sys.argv[1:]
z = zipfile.ZipFile(whl)
z.extractall(dest, [n for n in z.namelist() if not only or f"/{only}/" in n])
PY
}
rm -rf "$work/wheel" "$work/pydeps" "$work/hdr"
unpack "flashinfer_python-$fi_version-*.whl" "$work/wheel"
unpack "nvidia_ml_py-*.whl" "$work/pydeps"
for w in "nvidia_cublas-*.whl" "nvidia_cuda_nvrtc-*.whl" "nvidia_curand-*.whl"; do
  unpack "$w" "$work/hdr" include  # headers only (cuBLAS's wheel is ~0.5 GB of libraries)
done
inc=$(find "$work/hdr" -type f -name cublas_v2.h -printf '%h\n' | head -n 1)
[ -n "$inc" ] || die "cublas_v2.h not found in the header wheels under $work/hdr"

echo "building FlashInfer $fi_version FP8 x FP8 -> bf16 SM90 MoE objects, CUDA $cuda, headers $inc"
PYTHONPATH="$work/wheel:$work/pydeps${PYTHONPATH:+:$PYTHONPATH}" \
  "$py" benchmarks/h200/flashinfer_fp8_build.py --ws "$work" \
  -j "$(nproc)" --include "$inc"
ls -l "$work/pf"
