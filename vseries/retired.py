"""``patches/retired.toml``: the patches that left the series, each with why and where its
last version is kept.

Two kinds of record:

- ``upstreamed``: a rebase found that upstream took the change. Its contract keeps running
  on the pin (``scripts/test.sh``'s contract tier) as a guard: it must pass on plain upstream,
  and a failure means upstream regressed or reverted the change. Written by
  ``scripts/rebase.sh``; ``taken_in`` (the release and commit or pull request that took it)
  by hand when the evidence does not name it.
- ``dropped``: taken out of the series by hand although upstream does not have it (no reason
  left to carry it: ``why``, with the evidence). Its contract is kept for reading but never
  runs as a guard: it fails on the pin by design. Its file is kept in ``patches/retired/``.

The file was ``patches/upstreamed.toml`` (upstreamed records only); that name is still read
when the new one is absent, and the next write replaces it.
"""

import json
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from vseries import series
from vseries.errors import SeriesError
from vseries.workspace import Workspace

FILE = "retired.toml"
OLD_FILE = "upstreamed.toml"  # its name until the series first dropped a patch by hand
FOLDER = "retired"  # patches/retired/: the last version of each dropped patch
UPSTREAMED, DROPPED = "upstreamed", "dropped"
KINDS = (UPSTREAMED, DROPPED)
HEADER = """\
# Patches that left the series, and why (vseries/retired.py reads this file).
# kind = "upstreamed": upstream took the change; left the series in the rebase onto `left_at`.
#   Its contract keeps running on the pin as a guard (it must pass on plain upstream: a
#   failure means upstream regressed or reverted the change). Written by scripts/rebase.sh;
#   `taken_in` by hand.
# kind = "dropped": taken out by hand on `left_at` although upstream lacks it; `why` says
#   why. Its contract fails on the pin by design and is not run; `file` keeps the patch.
# `name` keeps the file name the patch had in the series it left, numbered as it was there, not
#   as patches/series numbers its patches now (the contract tier's "retired, was NNNN" rows show
#   that old number): an upstreamed patch's number on the line of `left_from`, a dropped one's
#   in the series on `left_at` when it was dropped.
"""


@dataclass
class Record:
    """One patch that left the series.

    Attributes:
        name: its patch file name in the series it left.
        subject: its Subject line.
        kind: UPSTREAMED (upstream took it) or DROPPED (taken out by hand).
        contract: its contract test (a guard on the pin when upstreamed), or "".
        left_at: the release the series was on (dropped) or moved to (upstreamed) when the
            patch left.
        left_from: the release it was carried on before the rebase (upstreamed; "" else).
        taken_in: the upstream release and commit or pull request that took it ("" unknown).
        why: why a dropped patch has no reason to be carried (required for DROPPED).
        file: where its last version is kept, relative to the workspace root ("" unknown).
        evidence: the sentences that support the decision (a rebase's, or file:line facts).
    """

    name: str
    subject: str
    kind: str = UPSTREAMED
    contract: str = ""
    left_at: str = ""
    left_from: str = ""
    taken_in: str = ""
    why: str = ""
    file: str = ""
    evidence: list[str] = field(default_factory=list)

    @property
    def guard(self) -> bool:
        """Whether its contract runs on the pin as a guard (upstreamed, with a contract)."""
        return self.kind == UPSTREAMED and bool(self.contract)


def path(ws: Workspace) -> Path:
    return ws.patches / FILE


def _source(ws: Workspace) -> Path:
    """The file load() reads: retired.toml, else the old upstreamed.toml when only it exists."""
    new, old = path(ws), ws.patches / OLD_FILE
    return old if old.exists() and not new.exists() else new


def load(ws: Workspace) -> list[Record]:
    """The records of ``ws`` ([] when it has none).

    Raises:
        SeriesError: the file is not valid TOML, or a record lacks a name or subject, has a
            key or kind it does not know, or is dropped without ``why``.
    """
    p = _source(ws)
    if not p.exists():
        return []
    where = ws.rel(p)
    fix = f"git checkout -- {where}   # the committed file; or fix the record by hand"
    try:
        data = tomllib.loads(p.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise SeriesError(f"{where} is not valid TOML: {e}", fix) from None
    known = set(Record.__dataclass_fields__)
    records = data.get("patch", [])
    if not isinstance(records, list) or not all(isinstance(d, dict) for d in records):
        raise SeriesError(
            f"{where}: each record is a [[patch]] table (a line [[patch]], two brackets, "
            "above its keys)",
            fix,
        )
    out = []
    for i, d in enumerate(records, 1):
        wrong = [
            f"{k} = {v!r} (a {'list of strings' if k == 'evidence' else 'string'})"
            for k, v in d.items()
            if k in known
            and not (
                all(isinstance(x, str) for x in v)
                if k == "evidence" and isinstance(v, list)
                else isinstance(v, str)
            )
        ]
        if wrong:
            raise SeriesError(f"{where}: record {i}: {', '.join(wrong)}", fix)
        extra = sorted(set(d) - known)
        if "name" not in d or "subject" not in d or extra:
            raise SeriesError(
                f"{where}: record {i} needs name and subject and takes only "
                f"{sorted(known)}" + (f" (unknown: {extra})" if extra else ""),
                fix,
            )
        r = Record(**d)
        problem = r.contract and series.contract_problem(ws, r.contract)
        if problem:  # an upstreamed record's contract runs on the pin: the series' own check
            raise SeriesError(f"{where}: record {i} ({r.name}): {problem}", fix)
        if r.kind not in KINDS:
            raise SeriesError(
                f"{where}: record {i} ({r.name}) has kind {r.kind!r}; known: {', '.join(KINDS)}",
                fix,
            )
        if r.kind == DROPPED and not r.why.strip():
            raise SeriesError(
                f"{where}: record {i} ({r.name}) is dropped without a why: a reader must "
                "learn why the series no longer carries it",
                fix,
            )
        out.append(r)
    return out


def problems(ws: Workspace) -> list[str]:
    """What the series check reports about the records: a file that ``file`` names but the
    workspace lacks, a dropped patch kept outside patches/retired/, or a record that cannot
    be read. Empty when sound."""
    try:
        records = load(ws)
    except SeriesError as e:
        return [str(e)]
    out = []
    folder = Path(ws.rel(ws.patches / FOLDER))
    for r in records:
        if r.file and not (ws.root / r.file).is_file():
            out.append(f"{ws.rel(path(ws))}: {r.name}: its file {r.file} does not exist")
        if r.kind == DROPPED and Path(r.file).parent != folder:
            out.append(
                f"{ws.rel(path(ws))}: {r.name} is dropped: keep its file in {folder}/ "
                f"(file = {r.file!r}): git mv patches/{r.name} {folder}/"
            )
    return out


def _value(v) -> str:
    # A JSON string is a TOML basic string (same escapes, \\uXXXX included).
    if isinstance(v, list):
        return "[\n" + "".join(f"  {json.dumps(x)},\n" for x in v) + "]"
    return json.dumps(v)


def write(ws: Workspace, records: list[Record]) -> None:
    """Write every record (the file is rewritten whole, in the order given); the old
    upstreamed.toml, when there, is replaced by it."""
    parts = [HEADER]
    for r in records:
        parts.append("\n[[patch]]\n")
        parts += [f"{k} = {_value(v)}\n" for k, v in asdict(r).items()]
    path(ws).write_text("".join(parts))
    (ws.patches / OLD_FILE).unlink(missing_ok=True)


def add(ws: Workspace, new: list[Record]) -> None:
    """Append records (a record of the same name is replaced)."""
    names = {r.name for r in new}
    write(ws, [r for r in load(ws) if r.name not in names] + new)
