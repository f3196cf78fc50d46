#!/usr/bin/env bash
# CPU side: each PR branch alone (made by scripts/prs.sh, named in out/prs/NNNN/branch.txt) as
# the tree prNNNN for moved.sh's `branches` phase, which runs the patch's Test Plan on it:
# one part each, .gpu/stage/pbNNNN (sources only; the kernels come with the other parts).
#   benchmarks/h200/stage_branches.sh          # after scripts/prs.sh and stage.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/_venv.sh
shopt -s nullglob
files=(out/prs/*/branch.txt)
((${#files[@]})) || { echo "stage_branches: no out/prs/*/branch.txt: run scripts/prs.sh first" >&2; exit 2; }
wheel=$(python -c 'from vseries import fetch, pin; p = pin.load(); print(fetch.fetch(p.package, p.wheel))')
for f in "${files[@]}"; do
  n=$(basename "$(dirname "$f")")
  br=$(cat "$f")
  git -C vllm rev-parse -q --verify "refs/heads/$br" >/dev/null ||
    { echo "stage_branches: vllm/ has no branch $br: run scripts/prs.sh again" >&2; exit 2; }
  wt=$PWD/.gpu/branches/$n
  # a folder removed by hand leaves git's record of the worktree, which `add` refuses: prune it
  git -C vllm worktree remove --force "$wt" 2>/dev/null || { rm -rf "$wt" && git -C vllm worktree prune; }
  git -C vllm worktree add -q --detach "$wt" "$br"
  tmp=$(mktemp -d)
  python benchmarks/h200/stage.py --sources-only --src "pr$n=$wt" --wheel "$wheel" --out "$tmp" >/dev/null
  rm -rf ".gpu/stage/pb$n" && mkdir -p .gpu/stage && mv "$tmp/ps" ".gpu/stage/pb$n" && rm -rf "$tmp"
  echo "pb$n: $br at $(git -C "$wt" rev-parse --short HEAD), $(du -sm ".gpu/stage/pb$n" | cut -f1) MiB"
done
