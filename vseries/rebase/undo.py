"""--abort: put back everything as it was before the rebase began, from any state."""

import shutil
from pathlib import Path

from vseries import am, git, image
from vseries import pin as pinmod
from vseries.errors import SeriesError
from vseries.rebase.contracts import Contracts
from vseries.rebase.state import FINISHING, REFS, State, Store
from vseries.workspace import Workspace

# refs the engine makes in vllm/ for the length of a rebase
OWN_REFS = [REFS + n for n in ("orig-head", "orig-series", "old-tip")]


def need_state(store: Store) -> State:
    """The rebase in progress.

    Raises:
        SeriesError: there is none.
    """
    st = store.load()
    if st is None:
        raise SeriesError("no rebase is in progress", "scripts/rebase.sh <tag>")
    return st


def drop_refs(vdir: Path, refs: list[str]) -> None:
    for r in refs:
        git.run(vdir, "update-ref", "-d", r, check=False)


def _snapshot(path: Path) -> dict[str, bytes]:
    """{relative name: bytes} of a file or of the files in a folder (for "did it change?")."""
    if path.is_file():
        return {path.name: path.read_bytes()}
    return (
        {str(f.relative_to(path)): f.read_bytes() for f in sorted(path.rglob("*")) if f.is_file()}
        if path.is_dir()
        else {}
    )


def abort(ws: Workspace, quiet: bool = False) -> int:
    """--abort: put back vllm/ HEAD and branch (and the series branch's tip), the pin,
    patches/, the container recipe's default image, the gitlink; remove the refs and
    worktrees the rebase made. Works in every state, also after a run killed midway or in the
    finishing steps.

    Raises:
        SeriesError: no rebase is in progress.
    """
    store = Store(ws)
    st = need_state(store)
    vdir, root = ws.vllm, ws.root
    backup = store.backup
    if git.in_progress(vdir):
        git.run(vdir, "am", "--abort", check=False)
    git.run(vdir, "checkout", "-q", "-f", "--detach", st.orig_head)
    orig_series = git.rev(vdir, REFS + "orig-series")
    if orig_series and git.rev(vdir, am.BRANCH) != orig_series:
        git.run(vdir, "update-ref", f"refs/heads/{am.BRANCH}", orig_series)
    if st.orig_branch:
        git.run(vdir, "checkout", "-q", "-f", st.orig_branch)
    if (backup / "upstream.toml").exists() and _snapshot(backup / "upstream.toml") != _snapshot(
        ws.pin_file
    ):
        shutil.copy2(backup / "upstream.toml", ws.pin_file)
    if (backup / "patches").exists() and _snapshot(backup / "patches") != _snapshot(ws.patches):
        shutil.rmtree(ws.patches, ignore_errors=True)
        shutil.copytree(backup / "patches", ws.patches)
    kept = ws.main.root / "lines" / st.old.tag  # written by a finish that was cut short
    if (
        not ws.line
        and st.status == FINISHING
        and (backup / "upstream.toml").exists()
        and (kept / "upstream.toml").exists()
        and _snapshot(kept / "upstream.toml") == _snapshot(backup / "upstream.toml")
    ):
        shutil.rmtree(kept)
    if not ws.line and st.status == FINISHING and st.new:  # the recipe follows the pin left
        image.move_default(root, st.new.tag, pinmod.load(ws.pin_file).tag)
    if st.gitlink and git.gitlink(root) != st.gitlink:
        git.run(root, "update-index", "--cacheinfo", f"160000,{st.gitlink},vllm")
    Contracts(ws, st, lambda: None).remove_trees()
    drop_refs(vdir, st.refs + OWN_REFS)
    shutil.rmtree(backup, ignore_errors=True)
    store.remove()
    if not quiet:
        print(
            f"rebase: aborted; vllm/ is back at {st.orig_branch or st.orig_head[:12]}, "
            f"the pin at {st.old.tag}, patches/ as before"
        )
    return 0
