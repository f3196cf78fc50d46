"""``patches/upstreamed.toml``: the patches upstream took, each with the evidence of the rebase
that retired it from the series.

A patch that a rebase classes as upstreamed leaves the series, but not the workspace: its
record names the release the series moved to, the contract that decided it and the evidence
gathered, and its contract keeps running on the pin (``scripts/test.sh``'s contract tier) as a
guard: it must pass on plain upstream, and a failure means upstream regressed or reverted the
change. ``taken_in`` (the release and commit or pull request that took the change) is filled
in by hand when the evidence does not name it.
"""

import json
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from vseries import series
from vseries.errors import SeriesError
from vseries.workspace import Workspace

FILE = "upstreamed.toml"
HEADER = """\
# Patches upstream took. Each left the series in the rebase onto `left_at`; its contract keeps
# running on the pin as a guard (it must pass on plain upstream: a failure means upstream
# regressed or reverted the change). Written by scripts/rebase.sh; `taken_in` by hand.
"""


@dataclass
class Record:
    """One retired patch.

    Attributes:
        name: its patch file name in the series it left.
        subject: its Subject line.
        contract: its contract test (runs on the pin as a guard), or "".
        left_at: the release the rebase that retired it moved to.
        left_from: the release it was carried on before.
        taken_in: the upstream release and commit or pull request that took it ("" unknown).
        evidence: the rebase's evidence sentences.
    """

    name: str
    subject: str
    contract: str = ""
    left_at: str = ""
    left_from: str = ""
    taken_in: str = ""
    evidence: list[str] = field(default_factory=list)


def path(ws: Workspace) -> Path:
    return ws.patches / FILE


def load(ws: Workspace) -> list[Record]:
    """The records of ``ws`` ([] when it has none).

    Raises:
        SeriesError: the file is not valid TOML or a record lacks a name.
    """
    p = path(ws)
    if not p.exists():
        return []
    try:
        data = tomllib.loads(p.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        where = ws.rel(p)
        raise SeriesError(f"{where} is not valid TOML: {e}", f"git checkout -- {where}") from None
    known = set(Record.__dataclass_fields__)
    out = []
    for i, d in enumerate(data.get("patch", []), 1):
        extra = sorted(set(d) - known)
        if "name" not in d or "subject" not in d or extra:
            raise SeriesError(
                f"{ws.rel(p)}: record {i} needs name and subject and takes only "
                f"{sorted(known)}" + (f" (unknown: {extra})" if extra else ""),
                f"git checkout -- {ws.rel(p)}",
            )
        problem = d.get("contract") and series.contract_problem(ws, str(d["contract"]))
        if problem:  # it runs on the pin as a guard: the series' own check
            raise SeriesError(f"{ws.rel(p)}: record {i}: {problem}", f"git checkout -- {ws.rel(p)}")
        out.append(Record(**d))
    return out


def _value(v) -> str:
    # A JSON string is a TOML basic string (same escapes, \\uXXXX included).
    if isinstance(v, list):
        return "[\n" + "".join(f"  {json.dumps(x)},\n" for x in v) + "]"
    return json.dumps(v)


def write(ws: Workspace, records: list[Record]) -> None:
    """Write every record (the file is rewritten whole, in the order given)."""
    parts = [HEADER]
    for r in records:
        parts.append("\n[[patch]]\n")
        parts += [f"{k} = {_value(v)}\n" for k, v in asdict(r).items()]
    path(ws).write_text("".join(parts))


def add(ws: Workspace, new: list[Record]) -> None:
    """Append records (a record of the same name is replaced)."""
    names = {r.name for r in new}
    write(ws, [r for r in load(ws) if r.name not in names] + new)
