"""The rebase report (Markdown): a summary, a row per patch with its class and evidence, and
a range-diff of every carried patch whose content changed."""

import re
from pathlib import Path

from vseries import git
from vseries.rebase.decide import PARTLY, RESOLVED, THREE_WAY
from vseries.rebase.state import Row


def range_diff(vdir: Path, old: str, new: str) -> str:
    """``git range-diff`` of one patch: its commit on the old pin against the new one."""
    # one commit on each side, known to be the same patch: pair them whatever changed
    return git.run(
        vdir,
        "range-diff",
        "--no-color",
        "--creation-factor=999",
        f"{old}^..{old}",
        f"{new}^..{new}",
        check=False,
    )


def report(vdir: Path, head: dict, rows: list[Row]) -> str:
    """The Markdown report.

    Args:
        vdir: vllm/, which holds both sides of each range-diff.
        head: {"title": str, "lines": [str]} for the summary block.
        rows: the decided patches, in series order.
    """
    out = [
        f"# {head['title']}",
        "",
        *[f"- {x}" for x in head["lines"]],
        "",
        "| # | patch | class | evidence |",
        "| --- | --- | --- | --- |",
    ]
    details = []
    for i, r in enumerate(rows, 1):
        cell = [
            e.splitlines()[0].replace("|", "\\|") + (" (details below)" if "\n" in e else "")
            for e in r.evidence
        ]
        out.append(
            f"| {i} | {r.subject.replace('|', '/')} (`{r.name}`) | **{r.cls}** | "
            f"{'<br>'.join(cell) or '-'} |"
        )
        details += [(r, e) for e in r.evidence if "\n" in e]
    if details:
        out += ["", "## Details"]
        for r, e in details:
            first, rest = e.split("\n", 1)
            out += ["", f"{r.name}: {first}", "", "```", rest.rstrip(), "```"]
    changed = [r for r in rows if r.new and r.old and r.cls in (PARTLY, RESOLVED, THREE_WAY)]
    diffs = [(r, range_diff(vdir, r.old, r.new)) for r in changed]
    diffs = [(r, d) for r, d in diffs if d and not re.match(r"^\s*\d+:\s+\w+\s+=\s+", d)]
    if diffs:
        out += ["", "## Patches whose content changed (git range-diff old pin -> new)"]
        for r, d in diffs:
            out += ["", f"### {r.subject}", "", "```diff", d, "```"]
    return "\n".join(out) + "\n"
