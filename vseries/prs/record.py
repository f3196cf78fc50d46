"""``prs --record NNNN URL``: mark a patch as submitted upstream, in vllm/ and in patches/;
``prs --data-for NNNN URL``: mark it as data for an open upstream PR (comment.py);
``prs --rfc-first NNNN``: mark it to go upstream as an RFC first (rfc.py)."""

from pathlib import Path

from vseries import am, git, patchfile, refresh, series
from vseries import pin as pinmod
from vseries.errors import SeriesError
from vseries.prs import rfc
from vseries.prs.branches import number as prnumber
from vseries.prs.comment import PR_URL
from vseries.workspace import Workspace


def record(
    number: str,
    url: str | None,
    ws: Workspace | None = None,
    *,
    data_for: bool = False,
    rfc_first: bool = False,
) -> Path:
    """Set patch ``number``'s trailer to ``Upstream-Status: Submitted [url]``, or with
    ``data_for`` to ``Upstream-Status: Pending [data for url]`` (an open PR that makes the
    patch's change: the patch goes there as data, comment.py, not as a PR of its own), or
    with ``rfc_first`` (no url) to ``Upstream-Status: Pending [RFC first]`` (rfc.py).

    The way: rewrite the message of that commit on vllm/'s ``series`` branch with
    ``git interpret-trailers`` and replay it and the commits after it with ``git commit-tree``
    (same trees, authors, dates), move the branch with a compare-and-swap ``update-ref``, then
    refresh() exports the patch files. Editing only the patch file would not do: apply.py
    compares patch-ids, which ignore messages, so vllm/ would keep the old trailer and the next
    refresh would bring it back. Trees do not change, so the working tree is not touched.

    Returns the patch file. Raises:
        SeriesError: bad number, or a URL that is no pull request's; the patch is
            Accepted already; vllm/ is not on the series branch holding exactly the series
            (then: scripts/apply.sh).
    """
    flag = "--data-for" if data_for else "--rfc-first" if rfc_first else "--record"
    # a pull request's, so that gh can edit it (commands.sh)
    if not rfc_first and not PR_URL.match(url or ""):
        raise SeriesError(
            f"{url!r} is not a PR URL",
            f"scripts/prs.sh {flag} 0001 https://github.com/vllm-project/vllm/pull/N",
        )
    wanted_status = (
        rfc.STATUS
        if rfc_first
        else f"Pending [data for {url}]"
        if data_for
        else f"Submitted [{url}]"
    )
    ws = ws or Workspace.current()
    wanted = f"{int(number):04d}" if number.isdigit() else number
    entries = series.load(ws)
    idx = [i for i, e in enumerate(entries) if prnumber(e, i) == wanted]
    if not idx:
        raise SeriesError(f"no patch numbered {wanted} in patches/series", "cat patches/series")
    i, entry = idx[0], entries[idx[0]]
    before = patchfile.info(entry.path).status
    if before.startswith("Accepted"):
        raise SeriesError(f"{entry.name} is upstream already; nothing to record")
    pin = pinmod.load(ws.pin_file)
    vdir = ws.vllm
    commits = []
    if (
        git.is_repo(vdir)
        and not git.in_progress(vdir)
        and not git.dirty(vdir)
        and git.head_branch(vdir) == am.BRANCH
    ):
        pairs = git.commit_patch_ids(vdir, pin.commit, "HEAD")
        if [p for _, p in pairs] == am.wanted_ids(vdir, entries):
            commits = [c for c, _ in pairs]
    if not commits:
        raise SeriesError(
            "vllm/ is not on the series branch holding exactly patches/series "
            "(clean, no am in progress)",
            "scripts/apply.sh   # then record again",
        )
    old_tip = commits[-1]
    parent = git.rev(vdir, f"{commits[i]}^")
    for k, c in enumerate(commits[i:]):
        raw = git.run(vdir, "cat-file", "commit", c) + "\n"
        msg = raw.split("\n\n", 1)[1]
        if k == 0:
            msg = (
                git.run(
                    vdir,
                    "interpret-trailers",
                    "--if-exists",
                    "replace",
                    "--where",
                    "after",
                    "--trailer",
                    f"Upstream-Status: {wanted_status}",
                    input=msg,
                )
                + "\n"
            )
        who = git.run(
            vdir, "log", "-1", "--format=%an%x00%ae%x00%ad%x00%cn%x00%ce%x00%cd", "--date=raw", c
        ).split("\x00")
        env = dict(
            zip(
                (
                    "GIT_AUTHOR_NAME",
                    "GIT_AUTHOR_EMAIL",
                    "GIT_AUTHOR_DATE",
                    "GIT_COMMITTER_NAME",
                    "GIT_COMMITTER_EMAIL",
                    "GIT_COMMITTER_DATE",
                ),
                who,
                strict=True,
            )
        )
        parent = git.run(
            vdir, "commit-tree", f"{c}^{{tree}}", "-p", parent, "-F", "-", input=msg, env=env
        )
    git.run(
        vdir,
        "update-ref",
        "-m",
        f"vseries prs {flag} {wanted}",
        f"refs/heads/{am.BRANCH}",
        parent,
        old_tip,
    )
    refresh.refresh(ws=ws)
    status = patchfile.info(entry.path).status
    if status != wanted_status:
        raise SeriesError(f"{entry.name} says Upstream-Status: {status} after the refresh")
    was = f" (was: {before})" if before and before != status else ""
    print(f"prs: {entry.name}: Upstream-Status: {status}{was}")
    return entry.path
