#!/usr/bin/env python3
"""Carry the patched release wheel (``scripts/wheel.sh``) to a GPU host in one part.

The wheel is the release wheel with the series' Python files swapped in: 190 of its 240 MB are
the release kernels, which the staged parts already carry (``stage.py``: the top-level kernels
and, with ``--attention``, the attention ones). ``strip`` writes the wheel without those
members (``wheel-rest.zip``) and its file name (``NAME``); ``restore``, on the host, puts the
staged kernels back and checks every member of the result against the wheel's own ``RECORD``
(sha256), so what is installed is what ``scripts/wheel.sh`` built, file for file.

    python3 benchmarks/h200/wheel_parts.py strip out/wheel/v0.34.0/vllm-*.whl \\
        --stage .gpu/stage --out .gpu/w1
    python3 benchmarks/h200/wheel_parts.py restore /root/stage/w1 \\
        --kernels /root/stage/kernels --out /tmp     # prints the wheel's path
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import re
import sys
import zipfile
from pathlib import Path

STAGED = re.compile(r"^(?P<name>.+\.so)\.gz(\.piece\d\d)?$")


def staged_kernels(stage: Path) -> set[str]:
    """Wheel member names of the kernels the staged parts carry (``vllm__x.so.gz`` ->
    ``vllm/x.so``)."""
    out = set()
    for p in stage.glob("p*/*"):
        m = STAGED.match(p.name)
        if m:
            out.add(m.group("name").replace("__", "/"))
    return out


def strip(wheel: Path, stage: Path, out: Path) -> None:
    staged = staged_kernels(stage)
    out.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as z, zipfile.ZipFile(out / "wheel-rest.zip", "w") as rest:
        names = z.namelist()
        missing = sorted(n for n in staged if n not in names)
        if missing:
            sys.exit(f"wheel_parts: staged kernels not in {wheel.name}: {missing}")
        for info in z.infolist():
            if info.filename not in staged:
                rest.writestr(info, z.read(info.filename), compress_type=info.compress_type)
    (out / "NAME").write_text(wheel.name + "\n")
    size = (out / "wheel-rest.zip").stat().st_size
    print(f"{out}/wheel-rest.zip: {size / 2**20:.1f} MiB, {len(staged)} kernels left to the parts")


def _record(z: zipfile.ZipFile) -> dict[str, str]:
    rec = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
    rows = csv.reader(io.StringIO(z.read(rec).decode()))
    return {r[0]: r[1] for r in rows if r and r[1]}


def _digest(data: bytes) -> str:
    d = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + d.decode()


def restore(part: Path, kernels: Path, out: Path) -> Path:
    name = (part / "NAME").read_text().strip()
    wheel = out / name
    with zipfile.ZipFile(part / "wheel-rest.zip") as rest:
        record = _record(rest)
        have = set(rest.namelist())
        put_back = sorted(n for n in record if n not in have)
        with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
            for info in rest.infolist():
                z.writestr(info, rest.read(info.filename), compress_type=info.compress_type)
            for n in put_back:
                data = (kernels / n).read_bytes()
                if _digest(data) != record[n]:
                    sys.exit(f"wheel_parts: {n} differs from the wheel's RECORD")
                z.writestr(n, data)
    with zipfile.ZipFile(wheel) as z:
        bad = [n for n, h in _record(z).items() if _digest(z.read(n)) != h]
    if bad:
        sys.exit(f"wheel_parts: {len(bad)} members differ from RECORD, e.g. {bad[:3]}")
    print(
        f"{wheel}: {len(put_back)} kernels put back; every member matches RECORD", file=sys.stderr
    )
    return wheel


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("strip", help="the wheel without the staged kernels")
    s.add_argument("wheel", type=Path)
    s.add_argument("--stage", type=Path, required=True, help="stage.py's output folder")
    s.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("restore", help="the wheel again, from a part and the staged kernels")
    r.add_argument("part", type=Path)
    r.add_argument("--kernels", type=Path, required=True, help="assemble.sh's kernels folder")
    r.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    if a.cmd == "strip":
        strip(a.wheel, a.stage, a.out)
    else:
        print(restore(a.part, a.kernels, a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
