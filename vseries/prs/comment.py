"""A patch that is data for an open upstream PR: the comment that carries its data, no PR.

``Upstream-Status: Pending [data for <PR url>]`` marks a patch whose change an open upstream
pull request already makes (vLLM's AGENTS.md: no second PR for open work). The series keeps
the patch for its users; ``prs`` makes no branch for it and writes ``out/prs/<NNNN>/``:

- ``comment.md``: the comment, from ``docs/upstream/<PR number>-comment.md`` (written by hand:
  the patch's measurements and what they mean for that PR);
- ``target.txt``: the PR's URL;
- ``commands.sh``: ``gh pr comment <url> --body-file comment.md``.

``scripts/prs.sh --data-for NNNN URL`` sets the header (record.py).
"""

import re
import shlex
import shutil
from dataclasses import dataclass, field

from vseries import series
from vseries.patchfile import PatchInfo
from vseries.workspace import Workspace

DATA_FOR = re.compile(r"^Pending \[data for (https?://\S+?/pull/(\d+))/?\]$")
PR_URL = re.compile(r"^https?://\S+/pull/\d+/?$")
SOURCE = "docs/upstream/{}-comment.md"


def target(status: str) -> tuple[str, str] | None:
    """(URL, PR number) of a ``Pending [data for <url>]`` status; None for any other."""
    m = DATA_FOR.match(status.strip())
    return (m.group(1), m.group(2)) if m else None


@dataclass
class Comment:
    """A patch that goes upstream as data for an open PR."""

    entry: series.Entry
    number: str  # "0003", from the file name
    info: PatchInfo
    url: str  # the open PR
    pr: str  # its number
    problems: list[str] = field(default_factory=list)

    @property
    def source(self) -> str:
        return SOURCE.format(self.pr)

    @property
    def ok(self) -> bool:
        return not self.problems


def commands(number: str, url: str) -> str:
    """commands.sh: post comment.md on the PR (paths relative to the script's folder)."""
    return (
        "#!/usr/bin/env bash\n"
        f"# Patch {number} is data for {url} (no PR of its own): post its comment there.\n"
        "# Made by scripts/prs.sh; read comment.md first.\n"
        "set -euo pipefail\n"
        'here="$(cd "$(dirname "$0")" && pwd)"\n'
        f'gh pr comment {shlex.quote(url)} --body-file "$here/comment.md"\n'
    )


def write(ws: Workspace, c: Comment) -> None:
    """``out/prs/<NNNN>/`` for c (emptied first: a PR's files of an earlier run go); a
    missing or empty comment file is a problem on c (then no comment.md, no commands.sh),
    named with the file to write."""
    src = ws.root / c.source
    text = src.read_text().strip() if src.is_file() else ""
    if not text:
        c.problems.append(
            f"{c.entry.name} is data for {c.url}, but {c.source} "
            + ("is empty" if src.is_file() else "does not exist")
            + f": write the comment there (the patch's data for PR {c.pr}), "
            "then scripts/prs.sh again"
        )
    folder(
        ws, c.entry.name, c.number, f"data for {c.url}",
        "no PR of its own, a comment there", c.problems,
        {"comment.md": text + "\n", "commands.sh": commands(c.number, c.url)},
        always={"target.txt": c.url + "\n"}, note="no PR of its own",
    )  # fmt: skip


def folder(
    ws: Workspace,
    name: str,
    number: str,
    label: str,
    what: str,
    problems: list[str],
    files: dict[str, str],
    always: dict[str, str] | None = None,
    note: str = "",
):
    """``out/prs/<NNNN>/`` of a patch with no PR of its own (a comment here, an RFC in rfc.py),
    emptied first (a PR's files of an earlier run go): ``always``'s files, ``checks.txt`` (its
    verdict), and when there are no problems ``files`` (the first is the one to read;
    ``commands.sh`` made executable); prints what it made, or the problems. Returns the folder."""
    out = ws.root / "out" / "prs" / number
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for f, text in (always or {}).items():
        (out / f).write_text(text)
    verdict = "ready" if not problems else "NOT READY:\n" + "\n".join(f"- {p}" for p in problems)
    (out / "checks.txt").write_text(f"patch {name}\n{label}: {what}\n{verdict}\n")
    if problems:
        print(f"prs: {number} {label}: NOT READY ({len(problems)} problems)")
        for p in problems:
            print("    " + p)
        return out
    for f, text in files.items():
        (out / f).write_text(text)
    (out / "commands.sh").chmod(0o755)
    print(f"prs: {number} {label}: {ws.rel(out)}/{next(iter(files))} ({note})")
    return out
