"""rebase: move the series onto a newer upstream release and say what upstream has taken.

    scripts/rebase.sh v0.22.0 [--commit <40-hex id>] [--report PATH] [--no-contracts]
    scripts/rebase.sh --continue [--drop-repeats | --port FILE] | --skip | --abort
    scripts/rebase.sh --check v0.33.0      # classify only; changes nothing

The new release is materialised into the same vllm/ repository as the pin (vseries.release:
by git when upstream is reachable, else its verified PyPI source release). Each patch is
replayed with ``git am -3`` (merge-ort: 3-way, with rename detection) and classed. A patch
that needs a person stops the rebase with its files and hunks and a state file under
``.vseries/rebase/``; ``--continue`` (also after a killed run), ``--skip`` and ``--abort``
(everything back as before: pin, patches/, vllm/ HEAD and branch, gitlink) take it from
there. On success the pin, patches/ and series, and the superproject's gitlink move to the
new release, and a Markdown report is written.

The package, by responsibility:
    state.py      the rebase state (dataclasses) and where it is kept
    engine.py     start, replay each patch, gather its evidence, act on the decision
    evidence.py   the evidence on one patch, read from git (Evidence: plain data)
    diffs.py      text comparisons of a patch and its replay (pure)
    contracts.py  the patches' contracts on plain upstream (CUDA hidden), cached
    decide.py     decide(Evidence) -> Decision: how a patch is classed (pure)
    finish.py     after the last patch: report; move pin, patches/, series, gitlink
    report.py     the Markdown report
    control.py    --continue, --skip;  undo.py: --abort;  check.py: --check
    twice.py      a stop on lines twice taken up: --continue [--drop-repeats]
    command.py    the command line
"""

from vseries.rebase.command import add_parser, main
from vseries.rebase.decide import (
    CARRIED,
    CLEAN,
    CONFLICT,
    PARTLY,
    RESOLVED,
    SKIPPED,
    THREE_WAY,
    TWICE,
    UPSTREAMED,
)
from vseries.rebase.state import State, Store
from vseries.workspace import Workspace


def state_of(ws: Workspace | None = None) -> State | None:
    """The rebase in progress in ``ws`` (default: the current workspace), or None."""
    return Store(ws or Workspace.current()).load()


__all__ = [
    "CARRIED",
    "CLEAN",
    "CONFLICT",
    "PARTLY",
    "RESOLVED",
    "SKIPPED",
    "THREE_WAY",
    "TWICE",
    "UPSTREAMED",
    "add_parser",
    "main",
    "state_of",
]
