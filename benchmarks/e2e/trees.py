"""The intermediate trees of the series, as checkouts to stage: the pin plus the first k patches.

    python -m benchmarks.e2e.trees base series [p1 p1_2 ...] [--print-stage [--arch ARCH]]

Names (the rule is names.py's): ``base`` (the pin, k=0), ``p1`` (pin + patch 1), ``p1_K``
(patches 1..K; ``p1-K`` is accepted too), ``series`` (every patch in patches/series). Each
becomes ``.vseries/trees/<name>``: a detached ``git worktree`` of vllm/ at the pinned commit (its
full id, which resolves through ``git replace`` on the offline route), then ``git am -3 -k``
of the first k patch files, with the fixed committer of ``scripts/apply.sh`` (so ``series``
gets the same commit ids as vllm/'s branch ``series``). ``VSERIES_TREE.json`` (name, patches,
their sha256, head commit, pin) is written at the tree's top and in its ``vllm/`` package,
since the recipe's ``stage.py`` ships only ``vllm/``, ``tests/``, ``pyproject.toml`` and
``setup.py``: on the H200 the runner reads ``/root/vllm-<name>/vllm/VSERIES_TREE.json``.

Idempotent: a tree whose recorded pin, patch files and head match and that has no tracked
change is left alone; any other is reset to the pin and rebuilt. Names are Python
identifiers because ``stage.py`` requires them (``--src <name>=<dir>``).
"""

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

from benchmarks import shapes
from benchmarks.e2e.names import TREE_JSON, canonical, patch_count
from vseries import am, git, series
from vseries import pin as pinmod
from vseries.errors import SeriesError
from vseries.workspace import Workspace


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _current(dest: Path, want: dict) -> bool:
    """True when dest is a checkout built for ``want`` and still at its recorded head."""
    meta_file = dest / TREE_JSON
    if not git.is_repo(dest) or not meta_file.exists():
        return False
    try:
        meta = json.loads(meta_file.read_text())
    except ValueError:
        return False
    same = all(meta.get(k) == v for k, v in want.items())
    clean = not git.run(dest, "status", "--porcelain", "--untracked-files=no")
    return (
        same
        and clean
        and git.in_progress(dest) is None
        and git.rev(dest, "HEAD") == meta.get("head")
    )


def build(name: str, root: Path | None = None) -> Path:
    """Make (or check) ``<root>/<name>``, default root ``.vseries/trees``; returns the tree.

    Raises:
        ValueError: a bad tree name.
        SeriesError: a patch does not apply (the am session is aborted first).
    """
    name = canonical(name)
    ws = Workspace.current()
    pin = pinmod.load(ws.pin_file)
    _, entries = series.read(ws.series_file)
    k = patch_count(name, len(entries))
    chosen = entries[:k]
    vdir = ws.vllm
    dest = (root or ws.state / "trees") / name
    want = {
        "name": name,
        "pin": pin.commit,
        "tag": pin.tag,
        "patches": [e.name for e in chosen],
        "patch_sha256": [_sha(e.path) for e in chosen],
    }
    if _current(dest, want):
        return dest
    if not git.is_repo(dest):
        shutil.rmtree(dest, ignore_errors=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        git.run(vdir, "worktree", "prune")
        git.run(vdir, "worktree", "add", "-q", "--detach", str(dest), pin.commit)
    else:
        if git.in_progress(dest):
            git.run(dest, "am", "--abort", check=False)
        git.run(dest, "checkout", "-q", "-f", "--detach", pin.commit)
        git.run(dest, "clean", "-q", "-fd")
    if chosen:
        out = am.am(dest, [e.path for e in chosen])  # as apply makes the series' commits
        if git.in_progress(dest):
            git.run(dest, "am", "--abort", check=False)
            raise SeriesError(f"tree {name}: the series does not apply on the pin:\n{out}")
    meta = {**want, "head": git.rev(dest, "HEAD")}
    text = json.dumps(meta, indent=2) + "\n"
    (dest / TREE_JSON).write_text(text)
    if (dest / "vllm").is_dir():  # the package folder, which stage.py ships
        (dest / "vllm" / TREE_JSON).write_text(text)
    return dest


def stage_command(trees: dict[str, Path], recipe: str = "../shared/gpu", arch: str = "") -> str:
    """The recipe's stage.py line for these trees (run from the workspace root), with the
    stage.py arguments the model ``arch`` needs (its record's ``stage_args``, e.g.
    ``--deepgemm`` for DeepSeek-V4)."""
    extra = shapes.get(arch, served=True).stage_args if arch else ""
    root = Workspace.current().root
    srcs = " ".join(
        f"--src {n}={p.relative_to(root) if p.is_relative_to(root) else p}"
        for n, p in trees.items()
    )
    wheel = (
        "\"$(python -c 'from vseries import fetch, pin; p = pin.load(); "
        "print(fetch.fetch(p.package, p.wheel))')\""
    )
    return (
        f"python3 {recipe}/stage.py --attention {extra + ' ' if extra else ''}{srcs} "
        f"--wheel {wheel} "
        "--wheels .gpu/wheels --out .gpu/stage"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("names", nargs="+", help="base, p1, p1_2, ..., series")
    ap.add_argument("--root", type=Path, default=None, help="where the trees go (.vseries/trees)")
    ap.add_argument("--print-stage", action="store_true", help="print the stage.py command")
    ap.add_argument(
        "--arch",
        default="",
        choices=["", *shapes.SERVED],
        help="with --print-stage: the model to stage for (what it needs beyond the others, "
        "e.g. deepseek-v4: stage.py's --deepgemm)",
    )
    a = ap.parse_args(argv)
    built = {}
    try:
        for n in a.names:
            d = build(n, a.root)
            meta = json.loads((d / TREE_JSON).read_text())
            print(
                f"{meta['name']}: {d} head {meta['head'][:12]} patches {len(meta['patches'])}",
                flush=True,
            )
            built[meta["name"]] = d
    except (ValueError, SeriesError) as e:
        print(f"trees: {e}", file=sys.stderr)
        return 1
    if a.print_stage:
        print(stage_command(built, arch=a.arch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
