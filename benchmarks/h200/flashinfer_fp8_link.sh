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
so="$aot/fused_moe_90.so"
link() {
  # shellcheck disable=SC2046  # one object per line, no spaces in names
  c++ $(sed "s|^|$work/objects/|" "$work/manifest.txt") "$@" -shared "${libs[@]}" -o "$so"
}
link
# tvm-ffi opens modules with RTLD_NOW, so every symbol must resolve at load: the launchers and
# runners of the dtype pairs left out of the reduced build get stubs that throw when called.
nm -D --undefined-only "$so" | awk '$2 ~ /^_ZN12tensorrt_llm/ {print $2}' >"$work/missing.txt"
echo "$(wc -l <"$work/missing.txt") symbols of left-out dtype pairs get throwing stubs"
{
  echo '#include <stdexcept>'
  echo '#include <string>'
  echo '[[noreturn]] static void vseries_left_out(const char* sym) {'
  echo '  throw std::runtime_error(std::string("not in the reduced FP8-only fused_moe_90 build: ") + sym);'
  echo '}'
  n=0
  while read -r sym; do
    echo "void vseries_stub_$n() __asm__(\"$sym\");"
    echo "void vseries_stub_$n() { vseries_left_out(\"$sym\"); }"
    n=$((n + 1))
  done <"$work/missing.txt"
} >"$work/stubs.cpp"
c++ -O1 -fPIC -c "$work/stubs.cpp" -o "$work/stubs.o"
link "$work/stubs.o"
left=$(nm -D --undefined-only "$so" | awk '$2 ~ /^_ZN12tensorrt_llm/' | wc -l)
[ "$left" -eq 0 ] || { echo "still undefined after stubbing: $left" >&2; exit 1; }
ls -la "$so"
rm -rf "$work"
