"""The GPUs as ``nvidia-smi`` reports them: the annex's one wrapper of it.

Every reader degrades on a host without the tool or a driver (the CPU tests, a dry run):
``visible`` gives ["0"], ``total_bytes`` an H200's memory, ``clocks`` an {"error": ...} record,
``clocks_line`` "".
"""

import os
import subprocess
from collections.abc import Sequence

H200_BYTES = 143771 * (1 << 20)  # nvidia-smi memory.total of an H200 SXM (MiB)
CLOCK_FIELDS = ("index", "clocks.sm", "clocks.mem", "temperature.gpu", "power.draw")


class SmiError(Exception):
    """nvidia-smi is missing, timed out or failed; the message says which."""


def query(fields: Sequence[str], units: bool = False) -> str:
    """``nvidia-smi --query-gpu=FIELDS --format=csv,noheader[,nounits]``: one CSV line per GPU.

    Raises:
        SmiError: the tool is missing, took over 20 s, or exited non-zero.
    """
    fmt = "csv,noheader" if units else "csv,noheader,nounits"
    cmd = ["nvidia-smi", f"--query-gpu={','.join(fields)}", f"--format={fmt}"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as e:
        raise SmiError(repr(e)) from e
    if p.returncode != 0:
        raise SmiError((p.stdout + p.stderr).strip()[:300])
    return p.stdout


def visible() -> list[str]:
    """Visible GPU indices: CUDA_VISIBLE_DEVICES when set, else nvidia-smi's, else ["0"]."""
    if os.environ.get("CUDA_VISIBLE_DEVICES"):
        return [g for g in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if g]
    try:
        ids = [x.strip() for x in query(["index"]).splitlines() if x.strip()]
    except SmiError:
        return ["0"]
    return ids or ["0"]


def total_bytes() -> int:
    """memory.total of the first GPU (bytes), or an H200's when nvidia-smi cannot say."""
    try:
        return int(float(query(["memory.total"]).split()[0])) * (1 << 20)
    except (SmiError, ValueError, IndexError):
        return H200_BYTES


def clocks() -> list[dict] | dict:
    """Per GPU: SM and memory clock (MHz), temperature (C), power (W); {"error": ...} when
    nvidia-smi cannot be read."""
    try:
        return parse_clocks(query(CLOCK_FIELDS))
    except SmiError as e:
        return {"error": str(e)}


def parse_clocks(text: str) -> list[dict]:
    """Rows of ``query(CLOCK_FIELDS)`` as dicts of numbers (None for "[N/A]"), the field names
    with "_" for "." (``clocks_sm``)."""
    rows = []
    for line in text.splitlines():
        vals = [v.strip() for v in line.split(",")]
        if len(vals) != len(CLOCK_FIELDS):
            continue
        row = {}
        for k, v in zip(CLOCK_FIELDS, vals, strict=True):
            try:
                row[k.replace(".", "_")] = float(v)
            except ValueError:
                row[k.replace(".", "_")] = None
        rows.append(row)
    return rows


def clocks_line() -> str:
    """Name, SM and memory clocks, temperature and power of each GPU with their units, as a
    result header records them; "" without nvidia-smi."""
    try:
        return query(["name", *CLOCK_FIELDS[1:]], units=True).strip()
    except SmiError:
        return ""
