"""What an upstream pull request says: title, body (vLLM's layout), and the push commands.

Pure rendering from a patch file, the benchmark results and the checks the PR tool ran; no
git state is changed here (``git mailinfo`` reads the patch).

Patch -> results convention (declared here, used by prs): the series option
``bench=<name>[:<ref>][,<name>[:<ref>]...]`` names a patch's benchmarks; without it the name
is the contract test's (``contract=tests/contract/test_swap_ab.py`` -> ``swap-ab``). Names
match with ``-`` and ``_`` alike, exactly or as a prefix before ``-`` (``swap-ab`` also takes
``swap-ab-gemm``). For a name, a reporter's Markdown ``benchmarks/results/<name>*.md`` (the
curated tables, with their commands and hardware) is quoted when there is one; else the JSON
files anywhere under benchmarks/results whose ``"bench"`` matches give one table per bench,
from the newest file of each file-level ``"variant"`` (newest by the file's ``"date"`` /
``"timestamp"`` / ``"created"`` field, then by path, so raw/round3 beats raw/round2; file times
are checkout times and are not used). Speed-ups are against ``<ref>``, else the JSON's
``"ref"``, else the variant ``base``; a reporter's ratio columns (``a / b``) are summarised per
case. When nothing matches, the body says plainly that no measurements are attached. A line
of the message reading ``... results: pending (benchmarks/results/)`` is where the figures (or
that sentence) go.
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
PENDING = re.compile(r"^.*results: pending \(benchmarks/results/?\)\.?[ \t]*$", re.I | re.M)
HEADING = re.compile(r"^(?:#+\s*)?(purpose|test plan|test results?)\s*:?\s*$", re.I | re.M)
TRAILER = re.compile(
    r"^(Signed-off-by|Upstream-Status|Co-authored-by|Reviewed-by): .*$", re.I | re.M
)
# failures that only say "there is no GPU here"; on a CPU host they are "needs CUDA", not a
# verdict on the patch
CUDA_ABSENT = re.compile(
    r"Torch not compiled with CUDA enabled|Found no NVIDIA driver|"
    r"No CUDA GPUs are available|libcuda\.so|CUDA driver initialization|"
    r"no CUDA-capable device|CUDA is not available|requires? (a )?CUDA|"
    r"needs? CUDA|[Nn]ot on CUDA|CUDA (device|GPU)|0 active drivers|"
    r"cannot be accessed from Triton \(cpu tensor\?\)|"
    # CUDA-only packages and vLLM's compiled kernels, absent on CPU hosts
    r"No module named '(deep_gemm|flashinfer|vllm\.\w*_C|"
    r"vllm\.vllm_flash_attn)",
    re.I,
)


@dataclass
class PatchInfo:
    """What a patch email says (via ``git mailinfo -k``: brackets of the subject kept)."""

    subject: str
    author: str
    email: str
    message: str  # the body, trailers removed
    signoffs: list[str]  # "Name <email>" of each Signed-off-by
    status: str  # Upstream-Status value, "Pending" when absent
    files: list[str]  # paths the patch touches and keeps (not deleted)
    tests: list[str]  # test files the patch adds or changes (tests/**/test_*.py)


def parse(patch: Path) -> PatchInfo:
    """Read a format-patch email.

    Raises:
        ValueError: git mailinfo cannot read it (not a patch email).
    """
    text = patch.read_text(errors="replace")
    with tempfile.TemporaryDirectory() as tmp:
        p = subprocess.run(
            ["git", "mailinfo", "-k", f"{tmp}/msg", f"{tmp}/diff"],
            input=text,
            capture_output=True,
            text=True,
        )
        if p.returncode != 0:
            raise ValueError(f"{patch.name}: git mailinfo failed: {p.stderr.strip()}")
        msg = Path(tmp, "msg").read_text()
    info = dict(re.findall(r"^(\w+): (.*)$", p.stdout, re.M))
    status = re.search(r"^Upstream-Status: (.+)$", msg, re.M)
    files, created, deleted = [], set(), set()
    for m in re.finditer(
        r"^diff --git a/(\S+) b/(\S+)\n((?:(?!diff --git|---|@@).*\n)*)", text, re.M
    ):
        if "deleted file mode" in m.group(3):
            deleted.add(m.group(1))
        else:
            files.append(m.group(2))
        if "new file mode" in m.group(3):
            created.add(m.group(2))
    tests = [f for f in files if f.startswith("tests/") and re.search(r"/test_[^/]*\.py$", f)]
    return PatchInfo(
        subject=re.sub(r"^\[PATCH[^\]]*\]\s*", "", info.get("Subject", patch.stem)),
        author=info.get("Author", ""),
        email=info.get("Email", ""),
        message=TRAILER.sub("", msg).strip(),
        signoffs=re.findall(r"^Signed-off-by: (.+)$", msg, re.M),
        status=status.group(1).strip() if status else "Pending",
        files=files,
        tests=tests,
    )


def strip_status(text: str) -> str:
    """The patch email without its ``Upstream-Status:`` line (a workspace header, not part of
    the upstream commit); the diff and the other trailers are untouched."""
    cut = re.search(r"^---$", text, re.M)
    head, tail = (text[: cut.start()], text[cut.start() :]) if cut else (text, "")
    return re.sub(r"\n\n\n+", "\n\n", STATUS_LINE.sub("", head)) + tail


# --- results -------------------------------------------------------------------------------


@dataclass
class Bench:
    """The newest results of one benchmark (one "bench" value)."""

    name: str
    ref: str | None = None  # the variant speed-ups are against
    sources: list[dict] = field(default_factory=list)  # {"file","variant","command","device"}
    rows: list[dict] = field(default_factory=list)  # rows, each with its "variant"
    markdown: str = ""  # a reporter's table, when no JSON


def bench_names(options: dict[str, str]) -> list[tuple[str, str | None]]:
    """(name, reference variant or None) of a series entry's benchmarks (module doc)."""
    if "bench" in options:
        return [
            (n.partition(":")[0], n.partition(":")[2] or None)
            for n in options["bench"].split(",")
            if n
        ]
    m = re.search(r"test_(\w+)\.py$", options.get("contract", ""))
    return [(m.group(1).replace("_", "-"), None)] if m else []


def _stamp(data: dict) -> str:
    for key in ("date", "timestamp", "created"):
        v = data.get(key)
        if isinstance(v, int | float):
            return datetime.fromtimestamp(v, UTC).isoformat()
        if isinstance(v, str) and v:
            return v
    return ""


def _matches(bench: str, name: str) -> bool:
    bench, name = bench.replace("_", "-"), name.replace("_", "-")
    return bench == name or bench.startswith(name + "-")


def load_results(results_dir: Path, names: list[tuple[str, str | None]]) -> list[Bench]:
    """The results for each (name, ref) of bench_names (see the module doc for the rules).

    Unreadable JSON files are skipped, not fatal: a half-written result must not block a PR.
    """
    if not results_dir.is_dir():
        return []

    def label(f: Path) -> str:  # benchmarks/results/... as the workspace names it
        return f"{results_dir.parent.name}/{f.relative_to(results_dir.parent).as_posix()}"

    files = []
    for f in sorted(results_dir.rglob("*.json")):
        try:
            data = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("rows"), list):
            files.append((f, data))
    out = []
    for name, ref in names:
        md = [f for f in sorted(results_dir.glob("*.md")) if _matches(f.stem, name)]
        out += [
            Bench(f.stem, ref, [{"file": label(f)}], markdown=f.read_text().strip()) for f in md
        ]
        benches = (
            sorted({str(d.get("bench")) for _, d in files if _matches(str(d.get("bench")), name)})
            if not md
            else []
        )
        for bench_name in benches:
            newest: dict[str, tuple] = {}
            for f, data in files:
                variant = str(data.get("variant", ""))
                key = (_stamp(data), f.relative_to(results_dir).as_posix())
                if data.get("bench") == bench_name and (
                    variant not in newest or key > newest[variant][0]
                ):
                    newest[variant] = (key, f, data)
            b = Bench(bench_name)
            for _, f, data in sorted(newest.values(), key=lambda x: x[0][1]):
                b.ref = b.ref or ref or data.get("ref")
                b.sources.append(
                    {
                        "file": label(f),
                        "variant": str(data.get("variant", "")),
                        "command": str(data.get("command", "(not recorded)")),
                        "device": str(data.get("device", "(not recorded)")),
                    }
                )
                default = str(data.get("variant", ""))
                b.rows += [
                    {**r, "variant": str(r.get("variant", default))}
                    for r in data["rows"]
                    if isinstance(r, dict)
                ]
            out.append(b)
    return out


def _summary(ratios: dict[str, dict[str, list[float]]], what: dict[str, str]) -> list[str]:
    """'Speed-up of X (what[X]), per case: median, min, max' for each ratio column."""
    out = []
    for col, by_case in ratios.items():
        if any(by_case.values()):
            lines = [f"Speed-up {what[col]}, per case:"]
            for case, rs in by_case.items():
                rs.sort()
                lines.append(
                    f"- {case}: median {rs[len(rs) // 2]:.2f}x, min {rs[0]:.2f}x, "
                    f"max {rs[-1]:.2f}x ({len(rs)} rows)"
                )
            out.append("\n".join(lines))
    return out


def quote_report(md: str) -> str:
    """A reporter's Markdown for a PR body: headings demoted under the body's own, its long
    tables folded into <details>, and its ratio columns ('patched / base', values '1.06x')
    summarised per case (the leading text columns, e.g. case and dtype) above them."""
    md = re.sub(r"(?m)^(#{1,4}) ", lambda m: "#" * (len(m.group(1)) + 2) + " ", md)
    out, summaries = [], []
    for block in re.split(r"\n\s*\n", md):
        lines = block.splitlines()
        if len(lines) > 2 and all(x.lstrip().startswith("|") for x in lines):
            head = [c.strip() for c in lines[0].strip().strip("|").split("|")]
            cols = [i for i, h in enumerate(head) if re.fullmatch(r"\S.* / \S+", h)]
            ratios: dict[str, dict[str, list[float]]] = {head[i]: {} for i in cols}
            rows = [[c.strip() for c in r.strip().strip("|").split("|")] for r in lines[2:]]
            # a case is told by the leading columns before the first numeric one (the batch)
            n_key = (
                next(
                    (
                        i
                        for i in range(len(head))
                        if all(re.fullmatch(r"[\d.]+", r[i]) for r in rows if i < len(r))
                    ),
                    1,
                )
                or 1
            )
            for cells in rows:
                for i in cols:
                    m = re.fullmatch(r"([\d.]+)x", cells[i]) if i < len(cells) else None
                    if m:
                        ratios[head[i]].setdefault(" ".join(cells[:n_key]), []).append(
                            float(m.group(1))
                        )
            what = {
                h: "of {0} over {1} ({1} time / {0} time; above 1: faster)".format(*h.split(" / "))
                for h in ratios
            }
            summaries += _summary(ratios, what)
            if len(lines) - 2 > FOLD_ROWS:
                block = (
                    f"<details><summary>{len(lines) - 2} rows</summary>\n\n{block}\n\n</details>"
                )
        out.append(block)
    return "\n\n".join(summaries + out)


def _num(v, fmt: str) -> str:
    return format(v, fmt) if isinstance(v, int | float) and not isinstance(v, bool) else "-"


MEASURES = (
    ("us", "us", ".1f"),
    ("roofline_pct", "% roofline", ".0f"),
    ("compiles", "compiles", "d"),
)
FOLD_ROWS = 24  # longer tables go into a <details> block, under a one-line summary


def bench_table(bench: Bench) -> str:
    """A Markdown table: a line per (case, dtype, batch, and any field needed to tell rows of
    one variant apart, e.g. kernel_variant), per variant its time (microseconds), % of the
    roofline and compile count where the rows have them, and speed-ups = reference time /
    variant time (with their range above the table); then the rows that failed."""
    variants = list(dict.fromkeys(r["variant"] for r in bench.rows))
    ref = bench.ref or ("base" if "base" in variants else None)
    if ref in variants:
        variants.remove(ref)
        variants.insert(0, ref)
    base_key = ("case", "dtype", "batch")
    seen: dict[tuple, dict] = {}
    extra = []
    for r in bench.rows:
        k = (*(r.get(x) for x in base_key), r["variant"])
        if k in seen:
            extra += [
                f
                for f, v in r.items()
                if f not in (*base_key, "variant")
                and isinstance(v, str | int)
                and not isinstance(v, bool)
                and v != seen[k].get(f)
                and f not in ("us", "error", "timing")
            ]
        seen[k] = r
    key_fields = [*base_key, *dict.fromkeys(extra)]
    measures = [
        m
        for m in MEASURES
        if any(
            isinstance(r.get(m[0]), int | float) and not isinstance(r.get(m[0]), bool)
            for r in bench.rows
        )
    ]
    cells: dict[tuple, dict] = {}
    for r in bench.rows:
        cells.setdefault(tuple(r.get(f, "") for f in key_fields), {})[r["variant"]] = r
    others = [v for v in variants if v != ref] if ref in variants else []
    head = [
        *key_fields,
        *(f"{v or 'time'} {m[1]}" for v in variants for m in measures),
        *(f"{v} vs {ref}" for v in others),
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    errors, ratios = [], {v: {} for v in others}  # variant -> case -> speed-ups
    for key, by in cells.items():
        row = [str(x) for x in key]
        for v in variants:
            r = by.get(v, {})
            row += [_num(r.get(m[0]), m[2]) for m in measures]
            if r.get("error"):
                errors.append(f"- {' '.join(map(str, key))} {v}: {r['error']}")
        ref_us = by.get(ref, {}).get("us")
        for v in others:
            us = by.get(v, {}).get("us")
            ok = isinstance(ref_us, int | float) and isinstance(us, int | float) and us > 0
            row.append(f"{ref_us / us:.2f}x" if ok else "-")
            if ok:
                ratios[v].setdefault(f"{key[0]} {key[1]}".strip(), []).append(ref_us / us)
        lines.append("| " + " | ".join(row) + " |")
    table = "\n".join(lines)
    out = _summary(
        ratios, {v: f"of {v} over {ref} (= {ref} time / {v} time; above 1: faster)" for v in ratios}
    )
    if len(cells) > FOLD_ROWS:
        table = f"<details><summary>{len(cells)} rows</summary>\n\n{table}\n\n</details>"
    out.append(table)
    if errors:
        out.append("Rows that failed:\n" + "\n".join(dict.fromkeys(errors)))
    return "\n\n".join(out)


# --- checks --------------------------------------------------------------------------------


@dataclass
class Checks:
    """What the PR tool checked on a branch; rendered into the Test Result section.

    ``hooks`` holds [hook id, verdict] in pre-commit's words (Passed, Failed, Skipped);
    ``needs_cuda`` and ``skipped`` hold pytest node ids (skipped: [id, reason]).
    """

    host: str = 'CPU-only host (CUDA_VISIBLE_DEVICES="")'
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
            line += (
                f"; not run: needs CUDA, {len(gpu)} cases: {_count_by_test(gpu)} "
                "(to run on a Hopper GPU)"
            )
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
        out.append(
            f"- pre-commit, vLLM's own hooks (its `.pre-commit-config.yaml`, stage "
            f"pre-commit) on the {len(info.files)} touched files: "
            + "; ".join(f"{v.lower()}: {', '.join(h)}" for v, h in verdicts.items())
        )
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
    """Split a commit message into purpose / test plan / test result by its headings (Markdown
    '## Purpose' or 'Purpose:' lines); text before any heading is purpose."""
    parts = {"purpose": [], "test plan": [], "test result": []}
    key, last = "purpose", 0
    for m in HEADING.finditer(message):
        parts[key].append(message[last : m.start()])
        h = m.group(1).lower()
        key, last = ("test result" if h.startswith("test result") else h), m.end()
    parts[key].append(message[last:])
    # drop blank lines around each part, but not the indent of an opening code block
    trimmed = {k: [re.sub(r"^(\s*\n)+", "", x).rstrip() for x in v] for k, v in parts.items()}
    return {k: unwrap("\n\n".join(x for x in v if x)) for k, v in trimmed.items()}


def measurements(benches: list[Bench], names: list[tuple[str, str | None]]) -> str:
    """The figures of each bench with its files, commands and hardware; or the plain
    statement that none are attached."""
    if not benches:
        why = (
            f"benchmarks/results holds none for {', '.join(n for n, _ in names)}"
            if names
            else "no benchmark is declared for this patch"
        )
        return f"No measurements are attached to this PR ({why})."
    out = []
    for b in benches:
        lines = [f"Benchmark `{b.name}`:"]
        for src in b.sources:
            if "command" in src:
                lines.append(
                    f"- `{src['file']}`"
                    + (f" ({src['variant']})" if src["variant"] else "")
                    + f": on {src['device']}, command `{src['command']}`"
                )
            else:
                lines.append(
                    f"- `{src['file']}`, a reporter's tables (the commands and hardware "
                    "that produced them are stated in it):"
                )
        out.append(
            "\n".join(lines) + "\n\n" + (bench_table(b) if b.rows else quote_report(b.markdown))
        )
    missing = [n for n, _ in names if not any(_matches(b.name, n) for b in benches)]
    if missing:
        out.append("No results were found for " + ", ".join(f"`{n}`" for n in missing) + ".")
    return "\n\n".join(out)


def body(
    info: PatchInfo,
    base: str,
    benches: list[Bench],
    names: list[tuple[str, str | None]],
    checks: Checks | None,
) -> str:
    """The PR description in vLLM's template layout (Purpose / Test Plan / Test Result).

    Args:
        base: the upstream base the branch was made on, e.g. "v0.21.0 (9da56fd18b95)".
        benches: results found for the patch (load_results); names: what was asked for
            (bench_names).
        checks: what ran on the branch, or None when the branch was not checked.
    """
    s = sections(info.message)
    plan = [s["test plan"]] if s["test plan"] else []
    if info.tests:
        plan.append(
            "Tests this PR adds or changes:\n\n```bash\n"
            + "\n".join(f"pytest -q {t}" for t in info.tests)
            + "\n```"
        )
    else:
        plan.append("This PR adds no test file.")
    plan.append("Lint: `pre-commit run --files " + " ".join(info.files) + "`")
    figures = measurements(benches, names)
    own = s["test result"]
    placed = PENDING.search(own)
    if placed:
        own = own[: placed.start()] + figures + own[placed.end() :]
    result = [own] if own else []
    if checks is not None:
        result.append(
            f"Tests and checks on this branch, based on {base}:\n\n" + checks_md(info, checks)
        )
    if not placed:
        result.append(figures)
    parts = [
        ("Purpose", [s["purpose"] or info.subject]),
        ("Test Plan", plan),
        ("Test Result", result),
    ]
    return "\n\n".join(f"## {h}\n\n" + "\n\n".join(x) for h, x in parts) + "\n"


def commands(
    number: str,
    branch: str,
    title_text: str,
    remote: str,
    upstream_repo: str,
    owner: str | None,
    pr_url: str | None,
) -> str:
    """commands.sh: push the branch to the fork, then open (or, when already submitted,
    update) the PR with gh. Paths are relative to the script, which lives in out/prs/NNNN/."""
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
        "# --force: the branch is remade from the patch file on every run (the patch is the\n"
        "# source of truth; review changes go into the patch, then scripts/prs.sh again)\n"
        f"git -C vllm push --force {shlex.quote(remote)} "
        f"{branch}:refs/heads/{branch}\n"
        f'{gh} --title {shlex.quote(title_text)} --body-file "$here/body.md"\n'
    )
