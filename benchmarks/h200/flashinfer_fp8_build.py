"""Reduced FlashInfer SM90 CUTLASS fused-MoE module: FP8 x FP8 -> bf16 only.

Why: FlashInfer 0.6.8.post1 JIT-builds its SM90 MoE module (``fused_moe_90``) from 181 CUDA
sources covering every dtype pair; the H200 host's 16 cores built 76 of them in 18 min
(``../shared/gpu/README.md``), so the full build cannot finish in one hold. Per-tensor FP8 MoE
with bf16 activations needs only the ``Sm90, __nv_fp8_e4m3, __nv_fp8_e4m3, __nv_bfloat16``
TMA warp-specialised grouped GEMMs. This script asks FlashInfer itself for the module's spec
(``gen_cutlass_fused_moe_sm90_module``), keeps the hand-written sources and, of the generated
instantiation files, only those FP8 x FP8 -> bf16 blocks, and of the per-dtype-pair
``moe_gemm_kernels_*.cu`` only ``fp8_fp8``, and compiles the objects on this CPU
machine (``FLASHINFER_CUDA_ARCH_LIST=9.0a``, nvcc 13.0). The link happens on the host
(``flashinfer_fp8_link.sh``), which has libcuda and libnvrtc; launchers of the dropped dtypes stay
undefined and bind lazily (tvm-ffi opens modules with RTLD_LAZY), so calling one of them would
fail, which the per-tensor FP8 benchmark never does.

Usage (from the repository root; flashinfer's wheel unpacked and on PYTHONPATH, as
``flashinfer_fp8_prepare.sh`` runs it)::

    PYTHONPATH=/path/to/unpacked/wheel python benchmarks/h200/flashinfer_fp8_build.py --ws DIR -j 2

Writes DIR/objects/*.o, DIR/manifest.txt and, for the transfer, DIR/pf/fi-objects.tar.xz
(split into .pieceNN files of at most 56 MiB when larger; send DIR/pf as one staged part and run
``flashinfer_fp8_link.sh`` on the host). Raises SystemExit when nvcc or ninja is missing.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

KEEP = "Sm90, __nv_fp8_e4m3, __nv_fp8_e4m3, __nv_bfloat16"
# One "#if ... #endif" block per instantiation in FlashInfer's generated files.
BLOCK = re.compile(r"#if [^\n]*\n(.*?)#endif\n", re.S)


def reduce_generated(path: Path) -> bool:
    """Rewrite one generated .cu keeping only the FP8 x FP8 -> bf16 Sm90 blocks.

    Returns False (file unused) when it holds none.
    """
    text = path.read_text()
    blocks = BLOCK.findall(text)
    kept = [b for b in blocks if KEEP in " ".join(b.split())]
    if not kept:
        return False
    head = text[: text.index("#if ")]
    tail = text[text.rindex("#endif\n") + len("#endif\n") :]
    path.write_text(head + "".join(f"#if 1\n{b}#endif\n" for b in kept) + tail)
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ws", type=Path, required=True, help="work folder")
    ap.add_argument("-j", type=int, default=os.cpu_count() or 1)
    ap.add_argument(
        "--include",
        type=Path,
        action="append",
        default=[],
        help="extra header folder (cuBLAS, cuRAND, NVRTC headers from the nvidia-* wheels "
        "when the local CUDA toolkit lacks them)",
    )
    args = ap.parse_args()
    for tool in ("nvcc", "ninja"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} not found on PATH; it is needed to compile the module")
    os.environ.setdefault("CUDA_HOME", "/usr/local/cuda")
    os.environ["FLASHINFER_CUDA_ARCH_LIST"] = "9.0a"
    os.environ["FLASHINFER_WORKSPACE_BASE"] = str(args.ws.resolve())
    try:
        from flashinfer.jit import fused_moe  # noqa: PLC0415  (needs the env above)
    except ImportError as e:
        raise SystemExit(
            f"flashinfer is not importable ({e}); put the unpacked wheel on PYTHONPATH "
            "(benchmarks/h200/flashinfer_fp8_prepare.sh does)"
        ) from e

    spec = fused_moe.gen_cutlass_fused_moe_sm90_module()
    spec.write_ninja()
    ninja = spec.ninja_path.read_text()
    head, _, body = ninja.partition("\nbuild ")
    extra = "".join(f" $\n    -isystem {inc.resolve()}" for inc in args.include)
    head = head.replace("\ncflags = $common_cflags", f"{extra}\ncflags = $common_cflags", 1)
    keep_lines, objects = [], []
    for line in ("build " + body).splitlines():
        if not line.startswith("build ") or ": link " in line:
            continue
        src = Path(line.rsplit(" ", 1)[1])
        if src.name.endswith(".generated.cu") and not reduce_generated(src):
            continue
        # moe_gemm_kernels_<act>_<weight>.cu each instantiate MoeGemmRunner for one dtype
        # pair; only FP8 x FP8 is called.
        if src.name.startswith("moe_gemm_kernels_") and src.name != "moe_gemm_kernels_fp8_fp8.cu":
            continue
        keep_lines.append(line)
        objects.append(line.split(":", 1)[0][len("build ") :])
    spec.ninja_path.write_text(head + "\n" + "\n".join(keep_lines) + "\n")
    print(f"{len(objects)} of {len(spec.sources)} sources kept", flush=True)
    subprocess.run(["ninja", "-C", str(spec.build_dir), f"-j{args.j}"], check=True)
    out = args.ws / "objects"
    out.mkdir(exist_ok=True)
    for obj in objects:
        shutil.copy2(obj, out / Path(obj).name)
    (args.ws / "manifest.txt").write_text("\n".join(Path(o).name for o in objects) + "\n")
    pack(args.ws)
    return 0


PIECE = 56 * 1024 * 1024  # one staged part of ../shared/gpu carries at most 56 MiB


def pack(ws: Path) -> None:
    """ws/objects + manifest.txt -> ws/pf/fi-objects.tar.xz[.pieceNN]."""
    pf = ws / "pf"
    shutil.rmtree(pf, ignore_errors=True)
    pf.mkdir()
    tar = pf / "fi-objects.tar.xz"
    with tarfile.open(tar, "w:xz") as t:
        t.add(ws / "manifest.txt", "manifest.txt")
        t.add(ws / "objects", "objects")
    data = tar.read_bytes()
    if len(data) > PIECE:
        tar.unlink()
        for n, off in enumerate(range(0, len(data), PIECE)):
            (pf / f"fi-objects.tar.xz.piece{n:02d}").write_bytes(data[off : off + PIECE])
    print(f"packed {len(data) / 2**20:.1f} MiB into {pf}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
