"""Where PRs go: ``out/prs/<NNNN>/`` (title, body, branch, checks, commands.sh) and
``out/prs/README.md`` (how the person who submits signs and pushes), and the push of all
branches to the user's fork (only when every branch passed).

``out/prs/<NNNN>/``: title.txt, body.md, branch.txt, checks.txt, checks.json, and
commands.sh (only when every check passed). A body that names a path of the workspace is
not ready: an upstream maintainer can rerun only vLLM's own commands (paths.py).
"""

import re
import shutil
from pathlib import Path

from vseries import git, release
from vseries import pin as pinmod
from vseries.errors import SeriesError
from vseries.prs import body as prbody
from vseries.prs import checklist, paths, results
from vseries.prs import checks as prchecks
from vseries.prs.branches import PR
from vseries.workspace import Workspace

TEMPLATE = ".github/PULL_REQUEST_TEMPLATE.md"
README = """\
# Upstream PRs made by scripts/prs.sh

One folder per patch of the series: `title.txt`, `body.md` (the PR description, in the layout
of vLLM's PR template at the pin), `branch.txt` (`pr/<slug>` in vllm/: the patch alone on the
upstream base), `checks.txt` (what was checked, and why a PR is not ready) and, when ready,
`commands.sh` (push the branch to your fork and open the PR with gh). A patch that is data
for an open upstream PR has `comment.md` and `target.txt` instead.

Sign-off: the branches carry no `Signed-off-by:`. The person who submits certifies the DCO
(https://developercertificate.org/) and signs each commit off as its author, which vLLM's DCO
check requires: `scripts/prs.sh --sign` remakes the branches signed off as vllm/'s git
identity (`git commit --amend --no-edit --reset-author -s`; the AI `Co-authored-by:` trailer
stays), and `commands.sh` refuses a branch that is not signed off by its author. The patch
files keep the sign-off under which they entered the workspace.

Base: where vllm/ was set up from the source release (no GitHub), the branches sit on a
commit made from it, with no parent; `commands.sh` moves each onto upstream's commit of the
release (fetched from vllm/'s remote `upstream`, else from GitHub) before it pushes. PRs merge
onto upstream main: `scripts/prs.sh --base upstream/main` (after `git -C vllm fetch
https://github.com/vllm-project/vllm.git main:refs/remotes/upstream/main`) makes and checks
them there.

Checklist: the AI-assistance box is ticked from the patch's AI `Co-authored-by:` trailer; the
`/pr-checklist` box and the four review boxes only from a current report of vLLM's
pr-checklist skill in `docs/upstream/checklist/<slug>.md` (see `checks.txt`). A PR is ready
only when that report is current and finds every review box met.
"""
LS_REMOTE_TIMEOUT = 20  # seconds; a remote that does not answer in that time is unreachable


def _github_repo(url: str) -> str | None:
    m = re.search(r"github\.com[:/]([^/]+/[^/]+?)(?:\.git)?/?$", url)
    return m.group(1) if m else None


def ls_remote(vdir: Path, remote: str) -> dict[str, str]:
    """{ref: id} of the remote's branches.

    Raises:
        SeriesError: the remote does not answer within LS_REMOTE_TIMEOUT seconds, or refuses.
    """
    env = {"GIT_SSH_COMMAND": "ssh -o BatchMode=yes -o ConnectTimeout=10"}
    r = git.call(vdir, "ls-remote", "--heads", remote, env=env, timeout=LS_REMOTE_TIMEOUT)
    err = "" if r.ok else (r.err.strip() or f"exit {r.code}")
    if err:
        raise SeriesError(
            f"remote {remote!r} is not reachable from here ({err.splitlines()[-1]}); "
            "nothing was pushed",
            f"run scripts/prs.sh without --push and use out/prs/*/commands.sh on a "
            f"host that reaches {remote}",
        )
    return {ref: sha for sha, ref in (x.split("\t") for x in r.out.splitlines() if x)}


def push(vdir: Path, remote: str, prs: list[PR], remote_refs: dict[str, str]) -> None:
    """Push every PR branch in one atomic push; each ref leased on what ls-remote saw (so a
    branch changed on the fork since then is not overwritten)."""
    args = []
    for pr in prs:
        ref = f"refs/heads/{pr.branch}"
        args += [f"--force-with-lease={ref}:{remote_refs.get(ref, '')}", f"{pr.branch}:{ref}"]
    leases = [a for a in args if a.startswith("--")]
    specs = [a for a in args if not a.startswith("--")]
    git.run(vdir, "push", "--atomic", *leases, remote, *specs)


def pr_template(vdir: Path, commit: str) -> str | None:
    """The base's ``.github/PULL_REQUEST_TEMPLATE.md`` at the pinned commit (None: it has
    none): the layout the bodies follow."""
    r = git.call(vdir, "show", f"{commit}:{TEMPLATE}")
    return r.out if r.ok else None


def _unchecked(pr: PR) -> str:
    """' (not checked: ...)' naming the checks --no-hooks / --no-tests left out, or ''."""
    c = pr.checks
    left = [
        what
        for what, ran in (
            ("vLLM's pre-commit hooks (--no-hooks)", c is None or c.ran_hooks),
            ("the patch's tests (--no-tests)", c is None or c.ran_tests),
        )
        if not ran
    ]
    return f" (not checked: {', '.join(left)})" if left else ""


def write(
    ws: Workspace,
    todo: list[tuple[int, PR]],
    label: str,
    remote: str | None,
    reports: dict[str, str],
    also: set[str] | frozenset[str] = frozenset(),
) -> None:
    """out/prs/<NNNN>/ for each PR; folders of patches no longer in the run are removed.

    Args:
        todo: (series index, PR) of each patch not upstreamed.
        label: the base as the body names it, e.g. "v0.21.0 (9da56fd18b95)".
        remote: the fork, for commands.sh (None: "fork").
        reports: the checks' full text by PR number (checks.txt).
        also: numbers of the run's other folders (comments, comment.py): not removed here.
    """
    out = ws.root / "out" / "prs"
    out.mkdir(parents=True, exist_ok=True)
    keep = {pr.number for _, pr in todo} | set(also)
    for d in out.iterdir():
        if d.is_dir() and re.fullmatch(r"\d{4}", d.name) and d.name not in keep:
            shutil.rmtree(d)
    pin = pinmod.load(ws.pin_file)
    upstream = _github_repo(pin.repo) or pin.repo
    owner = None
    if remote:
        url = git.run(ws.vllm, "remote", "get-url", remote, check=False) or remote
        owner = (_github_repo(url) or "/").split("/")[0] or None
    found = ws.root / "benchmarks" / "results"
    files = results.result_files(found)  # read once for every PR
    template = pr_template(ws.vllm, pin.commit)
    (out / "README.md").write_text(README)
    for _, pr in todo:
        d = out / pr.number
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir()
        foreign = paths.checker(ws.root, ws.vllm, pr.commit or pin.commit)
        names = results.bench_names(pr.entry.options)
        if "bench" in pr.entry.options:
            typo, known = results.unmatched(found, names, files)
            if typo:
                pr.problems.append(
                    f"patches/series: bench={','.join(typo)} matches no results under "
                    f"benchmarks/results (its figures would be left out); names there: "
                    f"{', '.join(known[:12])}{' ...' if len(known) > 12 else ''}"
                )
        benches, names, notes, missing = prbody.upstream_only(
            results.load_results(found, names, files), names, foreign
        )
        patch_id = git.patch_id(ws.vllm, pr.entry.path.read_text(errors="replace")) or ""
        review = checklist.read(ws.root, pr.slug, patch_id)
        notes.append(checklist.note(review, pr.slug, patch_id))
        title = prbody.title(pr.info)
        (d / "title.txt").write_text(title + "\n")
        text = prbody.body(pr.info, label, benches, names, pr.checks, template, review, missing)
        (d / "body.md").write_text(text)
        pr.problems += checklist.agents_gaps(pr.info.message, pr.info.coauthors)
        bad = foreign(text)
        if bad:
            pr.problems.append(
                f"the body names the workspace's {', '.join(bad)}: an upstream PR names only "
                "vLLM's own commands and paths (pytest tests/..., vllm bench, benchmarks/kernels/"
                "...); rewrite the patch message where it names them (in vllm/: git commit "
                "--amend, then scripts/refresh.sh)"
            )
        pr.problems += prchecks.unfinished(text)
        block = prbody.CHECKLIST.search(template or "")
        pr.problems += checklist.unmet(
            review, pr.slug, patch_id, checklist.review_boxes(block.group(0) if block else "")
        )
        (d / "branch.txt").write_text(pr.branch + "\n")
        if pr.checks:
            (d / "checks.json").write_text(pr.checks.to_json())
        verdict = (
            f"ready{_unchecked(pr)}"
            if pr.ok
            else "NOT READY:\n" + "\n".join(f"- {p}" for p in pr.problems)
        )
        (d / "checks.txt").write_text(
            f"patch {pr.entry.name}\nbranch {pr.branch} at {pr.commit or '(not made)'} on "
            f"{label}\n{verdict}\n\n{reports.get(pr.number, '')}\n\n"
            + "".join(f"{n}\n" for n in notes)
        )
        cmd = d / "commands.sh"
        if pr.ok:
            m = re.match(r"Submitted \[(.+)\]", pr.info.status)
            cmd.write_text(
                prbody.commands(
                    pr.number,
                    pr.branch,
                    title,
                    remote or "fork",
                    upstream,
                    owner,
                    m.group(1) if m else None,
                    release.stands_in(ws.vllm, git.run(ws.vllm, "rev-parse", f"{pr.commit}^")),
                    pin.repo,
                )
            )
            cmd.chmod(0o755)
        print(
            f"prs: {pr.number} {pr.branch:60} "
            + (f"ready{_unchecked(pr)}" if pr.ok else f"NOT READY ({len(pr.problems)} problems)")
        )
        for p in pr.problems:
            print("    " + p.replace("\n", "\n    ")[:3000])
    print(f"prs: wrote {ws.rel(out)}/ ({len(todo)} PRs)")
