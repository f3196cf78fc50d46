"""``vseries prs``: make, check and describe one upstream PR per patch; push; record."""

from vseries import git, patchfile, release, series
from vseries import pin as pinmod
from vseries.errors import SeriesError
from vseries.prs import comment, publish, rfc
from vseries.prs.branches import PR, identity, make_branch, number
from vseries.prs.checks import check
from vseries.prs.record import record
from vseries.workspace import Workspace


def prs(
    base: str | None = None,
    do_push: bool = False,
    remote: str | None = None,
    hooks: bool = True,
    tests: bool = True,
    ws: Workspace | None = None,
    sign: bool = False,
) -> list[PR | comment.Comment | rfc.Rfc]:
    """Make, check and describe a PR branch per patch not upstreamed; optionally push them.
    A patch that is data for an open upstream PR (``Pending [data for URL]``) gets that
    PR's comment instead (comment.py), and one that goes upstream as an RFC first
    (``Pending [RFC first]``) that RFC's issue (rfc.py): no branch, nothing pushed.

    Args:
        base: an upstream ref that resolves in vllm/ (default: the pin's commit).
        do_push: push all branches to ``remote`` (needs every branch to pass).
        remote: the fork (a remote name of vllm/ or a URL); used in commands.sh too.
        hooks, tests: run the pre-commit hooks / the patch's tests (on by default).
        ws: the workspace (default: the current one).
        sign: sign each branch's commit off as vllm/'s git identity, who becomes its author
            (the person who submits certifies the DCO); without it the branches are unsigned.

    Returns the PRs, comments and RFCs in series order, with their problems (empty when ready).

    Raises:
        SeriesError: vllm/ missing; base not resolving; --push without --sign or without a
            reachable remote, or with a branch that failed (nothing pushed then); --sign
            without a git identity in vllm/.
    """
    ws = ws or Workspace.current()
    pin = pinmod.load(ws.pin_file)
    vdir = ws.vllm
    git.require_checkout(vdir, idle=False)
    checked_out = git.head_branch(vdir) or ""
    if checked_out.startswith("pr/"):
        raise SeriesError(
            f"vllm/ has {checked_out} checked out, a branch prs makes again from its patch; "
            "nothing was changed",
            "git -C vllm checkout series && scripts/prs.sh   # a commit of yours on it is kept "
            "under refs/vseries/backup/ (a fix belongs in the patch: vllm/'s series branch, "
            "then scripts/refresh.sh)",
        )
    base_id = git.rev(vdir, base or pin.commit)
    if not base_id:
        raise SeriesError(
            f"--base {base} does not resolve to a commit in vllm/",
            "git -C vllm tag --list   # or scripts/rebase.sh to bring a newer "
            "upstream release into vllm/",
        )
    label = f"{base or pin.tag} ({base_id[:12]})"
    if remote and not do_push:
        raise SeriesError(
            "--remote names where --push pushes; without --push nothing would go there",
            f"scripts/prs.sh --sign --push --remote {remote}   # or without --remote",
        )
    if do_push and not remote:
        raise SeriesError(
            "--push needs --remote <your fork>", "scripts/prs.sh --sign --push --remote fork"
        )
    if do_push and not sign:
        raise SeriesError(
            "--push pushes signed-off branches only: the person who submits certifies the DCO "
            "and signs each commit (--sign, as vllm/'s git identity); nothing was pushed",
            f"scripts/prs.sh --sign --push --remote {remote}",
        )
    stand_in = release.stands_in(vdir, base_id)
    if do_push and stand_in:
        raise SeriesError(
            f"--push: the base {label} is vLLM {stand_in.tag} as made from its source release, "
            "a commit with no parent: a branch on it shares no history with upstream; nothing "
            "was pushed",
            f"git -C vllm fetch {pin.repo} main:refs/remotes/upstream/main && scripts/prs.sh "
            f"--base upstream/main --sign --push --remote {remote}   # or out/prs/NNNN/"
            "commands.sh, which moves each branch onto upstream's commit first",
        )
    signer = identity(vdir) if sign else None
    remote_refs = publish.ls_remote(vdir, remote) if do_push else {}
    entries = series.load(ws)
    todo = []
    comments: list[tuple[int, comment.Comment | rfc.Rfc]] = []
    for i, e in enumerate(entries):
        info = patchfile.info(e.path)
        if info.status.startswith("Accepted"):
            print(f"prs: {e.name}: upstream already ({info.status}); no PR")
            continue
        data_for = comment.target(info.status)
        if data_for:
            comments.append((i, comment.Comment(e, number(e, i), info, *data_for)))
            continue
        if rfc.wanted(info.status):
            comments.append((i, rfc.Rfc(e, number(e, i), info)))
            continue
        todo.append((i, PR(e, number(e, i), info)))
    reports = {}
    with git.temp_worktree(vdir, base_id, parent=ws.state) as wt:
        scratch = wt.parent
        for i, pr in todo:
            make_branch(vdir, wt, base_id, entries, i, pr, scratch, sign)
            if pr.commit:
                print(f"prs: {pr.number} {pr.branch}: checking ...", flush=True)
                reports[pr.number] = check(wt, base_id, pr, hooks, tests, scratch, sign)
    if signer:
        print(f"prs: signed off as {signer} (you certify the DCO for each PR branch)")
    publish.write(ws, todo, label, remote, reports, also={c.number for _, c in comments})
    for _, c in comments:
        (rfc.write if isinstance(c, rfc.Rfc) else comment.write)(ws, c)
    if do_push:
        bad = [f"{pr.number} {pr.entry.name}" for _, pr in todo if not pr.ok]
        if bad:
            raise SeriesError(
                "not pushing anything: these patches are not ready:\n"
                + "\n".join(f"  {b}" for b in bad),
                "read out/prs/<NNNN>/checks.txt, fix the patch, scripts/refresh.sh,"
                " then scripts/prs.sh again",
            )
        publish.push(vdir, remote, [pr for _, pr in todo], remote_refs)
        print(f"prs: pushed {len(todo)} branches to {remote}")
    done: list[tuple[int, PR | comment.Comment | rfc.Rfc]] = [*todo, *comments]
    return [x for _, x in sorted(done, key=lambda t: t[0])]


def main(args) -> int:
    if args.record:
        record(*args.record)
        return 0
    if args.data_for:
        record(*args.data_for, data_for=True)
        return 0
    if args.rfc_first:
        record(args.rfc_first, None, rfc_first=True)
        return 0
    if args.remote and not args.push:
        print(
            f"prs: --remote {args.remote} is used in commands.sh; nothing is pushed without --push"
        )
    done = prs(
        args.base,
        args.push,
        args.remote,
        hooks=not args.no_hooks,
        tests=not args.no_tests,
        sign=args.sign,
    )
    return 0 if all(pr.ok for pr in done) else 1


def add_parser(sub) -> None:
    p = sub.add_parser(
        "prs",
        help="make a checked upstream PR branch and text per patch",
        description="For every patch not yet upstreamed: a branch pr/<slug> in vllm/ with that "
        "patch alone on the upstream base, unsigned (--sign: signed off as you), checked "
        "(DCO, vLLM's own pre-commit hooks, the patch's tests), and its title, body and push "
        "commands in out/prs/NNNN/. --sign --push pushes all branches when every one passed; "
        "--record NNNN URL marks a patch submitted. Where the base was made from a source "
        "release (vllm/ set up without GitHub: a commit with no parent), commands.sh first "
        "moves each branch onto upstream's own commit of that release, fetched from vllm/'s "
        "remote 'upstream' or from GitHub, and refuses to push one still on it.",
    )
    p.add_argument(
        "--base",
        help="upstream ref in vllm/ to base the PRs on (default: the pin). Use it before "
        "submitting, to make and check the PRs on current upstream main (which is what they "
        "merge onto): git -C vllm fetch https://github.com/vllm-project/vllm.git "
        "main:refs/remotes/upstream/main, then --base upstream/main; --push needs it where "
        "the pin was made from a source release",
    )
    p.add_argument(
        "--sign",
        action="store_true",
        help="sign each PR commit off as vllm/'s git identity, its new author: you certify the "
        "DCO as the person who submits",
    )
    p.add_argument(
        "--push", action="store_true", help="push all branches (all must pass; needs --sign)"
    )
    p.add_argument("--remote", help="your fork: a remote of vllm/ or a URL")
    p.add_argument(
        "--record",
        nargs=2,
        metavar=("NNNN", "URL"),
        help="record a submitted PR: Upstream-Status: Submitted [URL]",
    )
    p.add_argument(
        "--data-for",
        nargs=2,
        metavar=("NNNN", "URL"),
        help="mark a patch as data for an open upstream PR (no PR of its own): "
        "Upstream-Status: Pending [data for URL]; prs then writes that PR's comment from "
        "docs/upstream/<PR number>-comment.md",
    )
    p.add_argument(
        "--rfc-first",
        metavar="NNNN",
        help="mark a patch to go upstream as an RFC before any PR: Upstream-Status: Pending "
        "[RFC first]; prs then writes the RFC issue from docs/upstream/NNNN-rfc.md",
    )
    p.add_argument("--no-hooks", action="store_true", help="skip vLLM's pre-commit hooks")
    p.add_argument("--no-tests", action="store_true", help="skip the patch's tests")
    p.set_defaults(func=main)
