"""The checks on a PR branch: DCO sign-off, vLLM's hooks (hooks.py), the patch's own tests.

The patch's test files run with pytest on this host with ``CUDA_VISIBLE_DEVICES=""``; a test
that fails only because there is no GPU here is listed as needing CUDA, not as a failure.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from vseries import git, pytestrun
from vseries.errors import SeriesError
from vseries.prs.hooks import hook_failures, run_hooks
from vseries.workspace import cache_dir

TEST_TIMEOUT = 1800  # seconds for one patch's tests

# vLLM's tests/conftest.py imports these beyond vLLM's runtime requirements; installed (at the
# version vLLM's requirements/test/cuda.txt pins) into a cached folder put on PYTHONPATH
TEST_DEPS = ("tblib",)

# failures that only say "there is no GPU here"; on a CPU host they are "needs CUDA", not a
# verdict on the patch
CUDA_ABSENT = re.compile(
    r"Torch not compiled with CUDA enabled|Found no NVIDIA driver|"
    r"No CUDA GPUs are available|libcuda\.so|CUDA driver initialization|"
    r"no CUDA-capable device|CUDA is not available|requires? (a )?CUDA|"
    r"needs? CUDA|[Nn]ot on CUDA|CUDA (device|GPU)|0 active drivers|"
    r"cannot be accessed from Triton \(cpu tensor\?\)|"
    # torch.accelerator without a device (vLLM's tests/kernels/moe teardown)
    r"Cannot access accelerator device when none is available|"
    # vLLM's platform detection at import on a host without an accelerator (test_moe.py)
    r"Failed to infer device type|"
    # CUDA-only packages and vLLM's compiled kernels, absent on CPU hosts
    r"No module named '(deep_gemm|flashinfer|vllm\.\w*_C|"
    r"vllm\.vllm_flash_attn)",
    re.I,
)


# a sentence left for later: a placeholder where text or output should be
PLACEHOLDER = re.compile(r"(?i:\bgoes here\b|\bto be (?:added|filled in)\b)|\b(?:TODO|TBD|FIXME)\b")
# a block that carries what a lead-in ending in ':' introduces: a list, table, code, quote, HTML
CARRIES = re.compile(r"^(?:\s*(?:[-*+]|\d+[.)])\s|\s*\||```|~~~| {4}|\t|\s*[<>])", re.M)


def unfinished(body: str) -> list[str]:
    """The sentences of a PR body that are not finished: a lead-in ending in ':' that nothing
    follows (the end of its section, or prose without the list, table or code it
    introduces), and a placeholder ("goes here", "TODO", "TBD", ...). Code (fenced, indented,
    inline) and HTML comments are not read for placeholders."""
    problems = []
    blocks = [b for b in re.split(r"\n\s*\n", body) if b.strip()]
    fenced = False
    for i, block in enumerate(blocks):
        code = fenced or block.lstrip().startswith(("```", "~~~")) or re.match(r" {4}|\t", block)
        if block.count("```") % 2:
            fenced = not fenced
        if code:
            continue
        last = block.rstrip().splitlines()[-1]
        nxt = blocks[i + 1] if i + 1 < len(blocks) else ""
        if (
            last.rstrip().endswith(":")
            and not re.match(r"\s*#", last)
            and not CARRIES.search(nxt if not re.match(r"#|---\s*$", nxt) else "")
        ):
            problems.append(
                f'the body has a lead-in that introduces nothing: "...{last.strip()[-80:]}" '
                "(followed by "
                + (f'"{nxt.strip().splitlines()[0][:60]}..."' if nxt else "nothing")
                + "); finish the sentence in the patch message (in vllm/: git commit --amend, "
                "then scripts/refresh.sh)"
            )
        code_at = [m.span() for m in re.finditer(r"`[^`]*`|<!--.*?-->", block, re.S)]
        for m in PLACEHOLDER.finditer(block):
            if any(a <= m.start() < b for a, b in code_at):
                continue
            start = max(block.rfind(". ", 0, m.start()) + 2, block.rfind("\n", 0, m.start()) + 1)
            end = block.find(".", m.end())
            sentence = block[start : end + 1 if end >= 0 else len(block)].strip()
            problems.append(
                f'the body has a placeholder ("{m.group(0)}"): "{sentence[:160]}"; put the text or '
                "output there, or remove the sentence, in the patch message (in vllm/: git "
                "commit --amend, then scripts/refresh.sh)"
            )
    return problems


@dataclass
class Checks:
    """What the PR tool checked on a branch; rendered into the Test Result section.

    ``hooks`` holds [hook id, verdict] in pre-commit's words (Passed, Failed, Skipped);
    ``needs_cuda`` and ``skipped`` hold pytest node ids (skipped: [id, reason]);
    ``cuda_errors`` maps those of ``needs_cuda`` that pytest reports as errors, outside the
    test's own body (a file not collected, a fixture that needs an accelerator), to its message.
    """

    host: str = 'CPU-only host (CUDA_VISIBLE_DEVICES="")'
    signers: list[str] = field(default_factory=list)
    hooks: list[list[str]] = field(default_factory=list)
    hooks_not_run: list[list[str]] = field(default_factory=list)
    tests: list[str] = field(default_factory=list)
    passed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    needs_cuda: list[str] = field(default_factory=list)
    cuda_errors: dict[str, str] = field(default_factory=dict)
    skipped: list[list[str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    ran_hooks: bool = True
    ran_tests: bool = True

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "Checks":
        return cls(**json.loads(text))


def dco(wt: Path, base: str, signed: bool = False) -> tuple[list[str], list[str]]:
    """(problems, signers) for the commits base..HEAD. A signed-off commit needs its
    author's sign-off (vLLM's DCO check); an unsigned one is what the PR tool makes (the
    person who submits signs it) and a problem only where ``signed`` was asked for."""
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
        short, subject, author, signed_by = rec.strip("\n").split("\x00")
        sobs = [s.strip() for s in signed_by.split("\x1f") if s.strip()]
        signers += sobs
        if not sobs and signed:
            problems.append(
                f"commit {short} ({subject}) has no Signed-off-by: line; vLLM "
                "requires the DCO (git commit -s)"
            )
        elif sobs and author not in sobs:
            problems.append(
                f"commit {short} ({subject}) is not signed off by its author "
                f"{author} (signed off by: {', '.join(sobs)})"
            )
    return problems, list(dict.fromkeys(signers))


UNSIGNED = (
    "not signed off: the person who submits certifies the DCO and signs each commit as its "
    "author (scripts/prs.sh --sign; see out/prs/README.md)"
)


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
    dest = cache_dir() / "prs-testdeps" / "-".join(sorted(reqs))
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


def run_tests(wt: Path, tests: list[str], checks: Checks) -> None:
    """pytest the patch's test files in the worktree (its vllm on PYTHONPATH, no CUDA), one
    pytest call per file (a file that cannot be collected without CUDA would stop the others),
    and sort each test into passed / failed / needs CUDA / skipped on checks."""
    checks.tests = tests
    env = {
        "CUDA_VISIBLE_DEVICES": "",
        "PYTHONPATH": os.pathsep.join(x for x in (str(wt), _test_path(wt)) if x),
    }
    for t in tests:
        _run_file(wt, t, env, checks)


def _run_file(wt: Path, test: str, env: dict, checks: Checks) -> None:
    """One test file's pytest call, its cases sorted on checks."""
    r = pytestrun.run([test], cwd=wt, env=env, timeout=TEST_TIMEOUT, safe_path=False)
    if r.code == 124:
        checks.problems.append(f"tests ran past {TEST_TIMEOUT} s: {test}")
        return
    if not r.reported:
        checks.problems.append(
            f"pytest exited {r.code} without a report:\n" + (r.out + r.err).strip()[-1500:]
        )
        return
    for c in r.cases:
        if c.kind in ("failure", "error"):
            if CUDA_ABSENT.search(f"{c.message}\n{c.text}"):
                checks.needs_cuda.append(c.node)
                if c.kind == "error":  # not collected, or a fixture's set-up or clean-up
                    checks.cuda_errors[c.node] = c.message
            else:
                checks.failed.append(c.node)
                checks.problems.append(f"test {c.node} fails: {c.message[:300]}")
        elif c.kind == "skipped":
            reason = re.sub(r"^Skipped: ", "", c.message)
            if CUDA_ABSENT.search(reason) or re.search(r"\b(cuda|gpu)\b", reason, re.I):
                checks.needs_cuda.append(c.node)
            else:
                checks.skipped.append([c.node, reason])
        else:
            checks.passed.append(c.node)
    if r.code == 5:
        checks.problems.append(f"pytest collected no test from {test}")


def check(
    wt: Path, base: str, pr, hooks: bool, tests: bool, scratch: Path, signed: bool = False
) -> str:
    """Run the checks on the branch checked out in wt (``pr``: a branches.PR; ``signed``: the
    branch was signed off with --sign); fills pr.checks and pr.problems. Returns the full
    report text (hook output included)."""
    c = pr.checks = Checks(ran_hooks=hooks, ran_tests=tests)
    problems, c.signers = dco(wt, base, signed)
    c.problems += problems
    said = "ok, signed off by " + ", ".join(c.signers) if c.signers else UNSIGNED
    report = [f"DCO: {'; '.join(problems) or said}"]
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
