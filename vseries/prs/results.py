"""Benchmark results for a PR body: which files belong to a patch, and their tables.

Patch -> results convention: the series option ``bench=<name>[:<ref>][,<name>[:<ref>]...]``
names a patch's benchmarks; without it the name is the contract test's
(``contract=tests/contract/test_swap_ab.py`` -> ``swap-ab``). Names match with ``-`` and ``_``
alike, exactly or as a prefix before ``-`` (``swap-ab`` also takes ``swap-ab-gemm``). For a
name, a reporter's Markdown ``benchmarks/results/<name>*.md`` (the curated tables, with their
commands and hardware) is quoted when there is one; else the JSON files anywhere under
benchmarks/results whose ``"bench"`` matches give one table per bench, from the newest file
of each file-level ``"variant"`` (newest by the file's ``"date"`` / ``"timestamp"`` /
``"created"`` field, then by path, so raw/round3 beats raw/round2; file times are checkout
times and are not used). Speed-ups are against ``<ref>``, else the JSON's ``"ref"``, else the
variant ``base``; a reporter's ratio columns (``a / b``) are summarised per case. When nothing
matches, the body says plainly that no measurements are attached.
"""

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

from vseries import results as schema
from vseries.results import LEGACY_ROW, load, markdown_table


def harness() -> ModuleType:
    """The result files' schema (``vseries.results``). Kept for the callers that took it from
    here when it was ``benchmarks/harness.py`` read by file path (tests/workspace/test_prs.py);
    new code imports ``vseries.results``."""
    return schema


# The rows' key columns in the schema of vseries.results, and what a PR body's table calls them.
KEY = {"shape": "case", "dtype": "dtype", "m": "batch"}


@dataclass
class Bench:
    """The newest results of one benchmark (one "bench" value)."""

    name: str
    ref: str | None = None  # the variant speed-ups are against
    sources: list[dict] = field(default_factory=list)  # {"file","variant","command","device"}
    rows: list[dict] = field(default_factory=list)  # rows, each with its "variant"
    markdown: str = ""  # a reporter's table, when no JSON


def bench_names(options: dict[str, str]) -> list[tuple[str, str | None]]:
    """(name, reference variant or None) of a series entry's benchmarks (module doc)."""
    if "bench" in options:
        return [
            (n.partition(":")[0], n.partition(":")[2] or None)
            for n in options["bench"].split(",")
            if n
        ]
    m = re.search(r"test_(\w+)\.py$", options.get("contract", ""))
    return [(m.group(1).replace("_", "-"), None)] if m else []


def _stamp(data: dict) -> str:
    """When a result file was made: the harness header's "time", else the older files'
    "date" / "timestamp" / "created" (ISO text or Unix seconds); "" when none is given."""
    for key in ("time", "date", "timestamp", "created"):
        v = data.get(key)
        if isinstance(v, int | float):
            return datetime.fromtimestamp(v, UTC).isoformat()
        if isinstance(v, str) and v:
            return v
    return ""


def _matches(bench: str, name: str) -> bool:
    bench, name = bench.replace("_", "-"), name.replace("_", "-")
    return bench == name or bench.startswith(name + "-")


def load_results(
    results_dir: Path, names: list[tuple[str, str | None]], files: list | None = None
) -> list[Bench]:
    """The results for each (name, ref) of bench_names (see the module doc for the rules);
    ``files``: result_files(results_dir) when the caller has read them already.

    Unreadable JSON files are skipped, not fatal: a half-written result must not block a PR.
    """
    if not results_dir.is_dir():
        return []

    def label(f: Path) -> str:  # benchmarks/results/... as the workspace names it
        return f"{results_dir.parent.name}/{f.relative_to(results_dir.parent).as_posix()}"

    files = result_files(results_dir) if files is None else files
    out = []
    for name, ref in names:
        md = [f for f in sorted(results_dir.glob("*.md")) if _matches(f.stem, name)]
        out += [
            Bench(f.stem, ref, [{"file": label(f)}], markdown=f.read_text().strip()) for f in md
        ]
        benches = (
            sorted(
                {str(h.get("bench")) for _, h, _ in files if _matches(str(h.get("bench")), name)}
            )
            if not md
            else []
        )
        for bench_name in benches:
            newest: dict[str, tuple] = {}
            for f, head, rows in files:
                variant = str(head.get("variant", ""))
                key = (_stamp(head), f.relative_to(results_dir).as_posix())
                if head.get("bench") == bench_name and (
                    variant not in newest or key > newest[variant][0]
                ):
                    newest[variant] = (key, f, head, rows)
            b = Bench(bench_name)
            for _, f, head, rows in sorted(newest.values(), key=lambda x: x[0][1]):
                b.ref = b.ref or ref or head.get("ref")
                b.sources.append(
                    {
                        "file": label(f),
                        "variant": str(head.get("variant", "")),
                        "command": str(head.get("command", "(not recorded)")),
                        "device": str(head.get("gpu") or "(not recorded)"),
                    }
                )
                default = str(head.get("variant", ""))
                b.rows += [{**r, "variant": str(r.get("variant") or default)} for r in rows]
            out.append(b)
    return out


def result_files(results_dir: Path) -> list[tuple[Path, dict, list[dict]]]:
    """(file, header, rows) of every readable result file under ``results_dir``."""
    files = []
    for f in sorted(results_dir.rglob("*.json")) if results_dir.is_dir() else []:
        try:
            files.append((f, *load(f)))
        except (OSError, ValueError, TypeError):
            continue
    return files


def unmatched(
    results_dir: Path, names: list[tuple[str, str | None]], files: list | None = None
) -> tuple[list[str], list[str]]:
    """(the names that match no results file, the names that would): a misspelt ``bench=``
    left the figures out of the PR body without a word. ``files`` as for load_results."""
    stems = sorted(f.stem for f in results_dir.glob("*.md")) if results_dir.is_dir() else []
    files = result_files(results_dir) if files is None else files
    benches = {str(head.get("bench")) for _, head, _ in files}
    known = stems + sorted(benches - {"None"})
    missing = [n for n, _ in names if not any(_matches(k, n) for k in known)]
    return missing, known


def _summary(ratios: dict[str, dict[str, list[float]]], what: dict[str, str]) -> list[str]:
    """'Speed-up of X (what[X]), per case: median, min, max' for each ratio column."""
    out = []
    for col, by_case in ratios.items():
        if any(by_case.values()):
            lines = [f"Speed-up {what[col]}, per case:"]
            for case, rs in by_case.items():
                rs.sort()
                lines.append(
                    f"- {case}: median {rs[len(rs) // 2]:.2f}x, min {rs[0]:.2f}x, "
                    f"max {rs[-1]:.2f}x ({len(rs)} rows)"
                )
            out.append("\n".join(lines))
    return out


def quote_report(md: str) -> str:
    """A reporter's Markdown for a PR body: its ratio columns ('patched / base', values
    '1.06x') summarised per case (the leading text columns, e.g. case and dtype), then the
    report folded into one <details> block, headings demoted under the body's own and links
    into the workspace (plots, raw files: they do not resolve in the upstream PR) kept as
    their text."""
    md = re.sub(r"(?m)^(#{1,4}) ", lambda m: "#" * (len(m.group(1)) + 2) + " ", md)
    md = re.sub(r"!\[[^\]]*\]\((?![a-z]+:)[^)]*\)", "", md)  # an image of the workspace
    md = re.sub(r"\[([^\]]*)\]\((?![a-z]+:)[^)]*\)", r"\1", md)  # a link into it
    out, summaries = [], []
    for block in re.split(r"\n\s*\n", md):
        lines = block.splitlines()
        if len(lines) > 2 and all(x.lstrip().startswith("|") for x in lines):
            head = [c.strip() for c in lines[0].strip().strip("|").split("|")]
            cols = [i for i, h in enumerate(head) if re.fullmatch(r"\S.* / \S+", h)]
            ratios: dict[str, dict[str, list[float]]] = {head[i]: {} for i in cols}
            rows = [[c.strip() for c in r.strip().strip("|").split("|")] for r in lines[2:]]
            # a case is told by the leading columns before the first numeric one (the batch)
            n_key = (
                next(
                    (
                        i
                        for i in range(len(head))
                        if all(re.fullmatch(r"[\d.]+", r[i]) for r in rows if i < len(r))
                    ),
                    1,
                )
                or 1
            )
            for cells in rows:
                for i in cols:
                    m = re.fullmatch(r"([\d.]+)x", cells[i]) if i < len(cells) else None
                    if m:
                        ratios[head[i]].setdefault(" ".join(cells[:n_key]), []).append(
                            float(m.group(1))
                        )
            what = {
                h: "of {0} over {1} ({1} time / {0} time; above 1: faster)".format(*h.split(" / "))
                for h in ratios
            }
            summaries += _summary(ratios, what)
        out.append(block)
    report = "<details><summary>The report</summary>\n\n" + "\n\n".join(out) + "\n\n</details>"
    return "\n\n".join([*summaries, report])


def _num(v, fmt: str) -> str:
    return format(v, fmt) if isinstance(v, int | float) and not isinstance(v, bool) else "-"


MEASURES = (
    ("us", "us", ".1f"),
    ("roofline_pct", "% roofline", ".0f"),
    ("compiles", "compiles", "d"),
)

FOLD_ROWS = 24  # longer tables go into a <details> block, under a one-line summary


def bench_table(bench: Bench) -> str:
    """A Markdown table: a line per (case, dtype, batch, and any field needed to tell rows of
    one variant apart, e.g. kernel_variant), per variant its time (microseconds), % of the
    roofline and compile count where the rows have them, and speed-ups = reference time /
    variant time (with their range above the table); then the rows that failed."""
    # rows in the schema of vseries.results (rows made by hand in the older one are renamed)
    rows = [{LEGACY_ROW.get(k, k): v for k, v in r.items()} for r in bench.rows]
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    ref = bench.ref or ("base" if "base" in variants else None)
    if ref in variants:
        variants.remove(ref)
        variants.insert(0, ref)
    base_key = tuple(KEY)  # the schema's shape, dtype, m
    seen: dict[tuple, dict] = {}
    extra = []
    for r in rows:
        k = (*(r.get(x) for x in base_key), r["variant"])
        if k in seen:
            extra += [
                f
                for f, v in r.items()
                if f not in (*base_key, "variant")
                and isinstance(v, str | int)
                and not isinstance(v, bool)
                and v != seen[k].get(f)
                and f not in ("us", "error", "timing")
            ]
        seen[k] = r
    key_fields = [*base_key, *dict.fromkeys(extra)]
    measures = [
        m
        for m in MEASURES
        if any(
            isinstance(r.get(m[0]), int | float) and not isinstance(r.get(m[0]), bool) for r in rows
        )
    ]
    cells: dict[tuple, dict] = {}
    for r in rows:
        cells.setdefault(tuple(r.get(f, "") for f in key_fields), {})[r["variant"]] = r
    others = [v for v in variants if v != ref] if ref in variants else []
    head = [
        *(KEY.get(f, f) for f in key_fields),
        *(f"{v or 'time'} {m[1]}" for v in variants for m in measures),
        *(f"{v} vs {ref}" for v in others),
    ]
    lines = []
    errors, ratios = [], {v: {} for v in others}  # variant -> case -> speed-ups
    for key, by in cells.items():
        row = [str(x) for x in key]
        for v in variants:
            r = by.get(v, {})
            row += [_num(r.get(m[0]), m[2]) for m in measures]
            if r.get("error"):
                errors.append(f"- {' '.join(map(str, key))} {v}: {r['error']}")
        ref_us = by.get(ref, {}).get("us")
        for v in others:
            us = by.get(v, {}).get("us")
            ok = isinstance(ref_us, int | float) and isinstance(us, int | float) and us > 0
            row.append(f"{ref_us / us:.2f}x" if ok else "-")
            if ok:
                ratios[v].setdefault(f"{key[0]} {key[1]}".strip(), []).append(ref_us / us)
        lines.append(row)
    table = markdown_table(head, lines)
    out = _summary(
        ratios, {v: f"of {v} over {ref} (= {ref} time / {v} time; above 1: faster)" for v in ratios}
    )
    if len(cells) > FOLD_ROWS:
        table = f"<details><summary>{len(cells)} rows</summary>\n\n{table}\n\n</details>"
    out.append(table)
    if errors:
        out.append("Rows that failed:\n" + "\n".join(dict.fromkeys(errors)))
    return "\n\n".join(out)


def measurements(benches: list[Bench], names: list[tuple[str, str | None]]) -> str:
    """The figures of each bench with its commands and hardware ("" when there are none: the
    message says what has not been measured)."""
    if not benches:  # the message says what has not been measured; the tool adds nothing
        return ""
    out = []
    for b in benches:
        lines = [f"Benchmark `{b.name}`:"]
        for src in b.sources:  # (the results file's own path is the workspace's: not named)
            if "command" in src:
                lines.append(
                    f"- {src['variant'] or 'run'}: on {src['device']}, command `{src['command']}`"
                )
            else:
                lines[0] = (
                    f"Benchmark `{b.name}` (the report below states its commands and hardware):"
                )
        out.append(
            "\n".join(lines) + "\n\n" + (bench_table(b) if b.rows else quote_report(b.markdown))
        )
    missing = [n for n, _ in names if not any(_matches(b.name, n) for b in benches)]
    if missing:
        out.append("No results were found for " + ", ".join(f"`{n}`" for n in missing) + ".")
    return "\n\n".join(out)
