"""The series check behind the pre-commit hook: every series entry exists and is a patch,
every patch file is listed, each carries a DCO Signed-off-by, names a contract test and adds
no conflict leftover (``*.rej``, ``*.orig``), the
records of the patches that left the series (patches/retired.toml) are sound, and the
workspace's index records ``vllm/`` at the pin (``git commit -a`` at the root would record
the series' own HEAD instead).
Standard library only (pre-commit runs it with the system python3)."""

import re
import sys

from vseries import git, pin, retired, series
from vseries.errors import SeriesError
from vseries.workspace import Workspace


def problems(ws: Workspace | None = None) -> list[str]:
    """One line per problem found; empty when the series is sound."""
    ws = ws or Workspace.current()
    link = gitlink_problem(ws)
    try:
        entries = series.load(ws)
    except SeriesError as e:
        return [str(e)] + ([link] if link else [])
    out = retired.problems(ws) + ([link] if link else [])
    for e in entries:
        text = e.path.read_text(errors="replace")
        if not re.search(r"^Signed-off-by: .+ <.+>$", text, re.M):
            out.append(f"{e.name}: no Signed-off-by (vLLM requires the DCO): git commit -s")
        if not e.contract:
            out.append(f"{e.name}: no contract=<test> option in patches/series")
        elif not (ws.root / e.contract).is_file():
            out.append(f"{e.name}: contract {e.contract} does not exist")
        for left in re.findall(r"^diff --git a/\S+ b/(\S+\.(?:rej|orig))$", text, re.M):
            out.append(
                f"{e.name}: adds {left}, a resolved conflict's leftover: remove it from the "
                "commit in vllm/, then scripts/refresh.sh (refresh names the commands)"
            )
    return out


def gitlink_problem(ws: Workspace) -> str | None:
    """What is wrong with the gitlink of ``vllm/`` in the workspace's index, or None: it must
    be the pin's commit (``upstream.toml``), never the series applied on top of it."""
    link = git.gitlink(ws.root)
    want = pin.load(ws.root / "upstream.toml").commit
    if link is None or link == want:
        return None
    return (
        f"the index records vllm/ at {link[:12]}, not at the pin {want[:12]} (upstream.toml): "
        "`git commit -a` or `git add vllm` at the root stages the series' HEAD\n"
        f"  next: git update-index --cacheinfo 160000,{want},vllm"
    )


def main() -> int:
    found = problems()
    for p in found:
        print(p, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
