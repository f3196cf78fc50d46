"""build: editable install of vllm/ with the release kernels, then a summary.

``pip install -e vllm`` with VLLM_USE_PRECOMPILED=1 and the verified release wheel as
VLLM_PRECOMPILED_WHEEL_LOCATION: vLLM's setup copies the wheel's prebuilt kernels (_C,
_moe_C, ...) into the tree, so no CUDA compile happens. That is only right while the series
leaves csrc/ alone; a series that touches it is refused here with the from-source recipe.
"""

import os
import subprocess
import sys
from pathlib import Path

from vseries import fetch, git, host, linesite, materialise, patchfile, series, worktree
from vseries import pin as pinmod
from vseries.errors import SeriesError
from vseries.workspace import Workspace

# Paths whose change needs vLLM's CUDA/C++ build instead of the release kernels.
COMPILED = ("csrc/", "CMakeLists.txt", "cmake/")


def compiled_paths(entries: list[series.Entry]) -> list[str]:
    """Files under csrc/ (or the CMake build) that the series changes."""
    hits = []
    for e in entries:
        for f in patchfile.touched(e.path.read_text(errors="replace")):
            if f.startswith(COMPILED):
                hits.append(f"{e.name}: {f}")
    return hits


def torch_spec(pin: pinmod.Pin, ws: Workspace) -> list[str]:
    """What to pip-install for torch (and Triton) on this host.

    GPU hosts get the torch the release kernels were built for (pin.torch, which brings its
    Triton). CPU hosts get requirements/cpu-host.txt plus pin.triton. VSERIES_TORCH overrides.
    """
    if os.environ.get("VSERIES_TORCH"):
        return [os.environ["VSERIES_TORCH"], f"triton=={pin.triton}"]
    if host.has_gpu():
        return [f"torch=={pin.torch}"]
    return ["-r", str(ws.root / "requirements" / "cpu-host.txt"), f"triton=={pin.triton}"]


def applied(pin: pinmod.Pin, vdir: Path) -> list[str]:
    """The patches on a tree above its pin, oldest first: ``<short hash> <subject>``."""
    return git.run(vdir, "log", "--reverse", "--format=%h %s", f"{pin.commit}..HEAD").splitlines()


def summary(pin: pinmod.Pin, vdir: Path) -> bool:
    """Print pin, source, patches applied, vllm.__version__ and whether the kernels load;
    False when vllm does not import (the summary's vllm row says why)."""
    patches = applied(pin, vdir)
    ok_v, version = host.probe(
        "import vllm, os; print(vllm.__version__, os.path.dirname(vllm.__file__))"
    )
    # the release's kernel modules by name (v0.21.0: _C, _moe_C; v0.34.0: their stable-ABI
    # builds), whichever the tree holds
    names = [
        "vllm." + so.split(".")[0]
        for so in worktree.KERNELS
        if so.startswith("_") and (vdir / "vllm" / so).exists()
    ] or ["vllm._C"]
    ok_k, kern = host.probe(f"import {', '.join(names)}; print('loaded')")
    torch_v = host.probe("import torch; print(torch.__version__)")[1]
    if ok_k:
        kernels = f"release kernels load ({', '.join(names)})"
    elif "libcuda.so" in kern:
        kernels = (
            "release kernels are installed but cannot load here: no NVIDIA driver "
            "(libcuda.so.1). Expected on a CPU-only host; they load on a CUDA host with "
            f"torch {pin.torch}"
            + ("" if torch_v.startswith(pin.torch) else f" (this host has torch {torch_v})")
            + "."
        )
    else:
        kernels = f"release kernels do NOT load: {kern}"
    rows = [
        ("pin", f"{pin.tag} {pin.commit}"),
        ("source", materialise.source_of(vdir)),
        ("branch", git.head_branch(vdir) or "(detached)"),
        ("vllm", version if ok_v else f"import failed: {version}"),
        ("kernels", kernels),
        ("python", sys.executable),
    ]
    print("\nsummary")
    for k, v in rows:
        print(f"  {k:8} {v}")
    print(f"  patches  {len(patches)} applied")
    for line in patches:
        print(f"    {line}")
    return ok_v


def kept_lines(ws: Workspace) -> None:
    """A row per kept line after the main line's summary: its pin, tree and patches applied
    (its contract tier runs in scripts/test.sh), or the command that sets it up."""
    for line in ws.lines():
        pin = pinmod.load(line.pin_file)
        if git.is_repo(line.vllm):
            said = f"{ws.rel(line.vllm)}, {len(applied(pin, line.vllm))} patches applied"
        else:
            said = "not set up: scripts/setup.sh"
        print(f"  line     {line.line} (kept; pin {pin.tag} {pin.commit[:12]}): {said}")


def require_import(ok: bool) -> None:
    """A build whose vllm does not import has failed, whatever pip said."""
    if not ok:
        raise SeriesError(
            "vllm does not import in this environment (the summary's vllm row above says why)",
            f"{sys.executable} -c 'import vllm'   # the whole traceback; "
            "then scripts/build.sh --reinstall",
        )


def build(reinstall: bool = False, ws: Workspace | None = None, show: bool = True) -> None:
    """Install vllm/ editable into the running interpreter's environment (a no-op when it
    already is, unless ``reinstall``); then the summary, unless not ``show``.

    Raises:
        SeriesError: the series changes compiled code (csrc/); a download or pip step failed.
    """
    ws = ws or Workspace.current()
    pin = pinmod.load(ws.pin_file)
    vdir = materialise.ensure(quiet=True, ws=ws)
    git.require_checkout(vdir)
    entries = series.load(ws)
    hits = compiled_paths(entries)
    if hits:
        raise SeriesError(
            "the series changes compiled code, so the release kernels would not match it:\n"
            + "\n".join(f"  {h}" for h in hits)
            + "\nBuild from source for Hopper instead.",
            "TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 pip install --no-build-isolation -e vllm"
            "   # needs nvcc and the CUDA toolkit; about an hour",
        )
    # the installed distribution's version follows the pin (a rebase must reinstall)
    ok_i, where = host.probe(
        "import importlib.util as u, importlib.metadata as m; "
        "print(m.version('vllm'), u.find_spec('vllm').origin)"
    )
    installed, _, where = where.partition(" ")
    ok_i = ok_i and installed == pin.version  # "+cpu": an install from before the override
    if (
        not reinstall
        and ok_i
        and where.startswith(str(vdir))
        and any((vdir / "vllm" / so).exists() for so in worktree.KERNELS)
    ):
        # editable: vllm/'s sources are live, and the release kernels are in place
        print(
            "build: vllm is installed editable from vllm/ with the release kernels; nothing "
            "to do (scripts/build.sh --reinstall redoes it)"
        )
        if show:
            require_import(summary(pin, vdir))
        return
    wheel = fetch.fetch(pin.package, pin.wheel)
    ok_t, tv = host.probe("import torch, triton; print(torch.__version__, triton.__version__)")
    if ok_t and tv.split()[-1] == pin.triton:
        print(f"build: torch/triton present ({tv})")
    elif ok_t:  # the pin moved to a release whose torch brings another Triton
        print(f"build: torch/triton present ({tv}); Triton {pin.triton} for the pin")
        linesite.pip("install", "-q", f"triton=={pin.triton}")
    else:
        linesite.pip("install", "-q", *torch_spec(pin, ws))
    linesite.pip("install", "-q", "-r", str(vdir / "requirements" / "common.txt"))
    env = {
        **os.environ,
        "VLLM_USE_PRECOMPILED": "1",
        "VLLM_PRECOMPILED_WHEEL_LOCATION": str(wheel),
        # setuptools-scm would call a patched tree "0.21.1.devN"; the release it is built
        # on is the honest version, and the summary lists the patches on top.
        "SETUPTOOLS_SCM_PRETEND_VERSION": pin.version,
        # and without a "+cpu" suffix on a CPU-only host: from v0.24.0 vLLM reads its own
        # version and, finding "cpu" there, swaps Triton for its placeholder (v0.34.0's
        # setup.py takes the version as it is from VLLM_VERSION_OVERRIDE)
        "VLLM_VERSION_OVERRIDE": pin.version,
    }
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-build-isolation",
        "--no-deps",
        "-e",
        str(vdir),
    ]
    print(f"build: pip install -e vllm with the release kernels of {wheel.name}")
    if subprocess.run(cmd, env=env).returncode != 0:
        raise SeriesError(
            "the editable install of vllm/ failed (see pip's output above)",
            "scripts/build.sh   # after fixing what pip reported",
        )
    if show:
        require_import(summary(pin, vdir))


def main(args) -> int:
    if args.line_requirements:
        ws = Workspace.current()
        if not ws.line:
            raise SeriesError(
                "--line-requirements is for a kept line's tree; the main line's requirements "
                "go into its venv with the build",
                "VSERIES_LINE=<tag> python -m vseries build --line-requirements   # or "
                "scripts/setup.sh, which runs it for every kept line",
            )
        linesite.set_up(ws)
        return 0
    if args.summary_only:
        ws = Workspace.current()
        require_import(summary(pinmod.load(ws.pin_file), ws.vllm))
        if not ws.line:
            kept_lines(ws)
    else:
        git.require_no_rebase_run(Workspace.current().rebase_state)
        build(reinstall=args.reinstall, show=not args.no_summary)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser(
        "build",
        help="pip install -e vllm with the release kernels; summary",
        description="Install vllm/ editable into this environment with the prebuilt kernels "
        "of the pinned release wheel (VLLM_USE_PRECOMPILED=1; nothing is compiled), then "
        "print a summary: pin, source, patches applied, whether the kernels load here.",
    )
    p.add_argument("--summary-only", action="store_true", help="print the summary only")
    p.add_argument(
        "--no-summary",
        action="store_true",
        help="install without the summary (scripts/setup.sh prints it last, after the kept "
        "lines' trees)",
    )
    p.add_argument("--reinstall", action="store_true", help="run pip install -e again")
    p.add_argument(
        "--line-requirements",
        action="store_true",
        help="for a kept line (VSERIES_LINE): install the packages its tree needs that this "
        "venv lacks into the line's own folder .vseries/lines/TAG/site, which its contract "
        "runs put on PYTHONPATH; the venv is left as it is (scripts/setup.sh runs it for "
        "every kept line)",
    )
    p.set_defaults(func=main)
