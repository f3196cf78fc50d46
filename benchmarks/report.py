"""Turn benchmark JSON from the H200 into a Markdown table and a plot, base vs patched.

    python benchmarks/report.py RESULTS.json [MORE.json ...] --ref base
        --out benchmarks/results/NAME

Inputs are result files of ``benchmarks/harness.py`` (older files too: ``results.load``
reads them into the same schema). Rows of all inputs are matched on (shape, dtype, m), shown
as case, dtype, batch; for every variant other than the reference, the ratio is reference
time / variant time (> 1: the variant is faster). The roofline column is achieved bandwidth /
measured read bandwidth, in %, from the rows' own ``roofline_pct`` (bytes that must move /
time / read bandwidth, measured in the same run).
Writes NAME.md (with the commands and hardware that produced the figures) and NAME.png
(time against batch, one panel per case and dtype, log scales).
"""

import argparse
from collections import defaultdict
from pathlib import Path

from benchmarks import plots
from vseries import results


def load(files: list[Path]) -> tuple[list[dict], list[dict]]:
    """(rows of every file, the files' headers), in the harness's schema."""
    rows, metas = [], []
    for f in files:
        head, file_rows = results.load(f)
        metas.append(head)
        rows += file_rows
    return rows, metas


def table(rows: list[dict], ref: str) -> tuple[str, list[str]]:
    """Markdown table and the variant names, reference first.

    When rows say how they were timed (``timing``: graph replay or eager), that is a column
    before the batch, so a summary per case keeps graph-replayed and eager rows apart.
    """
    by_key = defaultdict(dict)
    for r in rows:
        by_key[(r["shape"], r.get("dtype", ""), r["m"])][r["variant"]] = r
    variants = [ref] + sorted({r["variant"] for r in rows} - {ref})
    timed = any(r.get("timing") for r in rows)
    head = ["case", "dtype"] + (["timing"] if timed else []) + ["batch"]
    head += [f"{v} us" for v in variants]
    head += [f"{v} / {ref}" for v in variants[1:]] + [f"{v} roofline %" for v in variants]
    lines = []
    for (case, dtype, batch), vs in sorted(by_key.items()):
        cells = [case, dtype]
        if timed:
            first = vs.get(ref) or next(iter(vs.values()))
            cells.append(str(first.get("timing") or "-"))
        cells.append(str(batch))
        measured = {v for v in variants if v in vs and vs[v].get("us") is not None}
        cells += [f"{vs[v]['us']:.1f}" if v in measured else "-" for v in variants]
        for v in variants[1:]:
            # a ratio only where time measures work (rows with bytes that must move):
            # compile and host-timed first calls are shown, not divided; failed rows neither
            ok = v in measured and ref in measured and vs[v]["us"] > 0 and vs[v].get("bytes")
            cells.append(f"{vs[ref]['us'] / vs[v]['us']:.3f}x" if ok else "-")
        cells += [
            f"{vs[v]['roofline_pct']:.0f}"
            if v in vs and vs[v].get("roofline_pct") is not None
            else "-"
            for v in variants
        ]
        lines.append(cells)
    return results.markdown_table(head, lines) + "\n", variants


def plot(rows: list[dict], variants: list[str], png: Path, title: str) -> None:
    panels = sorted({(r["shape"], r.get("dtype", "")) for r in rows})
    cols = min(3, len(panels))
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plots.grid(nrows, cols, (5, 3.6))
    for ax, (case, dtype) in zip(axes.flat, panels, strict=False):
        for v in variants:
            pts = sorted(
                (r["m"], r["us"])
                for r in rows
                if r["shape"] == case
                and r.get("dtype", "") == dtype
                and r["variant"] == v
                and r.get("us") is not None
            )
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=v)
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="tokens (batch)",
            ylabel="time (us)",
            title=f"{case} {dtype}".strip(),
        )
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    plots.save(fig, png, title)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="+", type=Path)
    ap.add_argument("--ref", default="base", help="the reference variant (ratios are ref/x)")
    ap.add_argument("--out", type=Path, required=True, help="output path without suffix")
    ap.add_argument("--title", default="")
    a = ap.parse_args(argv)
    try:
        rows, metas = load(a.inputs)
    except ValueError as e:
        ap.error(str(e))
    present = sorted({str(r.get("variant")) for r in rows})
    if a.ref not in present:
        ap.error(f"--ref {a.ref}: no rows of that variant; present: {', '.join(present) or 'none'}")
    text, variants = table(rows, a.ref)
    meta = "\n".join(
        f"- `{m.get('variant') or m.get('bench')}`: `{m.get('command')}` on {m.get('gpu')}, "
        f"torch {m.get('torch')}, triton {m.get('triton')}, read bandwidth "
        f"{(m.get('read_bandwidth_Bps') or 0) / 1e9:.0f} GB/s"
        for m in metas
    )
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.with_suffix(".md").write_text(
        f"# {a.title or a.out.name}\n\nProduced by:\n{meta}\n\n"
        f"Ratios are {a.ref} time / variant time (> 1: faster than {a.ref}). "
        f"Plot: `{a.out.name}.png`.\n\n{text}"
    )
    plot(rows, variants, a.out.with_suffix(".png"), a.title or a.out.name)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
