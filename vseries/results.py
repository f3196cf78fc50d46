"""Benchmark result files, read and written with the standard library only.

The one definition of the result schema, shared by the benchmarks (``benchmarks/``, which
measure on the H200 and write the files), their reports, and the PR bodies (``vseries prs``,
which read them on any host):

- A benchmark run: one JSON file, ``{"header": {...}, "rows": [...]}``. The header says what
  ran, where and when (``header``; the benchmarks add the GPU, torch, Triton, tree and read
  bandwidth); rows are flat dicts (``Row``): ``shape``, ``dtype``, ``m`` (tokens), ``variant``
  (a tree, a backend, a path), ``us`` (median of one call, microseconds), its range, bytes,
  % of the read roofline, and benchmark-specific columns. ``load`` also reads the files
  written before this schema (``case``/``batch`` for ``shape``/``m``).
- End-to-end serving: JSON lines, one record per line, appended and flushed one at a time,
  merged by concatenation (``append_line``, ``read_lines``: each ``run_id`` once).
- Reports: Markdown tables (``markdown_table``).
"""

import dataclasses
import json
import os
import platform
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any


@dataclasses.dataclass
class Row:
    """One result row. ``variant`` names what was timed (a tree, a backend, a path); ``us`` is
    the median time of one call in microseconds, ``us_min``/``us_max`` its range over the
    replays (None for a row that failed, see ``failed``); ``roofline_pct`` is computed from
    ``bytes`` and the header's bandwidth; ``extra`` holds benchmark-specific columns
    (flattened into the row on output; ``error`` marks a failed row)."""

    bench: str
    shape: str
    dtype: str
    m: int
    variant: str
    us: float | None
    us_min: float | None
    us_max: float | None
    bytes: int = 0
    roofline_pct: float | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        extra = d.pop("extra")
        d.update(extra)
        return d


def failed(
    bench: str, shape: str, dtype: str, m: int, variant: str, exc: BaseException | str, **extra
) -> Row:
    """The row of a measurement that failed: no times, ``error`` = "Type: message" (500
    characters at most), so that one failing case does not lose a one-shot GPU run."""
    error = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    return Row(
        bench, shape, dtype, m, variant, None, None, None, extra={**extra, "error": error[:500]}
    )


def header(bench: str, variant: str, **extra: Any) -> dict[str, Any]:
    """What every result header says: the benchmark, the variant (the tree), the command line,
    the UTC time and Python's version; ``extra`` after them."""
    return {
        "bench": bench,
        "variant": variant,
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": platform.python_version(),
        **extra,
    }


def write(path: str | Path, head: dict[str, Any], rows: Sequence[Row]) -> None:
    """Write ``{"header": ..., "rows": [...]}`` atomically (a partial run stays readable)."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps({"header": head, "rows": [r.as_dict() for r in rows]}, indent=1))
    tmp.replace(path)


# Row fields of the result files written before this schema, by their name here.
LEGACY_ROW = {"case": "shape", "batch": "m"}


def read_json(path: str | Path) -> Any:
    """A JSON file's value.

    Raises:
        ValueError: the file is missing, unreadable or not JSON (the message names it and
            says which; the report tools turn it into their usage error).
    """
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: cannot be read ({e})") from None
    try:
        return json.loads(text)
    except ValueError as e:
        what = "empty" if not text.strip() else f"not JSON ({e})"
        raise ValueError(f"{path}: {what}") from None


def load(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Read a result file: (header, rows).

    A file written before this schema (the run's fields at the top level next to ``"rows"``,
    ``device`` for the GPU, ``read_bw_GBps``; rows with ``case`` and ``batch``) is read into
    it: its top-level fields are the header (``gpu`` and ``read_bandwidth_Bps`` added), its
    rows get ``shape`` and ``m``, and a row without its own ``bench`` or ``variant`` takes the
    file's.

    Raises:
        ValueError: the file is missing, unreadable, not JSON or not a result file.
    """
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise ValueError(f"{path} is not a result file (no rows)")
    if isinstance(data.get("header"), dict):
        return data["header"], [r for r in data["rows"] if isinstance(r, dict)]
    head = {k: v for k, v in data.items() if k != "rows"}
    head.setdefault("gpu", head.get("device", ""))
    if isinstance(head.get("read_bw_GBps"), int | float):
        head.setdefault("read_bandwidth_Bps", head["read_bw_GBps"] * 1e9)
    rows = []
    for r in data["rows"]:
        if isinstance(r, dict):
            row = {LEGACY_ROW.get(k, k): v for k, v in r.items()}
            row.setdefault("bench", head.get("bench"))
            row.setdefault("variant", head.get("variant"))
            rows.append(row)
    return head, rows


def append_line(path: Path, rec: dict[str, Any]) -> None:
    """Append one record as a JSON line and flush it to disk (a kill after this keeps it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(rec, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_lines(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Every record of the JSON-lines files, in order, each ``run_id`` once (files merged by
    concatenation repeat records); missing files, unreadable lines (the torn last line of a
    killed process) and lines that are not objects are skipped."""
    out, seen = [], set()
    for p in paths:
        if not Path(p).exists():
            continue
        for line in Path(p).read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if not isinstance(rec, dict):
                continue
            rid = rec.get("run_id")
            if rid is not None:
                if rid in seen:
                    continue
                seen.add(rid)
            out.append(rec)
    return out


def markdown_table(head: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A Markdown table: the header line, the separator, one line per row (cells as str)."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
