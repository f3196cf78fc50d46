"""prs: turn each carried patch into an upstream pull request: a branch, checks, and its text.

For every patch not yet upstreamed (Upstream-Status not ``Accepted [...]``), in series order:

1. branch ``pr/<slug>`` in vllm/ (slug: from the subject, see PR.slug) = the upstream base
   (the pin, or ``--base <ref>``) + that ONE patch, applied with ``git am -3 -k`` in a
   temporary worktree (``git worktree add``), so the ``series`` branch and HEAD of vllm/ are
   never touched. The Upstream-Status line is stripped from the commit (a workspace header);
   Signed-off-by stays. A patch that does not apply alone is reported, with the earlier
   patches it needs when it applies after them (a hidden dependency), instead of being
   stacked silently.
2. checks on the branch: DCO (a Signed-off-by of the author on every commit); vLLM's own
   pre-commit hooks on the touched files, from a config derived from the branch's
   ``.pre-commit-config.yaml`` (derive_config(): remote hook repositories become ``repo: local``
   hooks installed from PyPI at the pinned versions; the stage is pre-commit, what a
   contributor's commit runs, so mypy is vLLM's ``mypy-local``: the touched files, imports
   skipped, Python 3.10; its CI-only ``mypy-3.x`` hooks follow imports through all of vllm/ and
   are left to vLLM's CI); the test files the patch adds or changes,
   run with pytest on this host with ``CUDA_VISIBLE_DEVICES=""`` (tests that need CUDA are
   listed as not run).
3. ``out/prs/<NNNN>/``: title.txt, body.md (prbody.py says how results are found),
   branch.txt, checks.txt, checks.json, and commands.sh (only when every check passed).
4. ``--push --remote <fork>``: after every branch passed, one atomic push of all branches to a
   remote that answered ``git ls-remote`` first. ``--record NNNN URL`` sets that patch's
   trailer to ``Submitted [URL]`` (see record()).
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from identify.identify import tags_from_filename, tags_from_path

from vseries import git, paths, prbody, refresh, series
from vseries import pin as pinmod
from vseries.apply import BRANCH, am, explain, wanted_ids
from vseries.errors import SeriesError

LS_REMOTE_TIMEOUT = 20  # seconds; a remote that does not answer in that time is unreachable
TEST_TIMEOUT = 1800  # seconds for one patch's tests
# vLLM's tests/conftest.py imports these beyond vLLM's runtime requirements; installed (at the
# version vLLM's requirements/test/cuda.txt pins) into a cached folder put on PYTHONPATH
TEST_DEPS = ("tblib",)


@dataclass
class PR:
    """One patch on its way upstream."""

    entry: series.Entry
    number: str  # "0001", from the file name
    info: prbody.PatchInfo
    commit: str | None = None  # the branch tip, when the patch applied alone
    problems: list[str] = field(default_factory=list)
    checks: prbody.Checks | None = None

    @property
    def slug(self) -> str:
        """The subject in lower case, runs of other characters as '-', cut at a word near 64
        characters ('[Perf][Kernel] Swap A/B' -> 'perf-kernel-swap-a-b')."""
        s = re.sub(r"[^a-z0-9]+", "-", self.info.subject.lower()).strip("-")
        return s if len(s) <= 64 else s[:64].rsplit("-", 1)[0]

    @property
    def branch(self) -> str:
        return f"pr/{self.slug}"

    @property
    def ok(self) -> bool:
        return self.commit is not None and not self.problems


def _number(entry: series.Entry, index: int) -> str:
    m = re.match(r"^(\d{4})-", entry.name)
    return m.group(1) if m else f"{index + 1:04d}"


def _am(wt: Path, patch: Path) -> tuple[bool, str]:
    """git am -3 -k one patch in the worktree; on failure abort and say why."""
    out = am(wt, patch)
    if not git.in_progress(wt):
        return True, out
    why = explain(wt, patch, out)
    git.run(wt, "am", "--abort", check=False)
    return False, why


def _reset(wt: Path, base: str) -> None:
    git.run(wt, "checkout", "-q", "-f", "--detach", base)
    git.run(wt, "clean", "-q", "-fdx")


def make_branch(
    vdir: Path, wt: Path, base: str, entries: list[series.Entry], i: int, pr: PR, tmp: Path
) -> None:
    """Apply patch i alone on base in worktree wt; on success set refs/heads/pr/<slug>.
    Records a problem on pr (hidden dependency, or no fit at all) otherwise."""
    _reset(wt, base)
    stripped = tmp / entries[i].name
    stripped.write_text(prbody.strip_status(entries[i].path.read_text(errors="replace")))
    ok, why = _am(wt, stripped)
    if ok:
        pr.commit = git.rev(wt, "HEAD")
        git.run(vdir, "update-ref", "-m", "vseries prs", f"refs/heads/{pr.branch}", pr.commit)
        return
    # does it apply after the earlier patches? then name the ones it needs
    needs = []
    for j in range(i):
        _reset(wt, base)
        if _am(wt, entries[j].path)[0] and _am(wt, stripped)[0]:
            needs.append(entries[j].name)
    if not needs and i:
        _reset(wt, base)
        if all(_am(wt, entries[j].path)[0] for j in range(i)) and _am(wt, stripped)[0]:
            needs = ["the earlier patches together"]
    if needs:
        pr.problems.append(
            f"does not apply alone on the base; it applies after {', '.join(needs)} "
            f"(a hidden dependency between patches). Upstream PRs must stand alone: move the "
            f"shared change into one patch, or submit {needs[0]} first and mark this PR as "
            f"depending on it. Alone it fails at:\n{why}"
        )
    else:
        pr.problems.append(f"does not apply on the base:\n{why}")


def dco(wt: Path, base: str) -> tuple[list[str], list[str]]:
    """(problems, signers) for the commits base..HEAD: each needs a Signed-off-by of its
    author (vLLM enforces the DCO)."""
    problems, signers = [], []
    log = git.run(
        wt,
        "log",
        "--reverse",
        "--format=%h%x00%s%x00%an <%ae>%x00"
        "%(trailers:key=Signed-off-by,valueonly,separator=%x1f)%x1e",
        f"{base}..HEAD",
    )
    for rec in filter(str.strip, log.split("\x1e")):
        short, subject, author, signed = rec.strip("\n").split("\x00")
        sobs = [s.strip() for s in signed.split("\x1f") if s.strip()]
        signers += sobs
        if not sobs:
            problems.append(
                f"commit {short} ({subject}) has no Signed-off-by: line; vLLM "
                "requires the DCO (git commit -s)"
            )
        elif author not in sobs:
            problems.append(
                f"commit {short} ({subject}) is not signed off by its author "
                f"{author} (signed off by: {', '.join(sobs)})"
            )
    return problems, list(dict.fromkeys(signers))


# --- vLLM's pre-commit hooks, offline ------------------------------------------------------

# Hook repositories that pre-commit would clone from GitHub, and the PyPI project that ships
# the same tool at the same version (rev "v0.14.0" -> ruff==0.14.0); the hook definitions are
# those of each repository's .pre-commit-hooks.yaml at that rev.
_PY = ["python", "pyi", "jupyter"]
REMOTE_HOOKS = {
    "https://github.com/astral-sh/ruff-pre-commit": (
        "ruff",
        {
            "ruff-check": {
                "entry": "ruff check --force-exclude",
                "types_or": _PY,
                "require_serial": True,
            },
            "ruff": {
                "entry": "ruff check --force-exclude",
                "types_or": _PY,
                "require_serial": True,
            },
            "ruff-format": {
                "entry": "ruff format --force-exclude",
                "types_or": _PY,
                "require_serial": True,
            },
        },
    ),
    "https://github.com/crate-ci/typos": (
        "typos",
        {
            "typos": {
                "entry": "typos",
                "args": ["--write-changes", "--force-exclude"],
                "types": ["text"],
            }
        },
    ),
    "https://github.com/pre-commit/mirrors-clang-format": (
        "clang-format",
        {
            "clang-format": {
                "entry": "clang-format -i",
                "types_or": [
                    "c++",
                    "c",
                    "c#",
                    "cuda",
                    "java",
                    "javascript",
                    "json",
                    "objective-c",
                    "proto",
                    "textproto",
                ],
            }
        },
    ),
}
# Hooks of repositories with no PyPI route here: only what selects their files, to say "not
# run" where one applies (pip-compile resolves against package indexes; vLLM sets its files)
UNRUNNABLE = {
    "markdownlint-cli2": {"types": ["markdown"]},
    "actionlint": {"files": r"^\.github/workflows/", "types": ["yaml"]},
    "pip-compile": {},
}
# vLLM's local hooks that reach outside at run time, or only print advice
LOCAL_OFFLINE = {"shellcheck": "tools/pre_commit/shellcheck.sh downloads shellcheck from GitHub"}
LOCAL_DROP = {"suggestion"}
STAGE = "pre-commit"  # what a contributor's commit runs; vLLM's CI runs the manual stage too


def _applies(hook: dict, config: dict, tree: Path, files: list[str]) -> bool:
    """pre-commit's own selection: stage, files/exclude regexes, identify types."""
    stages = hook.get("stages") or config.get("default_stages") or [STAGE]
    if STAGE not in stages and "commit" not in stages:
        return False
    if hook.get("always_run"):
        return True
    for f in files:
        if not re.search(config.get("files", ""), f) or re.search(config.get("exclude", "^$"), f):
            continue
        if not re.search(hook.get("files", ""), f) or re.search(hook.get("exclude", "^$"), f):
            continue
        try:
            tags = tags_from_path(str(tree / f))
        except ValueError:  # not in the tree (a path named by hand): judge by its name
            tags = tags_from_filename(f) | {"file"}
        if (
            set(hook.get("types", ["file"])) <= tags
            and (not hook.get("types_or") or tags & set(hook["types_or"]))
            and not tags & set(hook.get("exclude_types", []))
        ):
            return True
    return False


def derive_config(tree: Path, files: list[str]) -> tuple[dict, list[list[str]]]:
    """From ``tree/.pre-commit-config.yaml``: a config of the hooks that apply to ``files``,
    all ``repo: local`` (remote ones installed from PyPI at the rev vLLM pins), and
    [hook id, reason] of applicable hooks that cannot run here.

    Raises:
        SeriesError: the tree's pre-commit config is not valid YAML.
    """
    src = tree / ".pre-commit-config.yaml"
    if not src.exists():
        return {"repos": [{"repo": "local", "hooks": []}]}, [
            ["(all)", "the base has no .pre-commit-config.yaml"]
        ]
    try:
        config = yaml.safe_load(src.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise SeriesError(f"cannot read vLLM's pre-commit config {src}: {e}") from None
    hooks, not_run = [], []
    for repo in config.get("repos", []):
        url = repo["repo"].removesuffix(".git")
        for hook in repo.get("hooks", []):
            if url in ("local", "meta"):
                full = dict(hook)
            else:
                project, known = REMOTE_HOOKS.get(url, (None, {}))
                full = {
                    "id": hook["id"],
                    "name": hook["id"],
                    "language": "python",
                    **known.get(hook["id"], UNRUNNABLE.get(hook["id"], {})),
                    **hook,
                }
            if hook["id"] in LOCAL_DROP or not _applies(full, config, tree, files):
                continue
            if url == "meta" or (url != "local" and hook["id"] not in known):
                not_run.append(
                    [
                        hook["id"],
                        f"its repository {repo['repo']} is cloned from "
                        "GitHub and has no PyPI equivalent here",
                    ]
                )
            elif hook["id"] in LOCAL_OFFLINE:
                not_run.append([hook["id"], LOCAL_OFFLINE[hook["id"]]])
            else:
                if url != "local":
                    full["additional_dependencies"] = [
                        f"{project}=={repo['rev'].removeprefix('v')}",
                        *hook.get("additional_dependencies", []),
                    ]
                hooks.append(full)
    derived = {k: v for k, v in config.items() if k in ("default_stages", "exclude", "files")}
    derived["repos"] = [{"repo": "local", "hooks": hooks}]
    return derived, not_run


def run_hooks(
    tree: Path, files: list[str], scratch: Path
) -> tuple[bool, str, list[list[str]], list[list[str]]]:
    """``pre-commit run -c <derived> --files <files>`` in tree, hook environments cached in
    PRE_COMMIT_HOME (default ~/.cache/pre-commit; the first run installs them from PyPI).

    Returns (all passed, output, [hook id, verdict], [hook id, reason not run]).
    """
    derived, not_run = derive_config(tree, files)
    scratch.mkdir(parents=True, exist_ok=True)
    cfg = scratch / "derived-pre-commit-config.yaml"
    cfg.write_text(
        "# Derived by vseries prs from vLLM's .pre-commit-config.yaml: the hooks "
        "that apply\n# to the touched files, as repo: local (no GitHub clones)\n"
        + yaml.safe_dump(derived, sort_keys=False)
    )
    if not derived["repos"][0]["hooks"]:
        return True, "(no hook applies to the touched files)", [], not_run
    env = {k: v for k, v in os.environ.items() if k != "SKIP"}
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pre_commit",
            "run",
            "-c",
            str(cfg),
            "--hook-stage",
            STAGE,
            "--color",
            "never",
            "--show-diff-on-failure",
            "--files",
            *files,
        ],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    output = re.sub(r"\x1b\[[0-9;]*m", "", p.stdout + p.stderr)  # hooks that colour anyway
    ids = {h["name"]: h["id"] for h in reversed(derived["repos"][0]["hooks"]) if "name" in h}
    verdicts = [
        [ids.get(m.group(1), m.group(1)), m.group(3)]
        for m in re.finditer(
            r"^(.+?)\.{3,}(\(no files to check\))?(Passed|Failed|Skipped)$", output, re.M
        )
    ]
    return p.returncode == 0, output, verdicts, not_run


def hook_failures(output: str) -> str:
    """The blocks of pre-commit's output of the failing hooks, and the diff of what they would
    change (what to fix is there)."""
    blocks = re.split(
        r"(?m)^(?=.+?\.{3,}(?:\(no files to check\))?(?:Passed|Failed|Skipped)$"
        r"|All changes made by hooks:$)",
        output,
    )
    keep = [
        b.strip()
        for b in blocks
        if re.match(r".+?\.{3,}Failed$", b, re.M) or b.startswith("All changes")
    ]
    return ("\n\n".join(keep) or output.strip())[-4000:]


def _test_path(tree: Path) -> str:
    """A folder with the TEST_DEPS that tree's tests/conftest.py imports, for PYTHONPATH ("" when
    the interpreter has them already)."""
    conftest = tree / "tests" / "conftest.py"
    wanted = [
        m
        for m in TEST_DEPS
        if conftest.exists() and re.search(rf"^\s*(import|from) {m}\b", conftest.read_text(), re.M)
    ]
    missing = [
        m
        for m in wanted
        if subprocess.run([sys.executable, "-c", f"import {m}"], capture_output=True).returncode
    ]
    if not missing:
        return ""
    pins = tree / "requirements/test/cuda.txt"
    text = pins.read_text() if pins.exists() else ""
    reqs = [(re.search(rf"^({m}==\S+)", text, re.M) or [m])[0] for m in missing]
    dest = paths.cache_dir() / "prs-testdeps" / "-".join(sorted(reqs))
    if not dest.is_dir():
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--target",
                str(dest),
                *reqs,
            ],
            capture_output=True,
            text=True,
        )
        if p.returncode:
            shutil.rmtree(dest, ignore_errors=True)
            raise SeriesError(
                f"could not install {reqs} for vLLM's tests/conftest.py:\n"
                f"{p.stderr.strip()[-800:]}",
                f"pip install {' '.join(reqs)}",
            )
    return str(dest)


def run_tests(wt: Path, tests: list[str], checks: prbody.Checks) -> None:
    """pytest the patch's test files in the worktree (its vllm on PYTHONPATH, no CUDA) and
    sort each test into passed / failed / needs CUDA / skipped on checks."""
    checks.tests = tests
    if not tests:
        return
    junit = wt / ".vseries-junit.xml"
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": "",
        "PYTHONPATH": os.pathsep.join(x for x in (str(wt), _test_path(wt)) if x),
    }
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-o",
        "junit_family=xunit1",
        f"--junitxml={junit}",
        *tests,
    ]
    try:
        p = subprocess.run(
            cmd, cwd=wt, env=env, capture_output=True, text=True, timeout=TEST_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        checks.problems.append(f"tests ran past {TEST_TIMEOUT} s: {' '.join(tests)}")
        return
    if not junit.exists():
        checks.problems.append(
            f"pytest exited {p.returncode} without a report:\n"
            + (p.stdout + p.stderr).strip()[-1500:]
        )
        return
    for case in ET.parse(junit).getroot().iter("testcase"):
        node = f"{case.get('file') or case.get('classname', '')}::{case.get('name', '')}"
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        skip = case.find("skipped")
        if bad is not None:
            text = f"{bad.get('message', '')}\n{bad.text or ''}"
            if prbody.CUDA_ABSENT.search(text):
                checks.needs_cuda.append(node)
            else:
                checks.failed.append(node)
                checks.problems.append(f"test {node} fails: {bad.get('message', '')[:300]}")
        elif skip is not None:
            reason = re.sub(r"^Skipped: ", "", skip.get("message", ""))
            if prbody.CUDA_ABSENT.search(reason) or re.search(r"\b(cuda|gpu)\b", reason, re.I):
                checks.needs_cuda.append(node)
            else:
                checks.skipped.append([node, reason])
        else:
            checks.passed.append(node)
    if p.returncode == 5:
        checks.problems.append(f"pytest collected no test from {' '.join(tests)}")


def check(wt: Path, base: str, pr: PR, hooks: bool, tests: bool, scratch: Path) -> str:
    """Run the checks on the branch checked out in wt; fills pr.checks and pr.problems.
    Returns the full report text (hook output included)."""
    c = pr.checks = prbody.Checks(ran_hooks=hooks, ran_tests=tests)
    problems, c.signers = dco(wt, base)
    c.problems += problems
    report = [f"DCO: {'; '.join(problems) or 'ok, signed off by ' + ', '.join(c.signers)}"]
    files = git.run(wt, "diff", "--name-only", "--diff-filter=d", base, "HEAD").split("\n")
    files = [f for f in files if f]
    if hooks:
        start = time.monotonic()
        ok, output, c.hooks, c.hooks_not_run = run_hooks(wt, files, scratch / "pre-commit")
        report.append(f"pre-commit ({time.monotonic() - start:.1f} s):\n" + output.strip())
        if not ok and not c.hooks:
            c.problems.append(
                "pre-commit could not run vLLM's hooks (the first run installs "
                "their environments from PyPI):\n" + output.strip()[-2000:]
            )
        elif not ok:
            failed = ", ".join(h for h, v in c.hooks if v == "Failed")
            c.problems.append(
                f"vLLM's pre-commit hooks fail on the touched files ({failed}):\n"
                + hook_failures(output)
            )
    if not hooks:
        report.append("pre-commit: not run (--no-hooks)")
    if tests:
        start = time.monotonic()
        run_tests(wt, pr.info.tests, c)
        report.append(
            f"tests ({time.monotonic() - start:.1f} s): {len(c.passed)} passed, "
            f"{len(c.failed)} failed, {len(c.needs_cuda)} need CUDA, "
            f"{len(c.skipped)} skipped: {' '.join(c.tests) or '(none in the patch)'}"
        )
    else:
        report.append("tests: not run (--no-tests)")
    pr.problems += c.problems
    return "\n\n".join(report)


def _github_repo(url: str) -> str | None:
    m = re.search(r"github\.com[:/]([^/]+/[^/]+?)(?:\.git)?/?$", url)
    return m.group(1) if m else None


def ls_remote(vdir: Path, remote: str) -> dict[str, str]:
    """{ref: id} of the remote's branches.

    Raises:
        SeriesError: the remote does not answer within LS_REMOTE_TIMEOUT seconds, or refuses.
    """
    env = {
        **os.environ,
        "GIT_TERMINAL_PROMPT": "0",
        "LC_ALL": "C",
        "GIT_SSH_COMMAND": "ssh -o BatchMode=yes -o ConnectTimeout=10",
    }
    try:
        p = subprocess.run(
            ["git", "-C", str(vdir), "ls-remote", "--heads", remote],
            capture_output=True,
            text=True,
            env=env,
            timeout=LS_REMOTE_TIMEOUT,
        )
        err = (p.stderr.strip() or f"exit {p.returncode}") if p.returncode else ""
    except subprocess.TimeoutExpired:
        err = f"no answer within {LS_REMOTE_TIMEOUT} s"
    if err:
        raise SeriesError(
            f"remote {remote!r} is not reachable from here ({err.splitlines()[-1]}); "
            "nothing was pushed",
            f"run scripts/prs.sh without --push and use out/prs/*/commands.sh on a "
            f"host that reaches {remote}",
        )
    return {ref: sha for sha, ref in (x.split("\t") for x in p.stdout.splitlines() if x)}


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


def prs(
    base: str | None = None,
    do_push: bool = False,
    remote: str | None = None,
    hooks: bool = True,
    tests: bool = True,
) -> list[PR]:
    """Make, check and describe a PR branch per patch not upstreamed; optionally push them.

    Args:
        base: an upstream ref that resolves in vllm/ (default: the pin's commit).
        do_push: push all branches to ``remote`` (needs every branch to pass).
        remote: the fork (a remote name of vllm/ or a URL); used in commands.sh too.
        hooks, tests: run the pre-commit hooks / the patch's tests (on by default).

    Returns the PRs, with their problems (empty when ready).

    Raises:
        SeriesError: vllm/ missing; base not resolving; --push without a reachable remote,
            or with a branch that failed (nothing pushed then).
    """
    pin = pinmod.load()
    vdir = paths.vllm_dir()
    git.require_checkout(vdir, idle=False)
    base_id = git.rev(vdir, base or pin.commit)
    if not base_id:
        raise SeriesError(
            f"--base {base} does not resolve to a commit in vllm/",
            "git -C vllm tag --list   # or scripts/rebase.sh to bring a newer "
            "upstream release into vllm/",
        )
    label = f"{base or pin.tag} ({base_id[:12]})"
    if do_push and not remote:
        raise SeriesError(
            "--push needs --remote <your fork>", "scripts/prs.sh --push --remote fork"
        )
    remote_refs = ls_remote(vdir, remote) if do_push else {}
    entries = series.load()
    todo = []
    for i, e in enumerate(entries):
        info = prbody.parse(e.path)
        if info.status.startswith("Accepted"):
            print(f"prs: {e.name}: upstream already ({info.status}); no PR")
            continue
        todo.append((i, PR(e, _number(e, i), info)))
    state = paths.state_dir()
    state.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="prs-", dir=state))
    wt = scratch / "worktree"
    reports = {}
    try:
        git.run(vdir, "worktree", "add", "-q", "--detach", str(wt), base_id)
        for i, pr in todo:
            make_branch(vdir, wt, base_id, entries, i, pr, scratch)
            if pr.commit:
                print(f"prs: {pr.number} {pr.branch}: checking ...", flush=True)
                reports[pr.number] = check(wt, base_id, pr, hooks, tests, scratch)
    finally:
        git.run(vdir, "worktree", "remove", "--force", str(wt), check=False)
        shutil.rmtree(scratch, ignore_errors=True)
        git.run(vdir, "worktree", "prune", check=False)
    write(todo, label, base_id, remote, reports)
    if do_push:
        bad = [f"{pr.number} {pr.entry.name}" for _, pr in todo if not pr.ok]
        if bad:
            raise SeriesError(
                "not pushing anything: these patches are not ready:\n"
                + "\n".join(f"  {b}" for b in bad),
                "read out/prs/<NNNN>/checks.txt, fix the patch, scripts/refresh.sh,"
                " then scripts/prs.sh again",
            )
        push(vdir, remote, [pr for _, pr in todo], remote_refs)
        print(f"prs: pushed {len(todo)} branches to {remote}")
    return [pr for _, pr in todo]


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
    todo: list[tuple[int, PR]],
    label: str,
    base_id: str,
    remote: str | None,
    reports: dict[str, str],
) -> None:
    """out/prs/<NNNN>/ for each PR; folders of patches no longer in the run are removed."""
    out = paths.root() / "out" / "prs"
    out.mkdir(parents=True, exist_ok=True)
    keep = {pr.number for _, pr in todo}
    for d in out.iterdir():
        if d.is_dir() and re.fullmatch(r"\d{4}", d.name) and d.name not in keep:
            shutil.rmtree(d)
    pin = pinmod.load()
    upstream = _github_repo(pin.repo) or pin.repo
    owner = None
    if remote:
        url = git.run(paths.vllm_dir(), "remote", "get-url", remote, check=False) or remote
        owner = (_github_repo(url) or "/").split("/")[0] or None
    results = paths.root() / "benchmarks" / "results"
    for _, pr in todo:
        d = out / pr.number
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir()
        names = prbody.bench_names(pr.entry.options)
        title = prbody.title(pr.info)
        (d / "title.txt").write_text(title + "\n")
        (d / "body.md").write_text(
            prbody.body(pr.info, label, prbody.load_results(results, names), names, pr.checks)
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
            f"{label}\n{verdict}\n\n{reports.get(pr.number, '')}\n"
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
                )
            )
            cmd.chmod(0o755)
        print(
            f"prs: {pr.number} {pr.branch:60} "
            + (f"ready{_unchecked(pr)}" if pr.ok else f"NOT READY ({len(pr.problems)} problems)")
        )
        for p in pr.problems:
            print("    " + p.replace("\n", "\n    ")[:3000])
    print(f"prs: wrote {out.relative_to(paths.root())}/ ({len(todo)} PRs)")


def record(number: str, url: str) -> Path:
    """Set patch ``number``'s trailer to ``Upstream-Status: Submitted [url]``.

    The way: rewrite the message of that commit on vllm/'s ``series`` branch with
    ``git interpret-trailers`` and replay it and the commits after it with ``git commit-tree``
    (same trees, authors, dates), move the branch with a compare-and-swap ``update-ref``, then
    refresh() exports the patch files. Editing only the patch file would not do: apply.py
    compares patch-ids, which ignore messages, so vllm/ would keep the old trailer and the next
    refresh would bring it back. Trees do not change, so the working tree is not touched.

    Returns the patch file. Raises:
        SeriesError: bad number or URL; the patch is Accepted already; vllm/ is not on the
            series branch holding exactly the series (then: scripts/apply.sh).
    """
    if not re.fullmatch(r"https?://\S+", url):
        raise SeriesError(
            f"{url!r} is not a PR URL",
            "scripts/prs.sh --record 0001 https://github.com/vllm-project/vllm/pull/N",
        )
    number = f"{int(number):04d}" if number.isdigit() else number
    entries = series.load()
    idx = [i for i, e in enumerate(entries) if _number(e, i) == number]
    if not idx:
        raise SeriesError(f"no patch numbered {number} in patches/series", "cat patches/series")
    i, entry = idx[0], entries[idx[0]]
    if prbody.parse(entry.path).status.startswith("Accepted"):
        raise SeriesError(f"{entry.name} is upstream already; nothing to record")
    pin = pinmod.load()
    vdir = paths.vllm_dir()
    commits = []
    if (
        git.is_repo(vdir)
        and not git.in_progress(vdir)
        and not git.dirty(vdir)
        and git.head_branch(vdir) == BRANCH
    ):
        pairs = git.commit_patch_ids(vdir, pin.commit, "HEAD")
        if [p for _, p in pairs] == wanted_ids(vdir, entries):
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
                    f"Upstream-Status: Submitted [{url}]",
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
        f"vseries prs --record {number}",
        f"refs/heads/{BRANCH}",
        parent,
        old_tip,
    )
    refresh.refresh()
    status = prbody.parse(entry.path).status
    if status != f"Submitted [{url}]":
        raise SeriesError(f"{entry.name} says Upstream-Status: {status} after the refresh")
    print(f"prs: {entry.name}: Upstream-Status: {status}")
    return entry.path


def main(args) -> int:
    if args.record:
        record(*args.record)
        return 0
    if args.remote and not args.push:
        print(
            f"prs: --remote {args.remote} is used in commands.sh; nothing is pushed without --push"
        )
    done = prs(args.base, args.push, args.remote, hooks=not args.no_hooks, tests=not args.no_tests)
    return 0 if all(pr.ok for pr in done) else 1


def add_parser(sub) -> None:
    p = sub.add_parser("prs", help="make a checked upstream PR branch and text per patch")
    p.add_argument("--base", help="upstream ref in vllm/ to base the PRs on (default: the pin)")
    p.add_argument("--push", action="store_true", help="push all branches (all must pass)")
    p.add_argument("--remote", help="your fork: a remote of vllm/ or a URL")
    p.add_argument(
        "--record",
        nargs=2,
        metavar=("NNNN", "URL"),
        help="record a submitted PR: Upstream-Status: Submitted [URL]",
    )
    p.add_argument("--no-hooks", action="store_true", help="skip vLLM's pre-commit hooks")
    p.add_argument("--no-tests", action="store_true", help="skip the patch's tests")
    p.set_defaults(func=main)
