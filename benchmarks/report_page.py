"""The results page of a report of v0.34.0's runs against the series': what the layer reports
(``moe_layer_report.py``, ``moe_backends_report.py``) share.

Each reads ``bench_moe_layer.py`` result files of the base tree (``--base``) and of the series
(``--series``) and writes ``<out>.md`` and ``<out>.png``. The page: the title; a paragraph
that says how many runs ran where (``ran``: the GPU, torch, Triton, and the read bandwidth
from the header of the first series file) followed by the report's own method; the table; the
plot; the notes (``--notes``); and the "Made by" line with the GPU command (``--command``)
and the report's own command line.
"""

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vseries import results

MADE_BY = "see benchmarks/results/README.md"  # where the GPU command is, when not given


def parser(doc: str) -> argparse.ArgumentParser:
    """The reports' command line; ``doc`` is the report's docstring (its first paragraph is
    the description)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--base", nargs="+", required=True)
    ap.add_argument("--series", nargs="+", required=True)
    ap.add_argument("--out", required=True, help="path without suffix: .md and .png are written")
    ap.add_argument("--command", default="", help="the GPU command that made the runs")
    ap.add_argument("--notes", type=Path, help="a Markdown file: what the table shows, after it")
    return ap


def parse(doc: str, argv: list[str] | None = None) -> argparse.Namespace:
    """The reports' arguments, checked before anything is read for the table or written:
    every file is a result file, each file's header says the tree its flag names (a swapped
    pair would print an inverted table), and the notes exist. A usage error says which."""
    ap = parser(doc)
    a = ap.parse_args(argv)
    for flag, tree, other in (("--base", "base", "series"), ("--series", "series", "base")):
        for f in getattr(a, tree):
            try:
                head, _ = results.load(f)
            except ValueError as e:
                ap.error(f"{flag}: {e}")
            if head.get("variant") == other:
                ap.error(
                    f"{flag} {f} holds runs of the {other} tree (its header says variant "
                    f"{other!r}): swap the files of --base and --series"
                )
    if a.notes and not a.notes.is_file():
        ap.error(f"--notes {a.notes}: no such file")
    return a


def series_header(a: argparse.Namespace) -> dict[str, Any]:
    """The header of the first series file (sorted by name): where the runs ran."""
    head, _ = results.load(sorted(a.series)[0])
    return head


def ran(runs: str, head: dict[str, Any], clocks: bool = False) -> str:
    """The sentence that says where ``runs`` (e.g. "6 runs of v0.34.0 and 6 of the series")
    ran, from a result header: the GPU (and its clocks), torch, Triton, the read bandwidth."""
    gpu = f"{head.get('gpu')} (clocks {head.get('clocks')})" if clocks else f"{head.get('gpu')}"
    bw = head.get("read_bandwidth_Bps") or 0
    return (
        f"{runs}, one {gpu}, torch {head.get('torch')}, Triton {head.get('triton')}; "
        f"read bandwidth {bw / 1e12:.2f} TB/s measured in the same run."
    )


def page(
    a: argparse.Namespace, script: str, title: str, intro: str, table: str, more: str = ""
) -> str:
    """The Markdown page: ``title``, ``intro`` (``ran``'s sentence and the report's method),
    ``table``, the plot, the notes, and the "Made by" line naming ``script``'s command
    (``more``: the report's own arguments beyond --base and --series, e.g. " --tuned f.json")."""
    notes = a.notes.read_text().strip() + "\n\n" if a.notes else ""
    return (
        f"# {title}\n\n{intro}\n\n{table}\n\n![plot]({Path(a.out).name}.png)\n\n{notes}"
        f"Made by: `{a.command or MADE_BY}`; table: `python benchmarks/{Path(script).name} "
        f"--base {' '.join(a.base)} --series {' '.join(a.series)}{more} --out {a.out}`\n"
    )


def write(a: argparse.Namespace, md: str, plot: Callable[[Path], None]) -> None:
    """Write ``<out>.md`` and, with ``plot``, ``<out>.png``; print the page's path."""
    Path(a.out + ".md").write_text(md)
    plot(Path(a.out + ".png"))
    print(a.out + ".md")
