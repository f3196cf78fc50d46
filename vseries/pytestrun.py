"""pytest in a fresh interpreter, and the one reader of its JUnit XML report.

Standard library only: the upstream tier runs it on a GPU host that has no package index.
"""

import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

# pytest in a fresh interpreter: -P keeps the working directory (the workspace root, whose
# vllm/ folder would shadow the tree under test) off sys.path; no cache files in the trees.
PYTEST = [sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider"]
# the plugins run() leaves out: hypothesis's costs 1.2 s of CPU per interpreter on a 2-core
# host (it imports all of hypothesis) and no contract or selected vLLM test needs it
LEAN = ["-p", "no:hypothesispytest"]
# pytest's closing line ("3 passed, 1 skipped in 2.1s", "no tests ran in 0.1s")
_CLOSING = re.compile(r"\d+ (passed|failed|error|skipped|deselected)|no tests ran")


@dataclass
class Case:
    """One test case of a JUnit report.

    Attributes:
        name: the test function's name with its parameters, e.g. ``test_x[a-1]``.
        classname: pytest's dotted module (and class) path, e.g. ``tests.test_k``.
        file: the test file relative to the run's directory (xunit1 reports; "" otherwise).
        kind: "passed", "failure", "error" or "skipped".
        message: the failure / error / skip message attribute ("" when passed or absent).
        text: the traceback or details inside the element.
    """

    name: str
    classname: str
    file: str
    kind: str
    message: str = ""
    text: str = ""

    @property
    def summary(self) -> str:
        """The message, else the details (what a reader is shown first)."""
        return self.message or self.text

    @property
    def outcome(self) -> str:
        """passed / failed / error / skipped (pytest's own words)."""
        return "failed" if self.kind == "failure" else self.kind

    @property
    def node(self) -> str:
        """A pytest node id: ``<file>::<name>`` (``<classname>::<name>`` without a file)."""
        return f"{self.file or self.classname}::{self.name}"


def junit(xml: Path) -> list[Case]:
    """The cases of a pytest JUnit XML report, in order; [] when the file does not exist."""
    if not xml.exists():
        return []
    out = []
    for case in ET.parse(xml).getroot().iter("testcase"):
        found = [c for c in case if c.tag in ("failure", "error", "skipped")]
        # a test that fails and then errors in teardown reports both: the failure decides
        first = next((c for c in found if c.tag == "failure"), found[0] if found else None)
        out.append(
            Case(
                name=case.get("name", "?"),
                classname=case.get("classname", ""),
                file=case.get("file", ""),
                kind=first.tag if first is not None else "passed",
                message=(first.get("message") or "") if first is not None else "",
                text=(first.text or "") if first is not None else "",
            )
        )
    return out


@dataclass
class Run:
    """One pytest run: its exit code (124: killed at the timeout), stdout, stderr and cases.

    pytest's exit codes: 0 all passed, 1 some failed, 5 nothing collected.
    """

    code: int
    out: str = ""
    err: str = ""
    cases: list[Case] = field(default_factory=list)
    reported: bool = False  # pytest wrote its JUnit report (it did not die before)

    @property
    def closing(self) -> str:
        """pytest's closing line, e.g. "2 passed, 1 skipped in 3.10s" (the last line when
        there is none)."""
        lines = [x for x in self.out.strip().splitlines() if x.strip()]
        last = (lines or ["(no output)"])[-1]
        return next((x for x in reversed(lines) if _CLOSING.search(x)), last).strip("= ")

    @property
    def skip_lines(self) -> tuple[str, ...]:
        """The reasons pytest printed for skipped tests (``-rs``), one line each."""
        return tuple(
            x.removeprefix("SKIPPED ") for x in self.out.splitlines() if x.startswith("SKIPPED ")
        )


def run(
    args: list[str],
    cwd: Path,
    pythonpath: list[str] = (),
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    capture: bool = True,
    safe_path: bool = True,
    xml: Path | None = None,
) -> Run:
    """Run ``pytest <args>`` in a fresh interpreter in ``cwd`` with a JUnit report.

    Args:
        args: pytest arguments (test paths, -m, -k, -rs ...).
        cwd: the directory pytest runs in.
        pythonpath: folders put first on PYTHONPATH (e.g. the vLLM tree under test).
        env: extra environment variables.
        timeout: seconds; a run past it is killed and gives code 124 and the cases its
            report never got (none).
        capture: keep the output (False: it goes to this process's stdout, e.g. a tier).
        safe_path: run with ``python -P`` (the working directory off sys.path).
        xml: where to keep the JUnit report (default: a temporary file, removed).
    """
    full = {**os.environ, **(env or {})}
    paths = [str(p) for p in pythonpath if str(p)]
    if paths:
        full["PYTHONPATH"] = os.pathsep.join([*paths, full.get("PYTHONPATH", "")]).strip(os.pathsep)
    cmd = PYTEST if safe_path else [x for x in PYTEST if x != "-P"]
    with tempfile.TemporaryDirectory(prefix="vseries-pytest-") as tmp:
        xml = xml or Path(tmp) / "junit.xml"
        try:
            p = subprocess.run(
                [*cmd, *LEAN, "-o", "junit_family=xunit1", f"--junitxml={xml}", *args],
                cwd=cwd,
                env=full,
                capture_output=capture,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return Run(124)
        return Run(p.returncode, p.stdout or "", p.stderr or "", junit(xml), xml.exists())
