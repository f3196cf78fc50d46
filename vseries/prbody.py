"""What an upstream pull request says: title, body (vLLM's layout), and the push commands.

Pure rendering from a patch file, the benchmark results and the checks the PR tool ran; no
git state is changed here (``git mailinfo`` reads the patch).

Patch -> results convention: the series option ``bench=<name>[,<name>...]`` names the
benchmarks of a patch. For each name, ``benchmarks/results/*.json`` files whose ``"bench"`` is
that name are used (the newest per file-level ``"variant"``: newest by the file's ``"date"`` /
``"timestamp"`` / ``"created"`` field, then by file name; file times are not used, they are
checkout times). When a name has no JSON, the newest ``benchmarks/results/<name>*.md`` (a
reporter's Markdown) is quoted instead. A patch without the option, or whose names match
nothing, gets a body that says plainly that no measurements are attached.
"""

import json
import re
import shlex
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

STATUS_LINE = re.compile(r"^Upstream-Status: .*\n", re.M)
HEADING = re.compile(r"^(?:#+\s*)?(purpose|test plan|test results?)\s*:?\s*$", re.I | re.M)
TRAILER = re.compile(r"^(Signed-off-by|Upstream-Status|Co-authored-by|Reviewed-by): .*$",
                     re.I | re.M)
# failures that only say "there is no GPU here"; on a CPU host they are "needs CUDA", not a
# verdict on the patch
CUDA_ABSENT = re.compile(r"Torch not compiled with CUDA enabled|Found no NVIDIA driver|"
                         r"No CUDA GPUs are available|libcuda\.so|CUDA driver initialization|"
                         r"no CUDA-capable device|CUDA is not available|requires? (a )?CUDA|"
                         r"needs? CUDA|[Nn]ot on CUDA|CUDA (device|GPU)|0 active drivers|"
                         r"cannot be accessed from Triton \(cpu tensor\?\)", re.I)


@dataclass
class PatchInfo:
    """What a patch email says (via ``git mailinfo -k``: brackets of the subject kept)."""

    subject: str
    author: str
    email: str
    message: str                  # the body, trailers removed
    signoffs: list[str]           # "Name <email>" of each Signed-off-by
    status: str                   # Upstream-Status value, "Pending" when absent
    files: list[str]              # paths the patch touches and keeps (not deleted)
    tests: list[str]              # test files the patch adds or changes (tests/**/test_*.py)


def parse(patch: Path) -> PatchInfo:
    """Read a format-patch email.

    Raises:
        ValueError: git mailinfo cannot read it (not a patch email).
    """
    text = patch.read_text(errors="replace")
    with tempfile.TemporaryDirectory() as tmp:
        p = subprocess.run(["git", "mailinfo", "-k", f"{tmp}/msg", f"{tmp}/diff"], input=text,
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise ValueError(f"{patch.name}: git mailinfo failed: {p.stderr.strip()}")
        msg = Path(tmp, "msg").read_text()
    info = dict(re.findall(r"^(\w+): (.*)$", p.stdout, re.M))
    status = re.search(r"^Upstream-Status: (.+)$", msg, re.M)
    files, created, deleted = [], set(), set()
    for m in re.finditer(r"^diff --git a/(\S+) b/(\S+)\n((?:(?!diff --git|---|@@).*\n)*)",
                         text, re.M):
        if "deleted file mode" in m.group(3):
            deleted.add(m.group(1))
        else:
            files.append(m.group(2))
        if "new file mode" in m.group(3):
            created.add(m.group(2))
    tests = [f for f in files if f.startswith("tests/") and re.search(r"/test_[^/]*\.py$", f)]
    return PatchInfo(
        subject=re.sub(r"^\[PATCH[^\]]*\]\s*", "", info.get("Subject", patch.stem)),
        author=info.get("Author", ""), email=info.get("Email", ""),
        message=TRAILER.sub("", msg).strip(),
        signoffs=re.findall(r"^Signed-off-by: (.+)$", msg, re.M),
        status=status.group(1).strip() if status else "Pending",
        files=files, tests=tests)


def strip_status(text: str) -> str:
    """The patch email without its ``Upstream-Status:`` line (a workspace header, not part of
    the upstream commit); the diff and the other trailers are untouched."""
    cut = re.search(r"^---$", text, re.M)
    head, tail = (text[:cut.start()], text[cut.start():]) if cut else (text, "")
    return re.sub(r"\n\n\n+", "\n\n", STATUS_LINE.sub("", head)) + tail


# --- results -------------------------------------------------------------------------------

@dataclass
class Bench:
    """The newest results of one benchmark name."""

    name: str
    sources: list[dict] = field(default_factory=list)  # {"file","variant","command","device"}
    rows: list[dict] = field(default_factory=list)     # rows, each with its "variant"
    markdown: str = ""                                 # a reporter's table, when no JSON


def _stamp(data: dict) -> str:
    for key in ("date", "timestamp", "created"):
        v = data.get(key)
        if isinstance(v, int | float):
            return datetime.fromtimestamp(v, UTC).isoformat()
        if isinstance(v, str) and v:
            return v
    return ""


def load_results(results_dir: Path, names: list[str]) -> list[Bench]:
    """The newest results for each benchmark name (see the module doc for the convention).

    Unreadable JSON files are skipped, not fatal: a half-written result must not block a PR.
    """
    files = []
    for f in sorted(results_dir.glob("*.json")) if results_dir.is_dir() else []:
        try:
            data = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("rows"), list):
            files.append((f, data))
    where = f"{results_dir.parent.name}/{results_dir.name}"
    out = []
    for name in names:
        newest: dict[str, tuple] = {}
        for f, data in files:
            if data.get("bench") != name:
                continue
            variant = str(data.get("variant", ""))
            key = (_stamp(data), f.name)
            if variant not in newest or key > newest[variant][0]:
                newest[variant] = (key, f, data)
        bench = Bench(name)
        for _, f, data in sorted(newest.values(), key=lambda t: t[1].name):
            bench.sources.append({"file": f"{where}/{f.name}",
                                  "variant": str(data.get("variant", "")),
                                  "command": str(data.get("command", "(not recorded)")),
                                  "device": str(data.get("device", "(not recorded)"))})
            default = str(data.get("variant", ""))
            bench.rows += [{**r, "variant": str(r.get("variant", default))}
                           for r in data["rows"] if isinstance(r, dict)]
        if not bench.rows:
            md = sorted(f for f in results_dir.glob(f"{name}*.md")
                        if re.fullmatch(rf"{re.escape(name)}([-_.].*)?", f.stem))
            if md:
                bench.sources.append({"file": f"{where}/{md[-1].name}"})
                bench.markdown = md[-1].read_text().strip()
        if bench.rows or bench.markdown:
            out.append(bench)
    return out


def _num(v, fmt: str) -> str:
    return format(v, fmt) if isinstance(v, int | float) else "-"


def bench_table(bench: Bench) -> str:
    """A Markdown table: one line per (case, dtype, batch), one column per variant (time in
    microseconds, % of roofline), and base/variant as speed-up when a ``base`` variant exists."""
    variants = list(dict.fromkeys(r["variant"] for r in bench.rows))
    if "base" in variants:
        variants.remove("base")
        variants.insert(0, "base")
    cells: dict[tuple, dict] = {}
    for r in bench.rows:
        cells.setdefault((r.get("case", ""), r.get("dtype", ""), r.get("batch", "")),
                         {})[r["variant"]] = r
    head = ["case", "dtype", "batch"]
    for v in variants:
        head += [f"{v or 'time'} (us)", f"{v or 'time'} % roofline"]
    others = [v for v in variants if v != "base"] if "base" in variants else []
    head += [f"speed-up {v}" for v in others]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for (case, dtype, batch), by in cells.items():
        row = [str(case), str(dtype), str(batch)]
        for v in variants:
            r = by.get(v, {})
            row += [_num(r.get("us"), ".1f"), _num(r.get("roofline_pct"), ".0f")]
        base_us = by.get("base", {}).get("us")
        for v in others:
            us = by.get(v, {}).get("us")
            ok = isinstance(base_us, int | float) and isinstance(us, int | float) and us > 0
            row.append(f"{base_us / us:.2f}x" if ok else "-")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


# --- checks --------------------------------------------------------------------------------

@dataclass
class Checks:
    """What the PR tool checked on a branch; rendered into the Test Result section.

    ``hooks`` holds [hook id, verdict] in pre-commit's words (Passed, Failed, Skipped);
    ``needs_cuda`` and ``skipped`` hold pytest node ids (skipped: [id, reason]).
    """

    host: str = "CPU-only host (CUDA_VISIBLE_DEVICES=\"\")"
    signers: list[str] = field(default_factory=list)
    hooks: list[list[str]] = field(default_factory=list)
    hooks_not_run: list[list[str]] = field(default_factory=list)
    tests: list[str] = field(default_factory=list)
    passed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    needs_cuda: list[str] = field(default_factory=list)
    skipped: list[list[str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    ran_hooks: bool = True
    ran_tests: bool = True

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "Checks":
        return cls(**json.loads(text))


def _count_by_test(ids: list[str]) -> str:
    """'test_a (12 cases), test_b' from node ids, parameters folded."""
    counts: dict[str, int] = {}
    for i in ids:
        fn = i.split("::")[-1].split("[")[0]
        counts[fn] = counts.get(fn, 0) + 1
    return ", ".join(f"`{k}`" + (f" ({n} cases)" if n > 1 else "") for k, n in counts.items())


def checks_md(info: PatchInfo, c: Checks) -> str:
    """The 'tests and checks on this branch' lines."""
    out = []
    for t in c.tests if c.ran_tests else []:
        ids = [i for i in c.passed + c.failed + c.needs_cuda if i.startswith(t + "::")]
        sk = [s for s in c.skipped if s[0].startswith(t + "::")]
        n_ok = sum(i.startswith(t + "::") for i in c.passed)
        n_bad = sum(i.startswith(t + "::") for i in c.failed)
        gpu = [i for i in c.needs_cuda if i.startswith(t + "::")]
        parts = [f"{n_ok} passed"] + ([f"{n_bad} failed"] if n_bad else [])
        line = f"- `pytest {t}` on a {c.host}: " + ", ".join(parts)
        if gpu:
            line += (f"; not run: needs CUDA, {len(gpu)} cases: {_count_by_test(gpu)} "
                     "(to run on a Hopper GPU)")
        for node, reason in sk:
            line += f"; skipped `{node.split('::')[-1]}`: {reason}"
        if not ids and not sk:
            line += " (collected no test)"
        out.append(line)
    if info.tests and not c.ran_tests:
        out.append("- the tests above were not run by this tool (--no-tests)")
    if c.ran_hooks and c.hooks:
        verdicts: dict[str, list[str]] = {}
        for hook, verdict in c.hooks:
            verdicts.setdefault(verdict, []).append(f"`{hook}`")
        out.append(f"- pre-commit, vLLM's own hooks (its `.pre-commit-config.yaml`, stage "
                   f"pre-commit) on the {len(info.files)} touched files: "
                   + "; ".join(f"{v.lower()}: {', '.join(h)}" for v, h in verdicts.items()))
    for hook, reason in c.hooks_not_run if c.ran_hooks else []:
        out.append(f"- pre-commit hook `{hook}` not run here: {reason}")
    if c.signers:
        out.append(f"- DCO: signed off by {', '.join(c.signers)}")
    for p in c.problems:
        out.append(f"- PROBLEM (see checks.txt): {p.splitlines()[0]}")
    return "\n".join(out)


# --- the PR text ---------------------------------------------------------------------------

def title(info: PatchInfo) -> str:
    """The PR title: the patch subject, vLLM's [Tag] prefixes kept."""
    return info.subject


def unwrap(text: str) -> str:
    """Join the hard-wrapped lines of plain paragraphs (GitHub shows each newline of a PR body
    as a line break); lists, tables, headings, quotes, indented and fenced code stay as they
    are."""
    out, fenced = [], False
    for para in re.split(r"\n\s*\n", text):
        lines = para.splitlines()
        plain = not fenced and "```" not in para and not any(
            re.match(r"\s{2,}|\t|[-*+>|#]|\d+[.)]\s", x) for x in lines)
        out.append(" ".join(x.strip() for x in lines) if plain else para)
        if para.count("```") % 2:
            fenced = not fenced
    return "\n\n".join(out)


def sections(message: str) -> dict[str, str]:
    """Split a commit message into purpose / test plan / test result by its headings (Markdown
    '## Purpose' or 'Purpose:' lines); text before any heading is purpose."""
    parts = {"purpose": [], "test plan": [], "test result": []}
    key, last = "purpose", 0
    for m in HEADING.finditer(message):
        parts[key].append(message[last:m.start()])
        h = m.group(1).lower()
        key, last = ("test result" if h.startswith("test result") else h), m.end()
    parts[key].append(message[last:])
    return {k: unwrap("\n\n".join(x.strip() for x in v if x.strip())) for k, v in parts.items()}


def body(info: PatchInfo, base: str, benches: list[Bench], bench_names: list[str],
         checks: Checks | None) -> str:
    """The PR description in vLLM's template layout (Purpose / Test Plan / Test Result).

    Args:
        base: the upstream base the branch was made on, e.g. "v0.21.0 (9da56fd18b95)".
        benches: results found for the patch (load_results); bench_names: the names asked for.
        checks: what ran on the branch, or None when the branch was not checked.
    """
    s = sections(info.message)
    tests = info.tests
    plan = [s["test plan"]] if s["test plan"] else []
    if tests:
        plan.append("Tests this PR adds or changes:\n\n```bash\n"
                    + "\n".join(f"pytest -q {t}" for t in tests) + "\n```")
    else:
        plan.append("This PR adds no test file.")
    plan.append("Lint: `pre-commit run --files " + " ".join(info.files) + "`")
    result = [s["test result"]] if s["test result"] else []
    if checks is not None:
        result.append(f"Tests and checks on this branch, based on {base}:\n\n"
                      + checks_md(info, checks))
    if benches:
        for b in benches:
            lines = [f"Benchmark `{b.name}`:"]
            for src in b.sources:
                if "command" in src:
                    lines.append(f"- `{src['file']}`" + (f" ({src['variant']})"
                                                          if src["variant"] else "")
                                 + f": on {src['device']}, command `{src['command']}`")
                else:
                    lines.append(f"- `{src['file']}` (a reporter's table; its command and "
                                 "hardware are as it states)")
            lines.append("")
            lines.append(bench_table(b) if b.rows else b.markdown)
            result.append("\n".join(lines))
        missing = [n for n in bench_names if n not in {b.name for b in benches}]
        if missing:
            result.append("No results were found for " + ", ".join(f"`{n}`" for n in missing)
                          + ".")
    else:
        why = (f"benchmarks/results holds none for {', '.join(bench_names)}" if bench_names
               else "no benchmark is declared for this patch")
        result.append(f"No measurements are attached to this PR ({why}).")
    parts = [("Purpose", [s["purpose"] or info.subject]), ("Test Plan", plan),
             ("Test Result", result)]
    return "\n\n".join(f"## {h}\n\n" + "\n\n".join(x) for h, x in parts) + "\n"


def commands(number: str, branch: str, title_text: str, remote: str, upstream_repo: str,
             owner: str | None, pr_url: str | None) -> str:
    """commands.sh: push the branch to the fork, then open (or, when already submitted,
    update) the PR with gh. Paths are relative to the script, which lives in out/prs/NNNN/."""
    who = owner or "${FORK_OWNER:?set FORK_OWNER to your GitHub user}"
    head = f"{who}:{branch}"
    gh = (f"gh pr edit {shlex.quote(pr_url)}" if pr_url else
          f"gh pr create --repo {upstream_repo} --base main --head \"{head}\"")
    return (
        "#!/usr/bin/env bash\n"
        f"# Patch {number}: push {branch} to your fork and "
        + ("update its pull request" if pr_url else "open the upstream pull request") + ".\n"
        "# Made by scripts/prs.sh; read body.md first. The remote is your fork of "
        f"{upstream_repo}\n# (add it once: git -C vllm remote add {remote} <your fork's url>).\n"
        "set -euo pipefail\n"
        "here=\"$(cd \"$(dirname \"$0\")\" && pwd)\"\n"
        "cd \"$here/../../..\"\n"
        "# --force: the branch is remade from the patch file on every run (the patch is the\n"
        "# source of truth; review changes go into the patch, then scripts/prs.sh again)\n"
        f"git -C vllm push --force {shlex.quote(remote)} "
        f"{branch}:refs/heads/{branch}\n"
        f"{gh} --title {shlex.quote(title_text)} --body-file \"$here/body.md\"\n")
