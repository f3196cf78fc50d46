#!/usr/bin/env python3
"""Pack vLLM trees for a GPU host that has torch+triton but no package index.

(The team's recipe of 2026-11-29, kept in the repository since the move to v0.34.0: the
release kernels are every top-level ``vllm/*.so`` of the pinned wheel, whatever the release
names them (v0.21.0: _C, _moe_C, ...; v0.34.0: _C_stable_libtorch, _moe_C_stable_libtorch,
...), and the wheels folder may hold a torch and Triton of their own, which assemble.sh
installs into /root/site ahead of the host's.)

The GPU host receives at most 64 MiB per transfer, so the payload is cut into
parts p1..pN under OUT (an ignored folder of your repo).  Send one part per transfer,
copy it to /root/stage on the host, and after the last part run
    bash /root/stage/p1/assemble.sh
which prints the PYTHONPATH to export.  See README.md beside this file.

Usage:
  stage.py --src patched=VLLM_CHECKOUT [--src base=OTHER_CHECKOUT ...] --wheel VLLM_RELEASE_WHEEL
           [--wheels DIR] --out .gpu [--attention] [--deepgemm]
Each --src NAME=DIR becomes /root/vllm-NAME on the host, every one with the release kernels.
"""

import argparse
import gzip
import io
import os
import re
import shutil
import sys
import tarfile
import zipfile
from pathlib import Path

PART = 56 * 1024 * 1024
# the top-level kernels; the attention and DeepGEMM ones only when asked for
TOP_SO = re.compile(r"^vllm/[^/]+\.so$")
SKIP_SO = ("vllm/_flashmla_C.abi3.so", "vllm/_flashmla_extension_C.abi3.so")
ATTN_SO = [
    "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so",
    "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so",
    "vllm/_flashmla_C.abi3.so",
    "vllm/_flashmla_extension_C.abi3.so",
]
DG_SO = ["vllm/third_party/deep_gemm/_C.cpython-312-x86_64-linux-gnu.so"]


def _keep(ti):
    """Tar filter: no caches or git data, no kernels (they come from the wheel), no large
    built files (v0.34.0's vllm-rs binary, which an editable install copies into the tree)."""
    parts = ti.name.split("/")
    if "__pycache__" in parts or ".git" in parts or ti.name.endswith(".so"):
        return None
    return None if ti.size > 4 * 2**20 else ti


def pack_src(src):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
        # benchmarks/kernels: vLLM's own kernel benchmarks (a PR's validation command)
        for top in ("vllm", "tests", "benchmarks/kernels", "pyproject.toml", "setup.py"):
            p = os.path.join(src, top)
            if os.path.exists(p):
                tar.add(p, arcname=top, filter=_keep)
    return buf.getvalue()


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--src",
        required=True,
        action="append",
        metavar="NAME=DIR",
        help="a vLLM checkout holding vllm/ and tests/; repeat for base and patched",
    )
    ap.add_argument("--wheel", required=True, help="the vLLM release wheel of the pinned version")
    ap.add_argument(
        "--wheels", help="folder of extra cp312 wheels for the host (see device-wheels.txt)"
    )
    ap.add_argument("--out", required=True, help="output folder, ignored by git, e.g. .gpu")
    ap.add_argument(
        "--attention",
        action="store_true",
        help="also ship flash-attn/flashmla kernels (for serving)",
    )
    ap.add_argument("--deepgemm", action="store_true", help="also ship DeepGEMM")
    ap.add_argument(
        "--sources-only",
        action="store_true",
        help="write only the source trees, as part OUT/ps, to re-send after a change",
    )
    a = ap.parse_args()

    blobs = []
    for spec in a.src:
        name, sep, path = spec.partition("=")
        if not sep or not name.isidentifier() or not os.path.isdir(os.path.join(path, "vllm")):
            sys.exit(f"stage: --src wants NAME=DIR with DIR/vllm present, got {spec!r}")
        blobs.append((f"src-{name}.tar.gz", pack_src(path)))
    if a.sources_only:
        d = os.path.join(a.out, "ps")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        for name, data in blobs:
            Path(d, name).write_bytes(data)
        print(
            f"ps: {sum(len(b) for _, b in blobs) / 2**20:5.1f} MiB; send it like the other parts, "
            "then run assemble.sh again"
        )
        return
    with zipfile.ZipFile(a.wheel) as z:
        have = set(z.namelist())
        base_so = sorted(n for n in have if TOP_SO.match(n) and n not in SKIP_SO)
        attn = [n for n in ATTN_SO if n in have] + [n for n in SKIP_SO if n in have]
        dg = [n for n in have if n.startswith("vllm/third_party/deep_gemm/") and n.endswith(".so")]
        names = base_so + (attn if a.attention else []) + (dg if a.deepgemm else [])
        for n in names:
            if n not in have:
                sys.exit(f"stage: {n} is not in {a.wheel}")
            blobs.append((n.replace("/", "__") + ".gz", gzip.compress(z.read(n), compresslevel=6)))
        version = next(
            n.split("/")[0][len("vllm-") : -len(".dist-info")]
            for n in have
            if n.endswith(".dist-info/METADATA")
        )
        # Files the build puts into the wheel beside the kernels (vllm/_version.py, the Python
        # sides of vllm_flash_attn and flashmla, deep_gemm's headers, ...). An editable install
        # copies them into its tree, a plain checkout of the pin lacks them, and without them
        # the engine does not start. assemble.sh adds them to every tree without overwriting
        # a file the tree has, so no patched file is replaced.
        extra = io.BytesIO()
        with tarfile.open(fileobj=extra, mode="w:gz", compresslevel=6) as tar:
            for n in sorted(have):
                big = z.getinfo(n).file_size > 4 * 2**20  # e.g. v0.34.0's vllm/vllm-rs binary
                if n.startswith("vllm/") and not n.endswith((".so", "/")) and not big:
                    data = z.read(n)
                    ti = tarfile.TarInfo(n)
                    ti.size = len(data)
                    tar.addfile(ti, io.BytesIO(data))
        blobs.append(("wheelpy.tar.gz", extra.getvalue()))
    if a.wheels:
        for w in sorted(os.listdir(a.wheels)):
            if w.endswith(".whl"):
                blobs.append((w, Path(a.wheels, w).read_bytes()))

    # first-fit into parts; a blob larger than a part is split into numbered pieces
    pieces = []
    for name, data in blobs:
        if len(data) <= PART:
            pieces.append((name, data))
        else:
            for i in range(0, len(data), PART):
                pieces.append((f"{name}.piece{i // PART:02d}", data[i : i + PART]))
    parts = []
    for name, data in sorted(pieces, key=lambda p: -len(p[1])):
        for part in parts:
            if part["size"] + len(data) <= PART:
                break
        else:
            part = {"size": 0, "files": []}
            parts.append(part)
        part["files"].append((name, data))
        part["size"] += len(data)

    # the last stage's parts and sources go; w1 (the patched wheel) and pf (FlashInfer's
    # module), made by other tools, stay
    for old in Path(a.out).glob("p*"):
        if re.fullmatch(r"p[0-9]+|ps", old.name):
            shutil.rmtree(old)
    kept = sorted(d.name for d in Path(a.out).glob("*") if d.is_dir())
    if kept:
        print(f"kept in {a.out}: {', '.join(kept)}")
    for i, part in enumerate(parts, 1):
        d = os.path.join(a.out, f"p{i}")
        os.makedirs(d)
        for name, data in part["files"]:
            Path(d, name).write_bytes(data)
    here = os.path.dirname(os.path.abspath(__file__))
    shutil.copy(os.path.join(here, "assemble.sh"), os.path.join(a.out, "p1", "assemble.sh"))
    Path(a.out, "p1", "VERSION").write_text(version + "\n")
    for i, part in enumerate(parts, 1):
        print(f"p{i}: {part['size'] / 2**20:5.1f} MiB  {', '.join(n for n, _ in part['files'])}")
    print(
        f"{len(parts)} parts; send each as {a.out}/pK and run "
        f"'mkdir -p /root/stage && cp -r {a.out}/pK /root/stage/' on the host"
    )


if __name__ == "__main__":
    main()
