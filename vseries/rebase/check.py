"""--check: the whole rebase in a throw-away copy of the workspace; the real one is untouched."""

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from vseries import git
from vseries import pin as pinmod
from vseries.rebase import engine
from vseries.workspace import Workspace

# what the copy needs besides the pin and patches/: the contract tests and what they import
EXTRA = ("tests", "vseries", "pyproject.toml")


@contextmanager
def scratch(ws: Workspace) -> Iterator[Workspace]:
    """A temporary copy of ``ws`` for the block: upstream.toml, patches/ and EXTRA copied,
    vllm/ a clone that borrows the real one's objects (read-only) with its tags and replace
    refs, detached at the pin. Yields the copy's Workspace; removed afterwards."""
    git.require_checkout(ws.vllm, idle=False)
    common = Path(git.run(ws.vllm, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    with tempfile.TemporaryDirectory(prefix="vseries-check-") as tmp:
        copy = Workspace(Path(tmp).resolve())
        shutil.copy2(ws.pin_file, copy.pin_file)
        shutil.copytree(ws.patches, copy.patches)
        for extra in EXTRA:
            src = ws.root / extra
            if src.is_dir():
                shutil.copytree(
                    src, copy.root / extra, ignore=shutil.ignore_patterns("__pycache__")
                )
            elif src.exists():
                shutil.copy2(src, copy.root / extra)
        vdir = copy.vllm
        vdir.mkdir()
        git.run(vdir, "init", "-q")
        (vdir / ".git" / "objects" / "info" / "alternates").write_text(f"{common}/objects\n")
        git.run(
            vdir,
            "fetch",
            "-q",
            str(ws.vllm),
            "refs/replace/*:refs/replace/*",
            "refs/tags/*:refs/tags/*",
        )
        git.run(vdir, "checkout", "-q", "--detach", pinmod.load(ws.pin_file).commit)
        yield copy


def check(
    ws: Workspace,
    target: str,
    commit: str | None = None,
    route: str = "auto",
    contracts: bool = True,
    report: Path | None = None,
) -> int:
    """Classify the series against ``target`` without changing the workspace.

    Returns:
        0 when every patch would be carried or is upstreamed; 1 when one needs a person.
    """
    report = report.resolve() if report else None
    with scratch(ws) as copy:
        return engine.start(copy, target, commit, route, contracts, check=True, report=report)
