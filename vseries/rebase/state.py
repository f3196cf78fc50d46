"""A rebase in progress, as dataclasses kept in ``.vseries/rebase/state.json``.

The state is written atomically after every decision (a kill leaves the old file or the new
one, never half of one), so that ``--continue`` can take a stopped or killed rebase up at the
last decision and ``--abort`` can put everything back from any point.

    .vseries/rebase/state.json     the State below
    .vseries/rebase/backup/        upstream.toml and patches/ as they were (until finished)
    .vseries/rebase/upstream/      plain new upstream (contract runs), old-pin/ likewise
    refs/vseries/rebase/*          in vllm/: orig-head, orig-series, old-tip
"""

import json
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from vseries.release import Release
from vseries.workspace import Workspace

REFS = "refs/vseries/rebase/"
VERSION = 2

# status: starting (materialising the release) -> replaying -> conflict | twice (stopped for
# a person) -> replaying ... -> finishing -> (state file removed)
STARTING, REPLAYING, CONFLICT, TWICE, FINISHING = (
    "starting",
    "replaying",
    "conflict",
    "twice",
    "finishing",
)


def next_step(status: str) -> str:
    """The ``next:`` line for a rebase in progress in ``status``: a command that works from
    there first (--skip only where a patch waits for a person), the others after its #."""
    if status in (CONFLICT, TWICE):
        return (
            "scripts/rebase.sh --continue   # once the stopped patch is dealt with; or --skip "
            "(drops it) or --abort"
        )
    return (
        "scripts/rebase.sh --continue   # goes on from the last decision; or --abort (puts "
        "everything back)"
    )


@dataclass
class Row:
    """The decision on one patch of the series.

    Attributes:
        name: patch file name in patches/ (before the rebase).
        subject: its Subject line.
        cls: one of the classes of vseries.rebase.decide ("" until decided).
        evidence: sentences that justify the class (each one checkable by a git command).
        old: the patch's commit on the old pin (for range-diff); "" when it has none.
        new: its commit on the new upstream; "" when it is not carried.
        options: the series options of the patch (contract=...), carried to the new series.
    """

    name: str
    subject: str
    cls: str = ""
    evidence: list[str] = field(default_factory=list)
    old: str = ""
    new: str = ""
    options: dict[str, str] = field(default_factory=dict)


@dataclass
class OldPin:
    """The pin the series leaves: tag, commit id, source release file name."""

    tag: str
    commit: str
    source: str


@dataclass
class State:
    """One rebase.

    Attributes:
        target, commit, route, check, contracts, report: what was asked (tag, --commit,
            --source, --check, not --no-contracts, --report path).
        old: the pin before.
        orig_head, orig_branch, gitlink: vllm/ HEAD and branch, and the superproject's
            gitlink of vllm/, before (what --abort puts back).
        refs: refs materialising the release may create (removed by --abort).
        status: see the status names above.
        new: the release, once materialised.
        next: index of the patch to decide next; head: vllm/ HEAD after the last decision.
        rows: one Row per patch, in series order.
        verdicts, kept: contract answers on plain upstream, by contract file.
        passed: the tests of each contract file that passed on plain new upstream.
        stamp: the time stamp of the backup refs and folder (set when finishing).
        elapsed_s: wall seconds spent over all runs (time between runs not counted).
    """

    target: str
    commit: str | None
    route: str
    check: bool
    contracts: bool
    report: str | None
    old: OldPin
    orig_head: str
    orig_branch: str | None
    gitlink: str | None
    refs: list[str]
    status: str = STARTING
    new: Release | None = None
    next: int = 0
    head: str = ""
    rows: list[Row] = field(default_factory=list)
    verdicts: dict[str, list[str]] = field(default_factory=dict)
    kept: dict[str, list[str]] = field(default_factory=dict)
    passed: dict[str, list[str]] = field(default_factory=dict)
    stamp: str = ""
    elapsed_s: float = 0.0
    version: int = VERSION

    def stamp_now(self) -> str:
        """The time stamp of this rebase's backup refs and folder (fixed at first use)."""
        if not self.stamp:
            self.stamp = time.strftime("%Y%m%d-%H%M%S")
        return self.stamp

    @property
    def row(self) -> Row | None:
        """The patch to decide next (None when every patch is decided)."""
        return self.rows[self.next] if self.next < len(self.rows) else None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "State":
        """From to_dict()'s output (also version 1 files, whose one extra key is dropped)."""
        names = {f.name for f in fields(cls)}
        d = {k: v for k, v in d.items() if k in names}
        d["old"] = OldPin(**d["old"])
        d["new"] = Release.from_dict(d["new"]) if d.get("new") else None
        d["rows"] = [Row(**r) for r in d.get("rows", [])]
        return cls(**d)


class Store:
    """Where a workspace keeps its rebase state; counts the wall time spent."""

    def __init__(self, ws: Workspace):
        self.file = ws.rebase_state
        self.dir = self.file.parent
        self.backup = self.dir / "backup"
        self._t0 = time.monotonic()

    def save(self, st: State) -> None:
        """Write the state atomically, adding the time since the last save (or load) to
        ``elapsed_s``."""
        now = time.monotonic()
        st.elapsed_s += now - self._t0
        self._t0 = now
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(json.dumps(st.to_dict(), indent=1))
        tmp.replace(self.file)

    def load(self) -> State | None:
        """The rebase in progress, or None. Time between runs (a fix by hand) is not
        counted."""
        if not self.file.exists():
            return None
        self._t0 = time.monotonic()
        return State.from_dict(json.loads(self.file.read_text()))

    def remove(self) -> None:
        self.file.unlink(missing_ok=True)

    def report_path(self, tag: str) -> Path:
        return self.dir / f"report-{tag}.md"
