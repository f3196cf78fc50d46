"""What an upstream pull request says: title, body (vLLM's layout), and the push commands.

Pure rendering from a patch file, the benchmark results (results.py) and the checks the PR
tool ran (checks.py); no git state is changed here. The body follows the PR template of the
base tree (``.github/PULL_REQUEST_TEMPLATE.md``): Overview / Claims / Validation / Details
and the template's checklist (v0.34.0; its boxes ticked on evidence only, checklist.py), else
Purpose / Test Plan / Test Result (v0.21.0). A message's own headings of either set are read
into the matching section. The body names vLLM's commands and paths only: a benchmark whose
figures would bring a path of the workspace is left out (``upstream_only``, paths.py), and
the body carries no sign-off (the person who submits signs the commit).

The figures come from the results files that the series' ``bench=`` names, read when the body
is rendered; a patch message types none. A line of the message reading ``... results:
(benchmarks/results/)`` (or ``results: pending (benchmarks/results/)``) is where they go (the
line goes with nothing in its place when there are none); without one they close the test
results.
"""

import re
import shlex
from collections.abc import Callable

from vseries.patchfile import PatchInfo
from vseries.prs import checklist as boxes
from vseries.prs.checks import Checks
from vseries.prs.results import Bench, measurements
from vseries.release import IDENT, StandIn

STATUS_LINE = re.compile(r"^Upstream-Status: .*\n", re.M)
SIGNOFF_LINE = re.compile(r"^Signed-off-by: .*\n", re.M)

PENDING = re.compile(r"^.*results: (?:pending )?\(benchmarks/results/?\)\.?[ \t]*$", re.I | re.M)

HEADING = re.compile(
    r"^(?:#+\s*)?(purpose|overview|claims|test plan|validation|test results?|details)\s*:?\s*$",
    re.I | re.M,
)
# a message heading -> its part (sections())
PART = {
    "purpose": "purpose",
    "overview": "purpose",
    "claims": "claims",
    "test plan": "test plan",
    "validation": "test plan",
    "test result": "test result",
    "test results": "test result",
    "details": "details",
}
OLD = ("Purpose", "Test Plan", "Test Result")
NEW = ("Overview", "Claims", "Validation", "Details")
# the template's checklist: from its rule to the end of its <details> block
CHECKLIST = re.compile(r"^---\s*\n.*?</details>", re.M | re.S)


def _drop_lines(text: str, lines: re.Pattern) -> str:
    """The patch email with the message lines ``lines`` matches removed (the diff untouched)
    and the blank lines they leave folded."""
    cut = re.search(r"^---$", text, re.M)
    head, tail = (text[: cut.start()], text[cut.start() :]) if cut else (text, "")
    return re.sub(r"\n\n\n+", "\n\n", lines.sub("", head)) + tail


def strip_status(text: str) -> str:
    """The patch email without its ``Upstream-Status:`` line (a workspace header, not part of
    the upstream commit); the diff and the other trailers are untouched."""
    return _drop_lines(text, STATUS_LINE)


def without_markers(text: str) -> str:
    """The patch email without the workspace's results marker line (``... results:
    (benchmarks/results/)``: where the rendered body puts figures), which would otherwise land
    in the PR branch's commit message as a path of this workspace."""
    return _drop_lines(text, PENDING)


def unsigned(text: str) -> str:
    """The patch email without its ``Signed-off-by:`` lines: they certify the patch to this
    workspace; the upstream commit is signed by the person who submits it (``--sign``)."""
    return _drop_lines(text, SIGNOFF_LINE)


def _count_by_test(ids: list[str]) -> str:
    """'test_a (12 cases), test_b' from node ids, parameters folded."""
    counts: dict[str, int] = {}
    for i in ids:
        fn = i.split("::")[-1].split("[")[0]
        counts[fn] = counts.get(fn, 0) + 1
    return ", ".join(f"`{k}`" + (f" ({n} cases)" if n > 1 else "") for k, n in counts.items())


def _errored(c: Checks, nodes: list[str]) -> list[str]:
    """Cases that errored outside their body without an accelerator, in pytest's words."""
    said = [(i.split("::")[-1], c.cuda_errors[i]) for i in nodes]
    uncollected = any(m == "collection failure" for _, m in said)  # said once per file
    return (["cannot be collected without CUDA"] if uncollected else []) + [
        f"`{n}` {m} (no accelerator here)" for n, m in said if m != "collection failure"
    ]


def checks_md(info: PatchInfo, c: Checks, shown: str = "") -> str:
    """The 'tests and checks on this branch' lines. ``shown``: the message's own Test Result;
    a test file that ran nothing here but is named there gets a pointer to it, so the line
    does not read as if the file never ran."""
    out = []
    for t in c.tests if c.ran_tests else []:
        sk = [s for s in c.skipped if s[0].startswith(t + "::")]
        n_ok = sum(i.startswith(t + "::") for i in c.passed)
        n_bad = sum(i.startswith(t + "::") for i in c.failed)
        gpu = [i for i in c.needs_cuda if i.startswith(t + "::")]
        errs = _errored(c, [i for i in gpu if i in c.cuda_errors])
        gpu = [i for i in gpu if i not in c.cuda_errors]
        parts = [f"{n_ok} passed"] + ([f"{n_bad} failed"] if n_bad else [])
        if not (n_ok or n_bad or sk):
            # nothing ran without a GPU: say so, not "0 passed"
            whys = errs + ([f"needs CUDA ({_count_by_test(gpu)})"] if gpu else [])
            why = "; ".join(whys) or "collected no test"
            where = "; its GPU run is shown above" if t in shown else ""
            out.append(f"- `pytest {t}`: not run on a {c.host}, {why}{where}")
            continue
        line = f"- `pytest {t}` on a {c.host}: " + ", ".join(parts)
        if gpu:
            line += (
                f"; not run: needs CUDA, {len(gpu)} cases: {_count_by_test(gpu)} "
                "(to run on a Hopper GPU)"
            )
        line += "".join(f"; {e}" for e in errs)
        for node, reason in sk:
            line += f"; skipped `{node.split('::')[-1]}`: {reason}"
        out.append(line)
    if info.tests and not c.ran_tests:
        out.append("- the tests above were not run by this tool (--no-tests)")
    if c.ran_hooks and c.hooks:
        verdicts: dict[str, list[str]] = {}
        for hook, verdict in c.hooks:
            verdicts.setdefault(verdict, []).append(f"`{hook}`")
        out.append(
            f"- pre-commit, vLLM's own hooks (its `.pre-commit-config.yaml`, stage "
            f"pre-commit) on the {len(info.files)} touched files: "
            + "; ".join(f"{v.lower()}: {', '.join(h)}" for v, h in verdicts.items())
        )
    for hook, reason in c.hooks_not_run if c.ran_hooks else []:
        out.append(f"- pre-commit hook `{hook}` not run here: {reason}")
    if not c.ran_hooks:
        out.append("- vLLM's pre-commit hooks were not run by this tool (--no-hooks)")
    for p in c.problems:
        # its first line only (the rest is in checks.txt): no lead-in left hanging
        out.append(f"- PROBLEM (see checks.txt): {p.splitlines()[0].rstrip(': ')}")
    return "\n".join(out)


def title(info: PatchInfo) -> str:
    """The PR title: the patch subject, vLLM's [Tag] prefixes kept."""
    return info.subject


def unwrap(text: str) -> str:
    """Join hard-wrapped lines (GitHub shows each newline of a PR body as a line break): a line
    that does not start a list item, heading or quote continues the line before it. Tables,
    indented and fenced code stay as they are."""
    out, fenced = [], False
    for para in re.split(r"\n\s*\n", text):
        lines = para.splitlines()
        if (
            fenced
            or "```" in para
            or re.match(r" {4}|\t", para)
            or any(x.lstrip().startswith("|") for x in lines)
        ):
            out.append(para)
        else:
            joined = []
            for x in lines:
                if joined and not re.match(r"\s*([-*+>#]|\d+[.)])\s", x):
                    joined[-1] += " " + x.strip()
                else:
                    joined.append(x.rstrip())
            out.append("\n".join(joined))
        if para.count("```") % 2:
            fenced = not fenced
    return "\n\n".join(out)


def sections(message: str) -> dict[str, str]:
    """Split a commit message into purpose / claims / test plan / test result / details by its
    headings (Markdown '## Purpose' or 'Purpose:' lines; Overview is purpose, Validation is
    test plan); text before any heading is purpose."""
    parts: dict[str, list[str]] = {k: [] for k in dict.fromkeys(PART.values())}
    key, last = "purpose", 0
    for m in HEADING.finditer(message):
        parts[key].append(message[last : m.start()])
        key, last = PART[m.group(1).lower()], m.end()
    parts[key].append(message[last:])
    # drop blank lines around each part, but not the indent of an opening code block
    trimmed = {k: [re.sub(r"^(\s*\n)+", "", x).rstrip() for x in v] for k, v in parts.items()}
    return {k: unwrap("\n\n".join(x for x in v if x)) for k, v in trimmed.items()}


def layout(template: str | None) -> tuple[str, ...]:
    """The section headings a body follows: NEW where the base tree's PR template has them,
    else OLD (v0.21.0's template, or none)."""
    heads = set(re.findall(r"^## (.+?)\s*$", template or "", re.M))
    return NEW if set(NEW) <= heads else OLD


def checklist(template: str, info: PatchInfo, review: boxes.Review | None = None) -> str:
    """The template's checklist block, its boxes ticked where the evidence backs them: the
    AI-assistance box from an AI ``Co-authored-by`` trailer, the /pr-checklist and review
    boxes from a current report of the skill (checklist.py); the rest is the submitter's."""
    m = CHECKLIST.search(template)
    if not m:
        return ""
    return boxes.ticked(m.group(0), boxes.is_ai(info.coauthors), review)


def upstream_only(
    benches: list[Bench],
    names: list[tuple[str, str | None]],
    foreign: Callable[[str], list[str]],
) -> tuple[list[Bench], list[tuple[str, str | None]], list[str], str]:
    """The benchmarks whose figures name no path of the workspace (``foreign``: paths.py),
    the series' names still looked for (a name whose benchmarks were all left out is not
    "not found"), one line per benchmark left out, for checks.txt (an upstream maintainer
    can rerun only vLLM's own commands), and the body's line for them (``left_out``)."""
    keep, left, notes = [], [], []
    for b in benches:
        bad = foreign(measurements([b], []))
        if not bad:
            keep.append(b)
            continue
        left.append(b.name)
        notes.append(
            f"benchmark {b.name} left out of the body: it names the workspace's "
            f"{', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''}, which vLLM does not have "
            "(an upstream PR shows what vLLM's own commands measure: vllm bench, "
            "benchmarks/kernels/)"
        )

    def of(name: str, bench: str) -> bool:
        name, bench = name.replace("_", "-"), bench.replace("_", "-")
        return bench == name or bench.startswith(name + "-")

    kept_names = [
        (n, r)
        for n, r in names
        if any(of(n, b.name) for b in keep) or not any(of(n, b) for b in left)
    ]
    return keep, kept_names, notes, left_out([b for b in benches if b.name in left], foreign)


def left_out(benches: list[Bench], foreign: Callable[[str], list[str]]) -> str:
    """The body's one line for benchmarks left out (upstream_only), only where vLLM's own
    command reproduces some of them ("" otherwise: a reviewer reads nothing from the names of
    the workspace's result sets, which two reviews asked to remove; checks.txt names them).
    It stands where the figures would (``body``)."""
    where, cmds = [], []
    for b in benches:
        recorded = [x for x in b.sources if x.get("command", "(not recorded)") != "(not recorded)"]
        where += [x["device"] for x in recorded if x["device"] != "(not recorded)"]
        cmds += [x["command"] for x in recorded if not foreign(x["command"])]
    if not cmds:
        return ""
    on = f" on {', '.join(dict.fromkeys(where))}" if where else ""
    run = ", ".join(f"`{c}`" for c in dict.fromkeys(cmds))
    return (
        f"Not shown here: figures measured{on} with scripts that are not part of vLLM; "
        f"vLLM reproduces them with {run}."
    )


def body(
    info: PatchInfo,
    base: str,
    benches: list[Bench],
    names: list[tuple[str, str | None]],
    checks: Checks | None,
    template: str | None = None,
    review: boxes.Review | None = None,
    missing: str = "",
) -> str:
    """The PR description in the layout of the base tree's PR template (``layout``).

    Args:
        base: the upstream base the branch was made on, e.g. "v0.21.0 (9da56fd18b95)".
        benches: results found for the patch (load_results); names: what was asked for
            (bench_names).
        checks: what ran on the branch, or None when the branch was not checked.
        template: the base tree's ``.github/PULL_REQUEST_TEMPLATE.md`` (None: none).
        review: the PR's /pr-checklist report (checklist.py), or None.
        missing: the line for the benchmarks left out (``left_out``), where the figures
            would stand; with no figures a lead-in ending in ':' ends in '.' instead.
    """
    s = sections(info.message)
    new = layout(template) == NEW
    tail = checklist(template or "", info, review) if new else ""
    plan = [s["test plan"]] if s["test plan"] else []
    if not info.tests:
        plan.append("This PR adds no test file.")
    elif not all(t in s["test plan"] for t in info.tests):  # the message names them, or:
        plan.append(
            "Tests this PR adds or changes:\n\n```bash\n"
            + "\n".join(f"pytest -q {t}" for t in info.tests)
            + "\n```"
        )
    if not new:  # (v0.34.0's checklist covers code quality; the checks below name the hooks)
        plan.append("Lint: `pre-commit run --files " + " ".join(info.files) + "`")
    figures = "\n\n".join(x for x in (unwrap(measurements(benches, names)), missing) if x)
    own = s["test result"]
    if "- [x] AI assistance" in tail:  # the ticked box says it: the message's sentence goes
        own = "\n\n".join(p for p in own.split("\n\n") if not p.startswith("AI assistance:"))
    placed = PENDING.search(own)
    if placed:
        before = own[: placed.start()].rstrip()
        if not measurements(benches, names) and before.endswith(":"):
            before = before[:-1] + "."  # no figures follow: it introduces none
        own = "\n\n".join(x for x in (before, figures, own[placed.end() :].strip("\n")) if x)
    result = [own.strip()] if own.strip() else []
    ran = checks_md(info, checks, own) if checks is not None else ""
    if ran:
        result.append(f"Tests and checks on this branch, based on {base}:\n\n" + ran)
    if not placed:
        result.append(figures)
    purpose = s["purpose"] or info.subject
    if not new:
        parts = [
            ("Purpose", [purpose, s["claims"], s["details"]]),
            ("Test Plan", plan),
            ("Test Result", result),
        ]
    else:
        # Overview: the purpose's first paragraph (and the list it introduces, when it ends
        # with a colon); the subject when the purpose opens with a list or code
        blocks = purpose.split("\n\n")
        n = 2 if blocks[0].rstrip().endswith(":") and len(blocks) > 1 else 1
        first, rest = "\n\n".join(blocks[:n]), "\n\n".join(blocks[n:])
        if re.match(r"\s*([-*+>|]|\d+[.)]|```|    )", first):
            first, rest = info.subject, purpose
        parts = [
            ("Overview", [first]),
            ("Claims", [s["claims"] or f"- {info.subject}"]),
            ("Validation", [*plan, *result]),
            ("Details", [rest, s["details"]]),
        ]
    # a message's own sub-headings (## Relation to open work) sit under their section
    text = "\n\n".join(
        f"## {h}\n\n" + re.sub(r"^## ", "### ", "\n\n".join(x for x in xs if x), flags=re.M)
        for h, xs in parts
        if any(xs)
    )
    return text + "\n" + (f"\n{tail}\n" if tail else "")


def commands(
    number: str,
    branch: str,
    title_text: str,
    remote: str,
    upstream_repo: str,
    owner: str | None,
    pr_url: str | None,
    onto: StandIn | None = None,
    upstream_url: str = "",
) -> str:
    """commands.sh: push the branch to the fork, then open (or, when already submitted,
    update) the PR with gh. Paths are relative to the script, which lives in out/prs/NNNN/.
    Where the branch sits on a commit made from a source release (``onto``: it has no
    upstream history), the script first moves it onto upstream's own commit of that release
    (``to_upstream``) and refuses to push it otherwise."""
    who = owner or "${FORK_OWNER:?set FORK_OWNER to your GitHub user}"
    head = f"{who}:{branch}"
    gh = (
        f"gh pr edit {shlex.quote(pr_url)}"
        if pr_url
        else f'gh pr create --repo {upstream_repo} --base main --head "{head}"'
    )
    return (
        "#!/usr/bin/env bash\n"
        f"# Patch {number}: push {branch} to your fork and "
        + ("update its pull request" if pr_url else "open the upstream pull request")
        + ".\n"
        "# Made by scripts/prs.sh; read body.md first. The remote is your fork of "
        f"{upstream_repo}\n# (add it once: git -C vllm remote add {remote} <your fork's url>).\n"
        "set -euo pipefail\n"
        'here="$(cd "$(dirname "$0")" && pwd)"\n'
        'cd "$here/../../.."\n'
        "# DCO: the person who submits signs each commit off as its author (vLLM's DCO check):\n"
        "# scripts/prs.sh --sign makes the branch signed off as vllm/'s git identity.\n"
        f"author=$(git -C vllm log -1 --format='%an <%ae>' {branch})\n"
        f"signers=$(git -C vllm log -1 --format='%(trailers:key=Signed-off-by,valueonly)' "
        f"{branch})\n"
        'if ! grep -qxF "$author" <<<"$signers"; then\n'
        f'  echo "commands.sh: {branch} is not signed off by its author ($author); as the '
        'person who submits: scripts/prs.sh --sign, then this script again" >&2\n'
        "  exit 1\n"
        "fi\n"
        + (to_upstream(branch, onto, upstream_url) if onto else "")
        + "# --force: the branch is remade from the patch file on every run (the patch is the\n"
        "# source of truth; review changes go into the patch, then scripts/prs.sh again)\n"
        f"git -C vllm push --force {shlex.quote(remote)} "
        f"{branch}:refs/heads/{branch}\n"
        f'{gh} --title {shlex.quote(title_text)} --body-file "$here/body.md"\n'
    )


def to_upstream(branch: str, onto: StandIn, url: str) -> str:
    """The part of commands.sh that puts a branch made on a source release's commit (a root:
    pushed, it shares no history with upstream) onto upstream's own commit of that release
    (its tag, fetched from vllm/'s remote ``upstream`` when it has one, else from ``url``):
    ``git rebase --onto``, exact where the trees are equal, in a temporary worktree (vllm/'s
    HEAD and series stay as they are); it stops on a conflict. Then it refuses to push a
    branch whose history, read without ``refs/replace/`` (GIT_NO_REPLACE_OBJECTS), is not
    upstream's alone."""
    b, q = shlex.quote(branch), shlex.quote
    sdist = IDENT["GIT_AUTHOR_EMAIL"]
    return (
        f"# The base is vLLM {onto.tag} as made from its source release (commit "
        f"{onto.synthetic[:12]}, no parent):\n"
        "# it shares no history with upstream. Move the branch onto upstream's own commit of\n"
        "# the release (the same tree: the rebase is exact), then check that its history is\n"
        "# upstream's.\n"
        f"base={onto.commit}\n"
        f"upstream=$(git -C vllm remote get-url upstream 2>/dev/null || echo {q(url)})\n"
        f'git -C vllm fetch -q --no-tags "$upstream" refs/tags/{onto.tag}\n'
        "pin=$(git -C vllm rev-parse 'FETCH_HEAD^{commit}')\n"
        'if [ "$(git -C vllm rev-parse "$pin^{tree}")" != '
        '"$(git -C vllm rev-parse "$base^{tree}")" ]; then\n'
        f"  echo \"commands.sh: upstream's {onto.tag} ($pin) has another tree than the source "
        'release; the rebase applies the patch anew" >&2\n'
        "fi\n"
        f'if git -C vllm merge-base --is-ancestor "$base" {b}; then\n'
        '  wt=$(mktemp -d "${TMPDIR:-/tmp}/pr-rebase.XXXXXX")\n'
        f'  git -C vllm worktree add -q "$wt" {b}\n'
        '  if ! git -C "$wt" rebase -q --onto "$pin" "$base"; then\n'
        f"    echo \"commands.sh: {branch} does not rebase cleanly onto upstream's {onto.tag} "
        "($pin); resolve it in $wt (git rebase --continue), then: git -C vllm worktree remove "
        '$wt, and this script again" >&2\n'
        "    exit 1\n"
        "  fi\n"
        '  git -C vllm worktree remove "$wt"\n'
        "fi\n"
        f"if ! roots=$(GIT_NO_REPLACE_OBJECTS=1 git -C vllm log --max-parents=0 --format=%ae {b}) "
        f'|| grep -qxF {sdist} <<<"$roots"; then\n'
        f'  echo "commands.sh: {branch} sits on a commit made from a source release, not on '
        "upstream's history; not pushing\" >&2\n"
        "  exit 1\n"
        "fi\n"
        f"echo \"commands.sh: {branch} is on upstream's {onto.tag} ($pin). Upstream merges "
        "onto main: before you open the PR, remake it on current main and rerun its checks "
        'there (git -C vllm fetch \\"$upstream\\" main:refs/remotes/upstream/main, then '
        'scripts/prs.sh --base upstream/main)."\n'
    )
