#!/usr/bin/env bash
# GPU host: link the reduced FlashInfer SM90 fused-MoE module (FP8 x FP8 -> bf16 only) from the
# objects that benchmarks/h200/flashinfer_fp8_build.py compiled on a CPU machine, and put it in
# FlashInfer's AOT folder, where FlashInfer loads it instead of JIT-building fused_moe_90.
#   bash benchmarks/h200/flashinfer_fp8_link.sh PART_DIR [SITE]
# PART_DIR holds fi-objects.tar.xz (possibly as .pieceNN files, joined in order); SITE is where
# assemble.sh installed the wheels (flashinfer-python among them), /root/site by default.
set -euo pipefail
part=${1:?usage: flashinfer_fp8_link.sh PART_DIR [SITE]}
site=${2:-/root/site}
work=$(mktemp -d)
cat "$part"/fi-objects.tar.xz* | tar xJf - -C "$work"
aot="$site/flashinfer/data/aot/fused_moe_90"
[ -d "$site/flashinfer" ] || { echo "flashinfer is not installed in $site (stage its wheel)" >&2; exit 1; }
mkdir -p "$aot"
# libcudart, libcuda and libnvrtc: the toolkit's if it has them, else the driver's libcuda
# and the nvidia-* wheels torch brings.
find_lib() {
  local name=$1 d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib64/stubs /usr/lib/x86_64-linux-gnu \
    $(python3 -c 'import site,glob; print(" ".join(glob.glob(site.getsitepackages()[0] + "/nvidia/*/lib")))'); do
    for f in "$d/$name.so" "$d"/"$name".so.[0-9]*; do
      [ -e "$f" ] && { echo "$f"; return; }
    done
  done
  echo "cannot find $name" >&2
  return 1
}
libs=()
for l in libcudart libcuda libnvrtc; do
  f=$(find_lib "$l")
  libs+=("$f" "-Wl,-rpath,$(dirname "$f")")
done
echo "linking $(wc -l <"$work/manifest.txt") objects with ${libs[*]}"
# shellcheck disable=SC2046  # one object per line, no spaces in names
c++ $(sed "s|^|$work/objects/|" "$work/manifest.txt") -shared "${libs[@]}" -o "$aot/fused_moe_90.so"
ls -la "$aot/fused_moe_90.so"
rm -rf "$work"
