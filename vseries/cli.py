"""``python -m vseries <verb>``: a thin front that dispatches to one module per verb."""

import argparse
import sys

from vseries import apply, build, contract, materialise, prs, rebase, refresh, testrun
from vseries.errors import SeriesError


def _materialise(args) -> int:
    materialise.ensure(args.source)
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="vseries", description=__doc__)
    sub = ap.add_subparsers(dest="verb", required=True)
    p = sub.add_parser("materialise", help="make vllm/ a checkout of the pinned commit")
    p.add_argument(
        "--source",
        choices=("auto", "git", "sdist"),
        default="auto",
        help="git (shallow fetch), sdist (verified PyPI source release), or auto",
    )
    p.set_defaults(func=_materialise)
    for mod in (apply, refresh, build, contract, testrun, rebase, prs):
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
