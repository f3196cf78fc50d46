"""``vseries rebase``: the command line of the rebase verb."""

import argparse
from pathlib import Path

from vseries.errors import SeriesError
from vseries.rebase import check, control, engine, undo
from vseries.release import SHA1
from vseries.workspace import Workspace

DESCRIPTION = """Move the series onto a newer upstream release and say, patch by patch, what
upstream has taken (upstreamed, partly upstreamed, carried, conflict, adds a line twice),
with evidence. On success the pin, patches/, the series and the gitlink move to the release
and a report is written; a patch that needs a person stops the rebase with the state kept
(--continue, --skip, --abort). --check does it all in a throw-away copy."""


def main(args) -> int:
    ws = Workspace.current()
    if args.abort:
        return undo.abort(ws)
    if args.skip:
        return control.skip(ws)
    if args.drop_repeats and not args.cont:
        raise SeriesError(
            "--drop-repeats goes with --continue", "scripts/rebase.sh --continue --drop-repeats"
        )
    if args.port and not args.cont:
        raise SeriesError(
            "--port goes with --continue", "scripts/rebase.sh --continue --port <patch file>"
        )
    if args.cont:
        return control.resume(ws, args.port, args.drop_repeats)
    if not args.target:
        raise SeriesError("name the release to rebase onto", "scripts/rebase.sh v0.22.0")
    if args.commit and not SHA1.match(args.commit):
        raise SeriesError(
            f"--commit {args.commit!r} is not a full 40-hex commit id",
            f"scripts/rebase.sh {args.target} --commit <the 40-hex id of {args.target}>   # "
            "the full id of the short one in the release's vllm/_version.py; or leave it out",
        )
    contracts = not args.no_contracts
    if args.check:
        return check.check(ws, args.target, args.commit, args.source, contracts, args.report)
    return engine.start(ws, args.target, args.commit, args.source, contracts, report=args.report)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "rebase",
        help="rebase the series onto a newer upstream release",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("target", nargs="?", help="release tag, e.g. v0.22.0")
    p.add_argument(
        "--commit",
        help="the tag's full 40-hex upstream commit id, when the source "
        "release only names a short one (checked against it)",
    )
    p.add_argument(
        "--source",
        choices=("auto", "git", "sdist"),
        default="auto",
        help="where the new release comes from (auto: git, then PyPI)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="classify only, in a temporary copy; exit 1 when a patch needs a person",
    )
    p.add_argument("--report", type=Path, help="write the Markdown report here")
    p.add_argument(
        "--no-contracts",
        action="store_true",
        help="do not run the patches' contract tests on plain upstream",
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--continue",
        dest="cont",
        action="store_true",
        help="go on after fixing a conflict (or a stop), or after an interrupted run",
    )
    g.add_argument("--skip", action="store_true", help="drop the patch that stopped and go on")
    p.add_argument(
        "--port",
        type=Path,
        metavar="FILE",
        help="with --continue: replace the stopped patch by FILE, a port of it to the new "
        "release (git format-patch output: its code and its message)",
    )
    p.add_argument(
        "--drop-repeats",
        action="store_true",
        help="with --continue after a stop on lines added twice: take those lines out of the "
        "patch's commit and go on (the patch is upstreamed when nothing is left)",
    )
    g.add_argument("--abort", action="store_true", help="put everything back as before")
    p.set_defaults(func=main)
