#!/usr/bin/env bash
# CPU side: the wheels of benchmarks/h200/host-wheels-tune.txt (Ray for vLLM's fused-MoE tuner,
# moved.sh's `tune` phase) for the GPU host's Python 3.12, downloaded once into
# .gpu/wheels-tune, packed as one tar cut into parts of at most 48 MiB: .gpu/stage/pt1, pt2, ...
# (one device run each, like the other parts). The host joins and installs them into /root/tsite.
#   benchmarks/h200/stage_tune.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/_venv.sh
list=benchmarks/h200/host-wheels-tune.txt
wheels=.gpu/wheels-tune
python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 --platform any -d "$wheels" -r "$list"
rm -rf .gpu/stage/pt[0-9]* && mkdir -p .gpu/stage
tmp=$(mktemp -d)
tar cf - -C "$wheels" . | split -b 48M -d -a 1 - "$tmp/tune.tar."
for f in "$tmp"/tune.tar.*; do
  i=$((${f##*.} + 1))
  mkdir -p ".gpu/stage/pt$i" && mv "$f" ".gpu/stage/pt$i/"
  echo "pt$i: $(du -sm ".gpu/stage/pt$i" | cut -f1) MiB"
done
rm -rf "$tmp"
