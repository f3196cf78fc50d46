"""``python -m vseries <verb>``: a thin front that dispatches to one module per verb.

Every verb module has ``add_parser(sub)`` (its sub-command, with a --help that says what it
does) and a ``main(args)``; errors the user can act on are SeriesError: exit 2, the message,
and a ``next:`` line with the command that fixes it.
"""

import argparse
import sys

from vseries import apply, build, contract, materialise, prs, rebase, refresh, testrun
from vseries.errors import SeriesError

VERBS = (materialise, apply, refresh, build, contract, testrun, rebase, prs)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="vseries", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    for mod in VERBS:
        mod.add_parser(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except SeriesError as e:
        print(f"{args.verb}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{args.verb}: interrupted", file=sys.stderr)
        return 130
