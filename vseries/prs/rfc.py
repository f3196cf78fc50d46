"""A patch that goes upstream as an RFC first: the issue that asks the maintainers, no PR yet.

``Upstream-Status: Pending [RFC first]`` marks a patch whose size against its gain only the
maintainers can judge (vLLM's contributing guide, "Notes for Large Changes", expects an RFC
issue for a major change, and may not review a PR tagged ``rfc-required`` without one). The
series keeps the patch for its users; ``prs`` makes no branch for it and writes
``out/prs/<NNNN>/``:

- ``rfc.md``: the issue's body, from ``docs/upstream/<NNNN>-rfc.md`` (written by hand); its
  first line, ``[RFC]: ...``, is the issue's title and not part of the body; its HTML
  comments (``<!-- ... -->``: notes and links for readers of the workspace) are left out, and
  a relative link outside them is a problem (the issue cannot open a workspace file);
- ``title.txt``: that title;
- ``commands.sh``: ``gh issue create`` on vLLM's repository with the title, the body and the
  ``RFC`` label.

When the maintainers have answered, the patch changes as they ask and its status goes back to
``Pending`` (a PR of its own) or ``Submitted [URL]`` (``--record``).
``scripts/prs.sh --rfc-first NNNN`` sets the header (record.py).
"""

import re
import shlex
from dataclasses import dataclass, field

from vseries import series
from vseries.patchfile import PatchInfo
from vseries.prs import comment
from vseries.workspace import Workspace

STATUS = "Pending [RFC first]"
SOURCE = "docs/upstream/{}-rfc.md"
REPO = "vllm-project/vllm"
NOTE = re.compile(r"[ \t]*<!--.*?-->", re.S)
# a Markdown link or image whose target is neither a URL nor an anchor
RELATIVE = re.compile(r"\]\((?!https?://|#|mailto:)([^)\s]+)\)")


def wanted(status: str) -> bool:
    """Whether a patch's Upstream-Status asks for an RFC before a PR."""
    return status.strip() == STATUS


@dataclass
class Rfc:
    """A patch that goes upstream as an RFC before any PR."""

    entry: series.Entry
    number: str  # "0003", from the file name
    info: PatchInfo
    problems: list[str] = field(default_factory=list)

    @property
    def source(self) -> str:
        return SOURCE.format(self.number)

    @property
    def ok(self) -> bool:
        return not self.problems


def split(text: str) -> tuple[str, str]:
    """(title, body) of an RFC file: its first line, then the rest without its HTML comments,
    runs of blank lines they leave, and leading or trailing blanks."""
    title, _, body = text.strip().partition("\n")
    body = re.sub(r"\n{3,}", "\n\n", NOTE.sub("", body))
    return title.strip(), body.strip()


def commands(number: str, title: str) -> str:
    """commands.sh: open the RFC issue with rfc.md as its body (paths relative to the script)."""
    return (
        "#!/usr/bin/env bash\n"
        f"# Patch {number} goes upstream as an RFC first (no PR until it is answered).\n"
        "# Made by scripts/prs.sh; read rfc.md first.\n"
        "set -euo pipefail\n"
        'here="$(cd "$(dirname "$0")" && pwd)"\n'
        f"gh issue create --repo {REPO} --label RFC --title {shlex.quote(title)} "
        '--body-file "$here/rfc.md"\n'
    )


def problems(source: str, text: str | None) -> list[str]:
    """What keeps an RFC file (``text``, None: missing) from being posted as it is."""
    if text is None:
        return [f"{source} does not exist"]
    title, body = split(text)
    if not title.startswith("[RFC]: ") or not body:
        return [f"{source} needs a first line '[RFC]: <title>' and a body below it"]
    if links := RELATIVE.findall(body):
        return [
            f"{source} links {', '.join(dict.fromkeys(links))}, which the issue cannot open: "
            "give the figure in the text, a URL, or keep the link in an HTML comment"
        ]
    return []


def write(ws: Workspace, r: Rfc) -> None:
    """``out/prs/<NNNN>/`` for r (emptied first: a PR's files of an earlier run go); what
    ``problems`` finds in its RFC file is a problem on r (then no rfc.md, no commands.sh),
    named with the file to write."""
    src = ws.root / r.source
    text = src.read_text() if src.is_file() else None
    title, body = split(text or "")
    r.problems += [
        f"{r.entry.name} goes upstream as an RFC first, but {p}: write the RFC there, then "
        "scripts/prs.sh again"
        for p in problems(r.source, text)
    ]
    comment.folder(
        ws, r.entry.name, r.number, "RFC first", "no PR until the maintainers answer it",
        r.problems,
        {"rfc.md": body + "\n", "title.txt": title + "\n",
         "commands.sh": commands(r.number, title)},
        note="no PR until it is answered",
    )  # fmt: skip
