"""``python -m vseries <verb>``: a thin front that dispatches to one module per verb.

Every verb module has ``add_parser(sub)`` (its sub-command, with a --help that says what it
does) and a ``main(args)``; errors the user can act on are SeriesError: exit 2, the message,
and a ``next:`` line with the command that fixes it. A script of scripts/ that execs a verb
sets VSERIES_PROG to its own path: usage lines and errors then name the script.
VSERIES_ARGS_ONLY=1: parse the command line (and run the verb's ``check``, when it sets one:
options that conflict) and stop; scripts/_venv.sh checks a script's options this way before
it creates or installs anything.
"""

import argparse
import os
import shlex
import sys

from vseries import apply, build, contract, materialise, prs, rebase, refresh, testrun, wheel
from vseries.errors import SeriesError

VERBS = (materialise, apply, refresh, build, contract, testrun, rebase, prs, wheel)


class Parser(argparse.ArgumentParser):
    """argparse's parser whose error names the command as typed and points to its --help, and
    that takes no abbreviated option (``--line`` must not pass for ``--line-requirements``)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.print_usage(sys.stderr)
        name = os.path.basename(self.prog.split()[-1])
        self.exit(2, f"{name}: error: {message}\n  next: {self.prog} --help\n")


def parser(prog: str | None = None, verb: str | None = None) -> argparse.ArgumentParser:
    """The command line; ``prog`` (a script's path) names ``verb``'s sub-command."""
    ap = Parser(
        prog="python -m vseries",
        description="The workspace's verbs, one sub-command each (scripts/<verb>.sh runs "
        "the same); python -m vseries <verb> --help says what a verb does.",
    )
    sub = ap.add_subparsers(dest="verb", required=True)
    for mod in VERBS:
        mod.add_parser(sub)
    for name, p in sub.choices.items():
        p.set_defaults(verb_parser=p)  # argparse reports unknown options with the front's usage
        if prog and name == verb:
            p.prog = prog
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    prog = os.environ.pop("VSERIES_PROG", None)
    args, extra = parser(prog, argv[0] if argv else None).parse_known_args(argv)
    if extra:
        args.verb_parser.error(f"unrecognized arguments: {' '.join(extra)}")
    # an empty value (`--line ''`, `-o ""`, `--base=`) would read as "not given" or as "."
    empty = [f"{a!r} after {argv[i - 1]}" if a == "" and i else repr(a) for i, a in enumerate(argv)
             if a == "" or (a.startswith("--") and a.endswith("="))]  # fmt: skip
    if empty:
        args.verb_parser.error(f"an empty value: {', '.join(empty)}")
    name = os.path.basename(prog) if prog else args.verb
    try:
        if os.environ.get("VSERIES_ARGS_ONLY"):  # scripts/_venv.sh, before installing
            getattr(args, "check", lambda a: None)(args)
            return 0
        return args.func(args)
    except SeriesError as e:
        print(f"{name}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # every verb starts from what an interrupted run left: apply puts vllm/ back, set-up's
        # routes leave vllm/ empty, rebase resumes at its last decision, prs and wheel leave
        # no worktree or half-written file
        again = shlex.join([prog, *argv[1:]] if prog else ["python", "-m", "vseries", *argv])
        print(f"{name}: interrupted\n  next: {again}   # starts from what it left", file=sys.stderr)
        return 130
