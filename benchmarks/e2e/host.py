"""What ``host.sh`` asks before it starts the runner on the GPU host: is the model's flavour
valid, is every tree staged, does the host have what the model needs (its record's
``host_needs``), and which MoE backend must each tree log.

    python3 -m benchmarks.e2e.host --model ARCH [--flavour F] --tree-root /root \\
        --site /root/site --fi-so PATH TREE [TREE ...]

Prints the flavour on the first line, then serve.py's arguments one a line: for each tree
``--expect-backend TREE=BACKEND`` (its flavour's backend for the patches the tree carries:
``models.Flavour.backend``); where that is FLASHINFER_CUTLASS and FlashInfer's reduced FP8 MoE
module (``--fi-so``) is not on the host, TRITON stands in (``--tree-env
TREE:VLLM_USE_FLASHINFER_MOE_FP8=0``: FlashInfer would JIT-build for longer than a call) and
``--note`` says so. Exit 1 with "!!! ..." lines saying what is wrong and the command that
mends it.
"""

import argparse
import importlib.machinery
import sys
from pathlib import Path

from benchmarks import shapes
from benchmarks.e2e import models, names


class NotReady(Exception):
    """The host cannot run this model; the message is the lines to print."""


def missing(shape: shapes.ModelShape, site: Path, trees: dict[str, Path], python: str) -> list:
    """What of the record's ``host_needs`` the host lacks, one line each (per tree for a
    tree's)."""
    out = []
    for need in shape.host_needs:
        if need.site and not list(site.glob(need.site)):
            out.append(need.what.format(site=site))
        if need.module and not importlib.machinery.PathFinder.find_spec(
            need.module, [str(site), *sys.path]
        ):
            out.append(need.what.format(site=site, python=python))
        for d in trees.values() if need.tree else ():
            if not list(d.glob(need.tree)):
                out.append(need.what.format(tree=d))
    return out


def plan(a: argparse.Namespace) -> list[str]:
    """The flavour and serve.py's arguments (see the module docstring).

    Raises:
        NotReady: an unknown model or flavour, a tree not staged, a need not met.
    """
    try:
        shape = shapes.get(a.model, served=True)
        flavour = a.flavour or shape.flavours[0]
        models.check_flavour(a.model, flavour)
    except ValueError as e:
        raise NotReady(f"!!! {e}") from e
    trees = {t: names.host_dir(a.tree_root, t) for t in a.trees}
    unstaged = [
        f"!!! {d} is not staged (stage.py --src {t}=...)"
        for t, d in trees.items()
        if not d.is_dir()
    ]
    if unstaged:
        raise NotReady("\n".join(unstaged))
    lacks = missing(shape, a.site, trees, a.python)
    if lacks:
        stage = f"python -m benchmarks.e2e.trees {' '.join(trees)} --print-stage --arch {a.model}"
        wheels = f", with .gpu/wheels also holding the wheels of {shape.host_wheels}"
        raise NotReady(
            f"!!! MODEL={a.model} needs what is not staged:\n"
            + "".join(f"!!!   {x}\n" for x in lacks)
            + f"!!! stage with stage.py --attention {shape.stage_args} (the line of\n"
            + f"!!! '{stage}'){wheels if shape.host_wheels else ''};\n"
            + "!!! see benchmarks/e2e/README.md"
        )
    args, notes = [], []
    for t, d in trees.items():
        backend = models.FLAVOURS[flavour].backend(names.patches_of(t, d))
        if backend == "FLASHINFER_CUTLASS" and not a.fi_so.is_file():
            args += ["--tree-env", f"{t}:VLLM_USE_FLASHINFER_MOE_FP8=0"]
            backend = "TRITON"
            notes.append(
                f"tree {t}: no FlashInfer FP8 MoE build on the host, so TRITON "
                "(VLLM_USE_FLASHINFER_MOE_FP8=0) stands in for FLASHINFER_CUTLASS"
            )
        args += ["--expect-backend", f"{t}={backend}"]
    if notes:
        args += ["--note", ";".join(notes)]
    return [flavour, *args]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", required=True, help="the arch: a record of benchmarks/shapes.py")
    ap.add_argument("--flavour", default="", help="default: the record's first flavour")
    ap.add_argument("--tree-root", type=Path, default=Path("/root"))
    ap.add_argument("--site", type=Path, default=Path("/root/site"))
    ap.add_argument("--python", default="python3", help="named in what is missing")
    ap.add_argument("--fi-so", type=Path, required=True, help="FlashInfer's reduced FP8 module")
    ap.add_argument("trees", nargs="+")
    a = ap.parse_args(argv)
    try:
        print("\n".join(plan(a)))
    except NotReady as e:
        print(e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
