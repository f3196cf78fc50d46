"""The series check behind the pre-commit hook: every series entry exists and is a patch,
every patch file is listed, each carries a DCO Signed-off-by and names a contract test, and
the records of the patches that left the series (patches/retired.toml) are sound.
Standard library only (pre-commit runs it with the system python3)."""

import re
import sys

from vseries import retired, series
from vseries.errors import SeriesError
from vseries.workspace import Workspace


def problems(ws: Workspace | None = None) -> list[str]:
    """One line per problem found; empty when the series is sound."""
    ws = ws or Workspace.current()
    try:
        entries = series.load(ws)
    except SeriesError as e:
        return [str(e)]
    out = retired.problems(ws)
    for e in entries:
        text = e.path.read_text(errors="replace")
        if not re.search(r"^Signed-off-by: .+ <.+>$", text, re.M):
            out.append(f"{e.name}: no Signed-off-by (vLLM requires the DCO): git commit -s")
        if not e.contract:
            out.append(f"{e.name}: no contract=<test> option in patches/series")
        elif not (ws.root / e.contract).is_file():
            out.append(f"{e.name}: contract {e.contract} does not exist")
    return out


def main() -> int:
    found = problems()
    for p in found:
        print(p, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
