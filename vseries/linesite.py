"""linesite: a kept line's own packages, kept apart from the main line's venv.

A kept line's trees (``.vseries/lines/<tag>/vllm`` and its base) are imported from
PYTHONPATH by its contract tier, which runs from the main line's venv. The packages of the
line's ``requirements/common.txt`` that the venv lacks go to the line's own folder
``.vseries/lines/<tag>/site`` (``pip install --target``), never into the venv: the main venv
holds what the main pin asks for, nothing more. That folder goes on PYTHONPATH after the
line's tree, for that line's runs only (its contract and upstream tiers, a rebase of it:
pythonpath), and only where it adds a package (a venv of the
line's own, ``.venv-<tag>`` from ``scripts/setup.sh --line <tag>``, has them all).

pip's resolver picks the versions (``--dry-run --report`` in this venv, so that what the venv
has counts); the folder then gets exactly the distributions the report names and the venv
lacks, ``--no-deps`` (``--target`` alone ignores the venv and would copy numpy, pydantic ...
in beside the main line's). A distribution the venv has keeps the venv's version.
"""

import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from vseries import host
from vseries.errors import SeriesError
from vseries.workspace import Workspace

CLEAN = "rm -rf .venv && scripts/setup.sh"  # a main venv without what only a kept line needs


def canonicalize_name(name: str) -> str:
    """A distribution's name as pip compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(ws: Workspace) -> list:
    """The requirements of ``ws``'s tree (``requirements/common.txt``) that apply here."""
    return read(ws.vllm / "requirements" / "common.txt")


def read(path: Path) -> list:
    """The requirements (packaging's Requirement) of a requirements file that apply on this
    host (markers evaluated); options and ``-r`` lines left out, none when there is no file."""
    # packaging is imported here: the command line (and --help) needs the standard library only
    from packaging.requirements import InvalidRequirement, Requirement

    out = []
    for raw in path.read_text().splitlines() if path.is_file() else []:
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is None or req.marker.evaluate():
            out.append(req)
    return out


def installed(path: list[str] | None = None) -> dict[str, str]:
    """{canonical name: version} of the distributions on ``path`` (default: sys.path, this
    interpreter's environment)."""
    dists = importlib.metadata.distributions(**({"path": path} if path is not None else {}))
    return {canonicalize_name(d.metadata["Name"]): d.version for d in dists if d.metadata["Name"]}


# Below this much free space where pip writes (the venv, the temporary folder) a failed pip
# run is more likely a full disk ("No space left on device") than the network.
LOW_DISK = 1 << 30


def pip(*args: str) -> None:
    """Run this interpreter's pip; raises SeriesError naming the command on failure (and a
    nearly full disk, where that is the likelier cause)."""
    cmd = [sys.executable, "-m", "pip", *args]
    if subprocess.run(cmd).returncode != 0:
        low = host.short_of_disk(LOW_DISK, [sys.prefix, tempfile.gettempdir()])
        hint = "check the network or the index; then scripts/setup.sh again"
        if low:
            hint = (f"little disk left: {', '.join(low)}; free some (df -h), "
                    "then scripts/setup.sh again")  # fmt: skip
        raise SeriesError(f"pip failed: {' '.join(cmd[2:])}", hint)


def resolve(reqs: list[str]) -> list[tuple[str, str]]:
    """(name, version) of every distribution pip would install in this venv for ``reqs``,
    with their dependencies, what the venv has counting (pip install --dry-run --report)."""
    with tempfile.TemporaryDirectory(prefix="vseries-site-") as tmp:
        report = Path(tmp) / "report.json"
        pip("install", "-q", "--dry-run", "--report", str(report), *reqs)
        items = json.loads(report.read_text()).get("install", [])
    return [(i["metadata"]["name"], i["metadata"]["version"]) for i in items]


def install(ws: Workspace) -> list[str]:
    """For the kept line ``ws``: put the packages its tree needs and this venv lacks into
    ``ws.site``, with the dependencies the venv lacks; the venv is left as it is. Nothing
    happens when the venv and the folder already hold them all (by distribution name); else
    the folder is made anew from one pip run. Returns the requirement lines that were
    missing."""
    here = installed()
    lacked = [r for r in requirements(ws) if canonicalize_name(r.name) not in here]
    have = installed([str(ws.site)]) if ws.site.is_dir() else {}
    missing = [str(r) for r in lacked if canonicalize_name(r.name) not in have]
    if not missing:
        return []
    print(
        f"build{ws.label}: installing what the line needs and the main venv lacks into "
        f"{ws.rel(ws.site)} (the venv is left as it is): {missing}"
    )
    found = resolve([str(r) for r in lacked])
    kept = [f"{n} {here[canonicalize_name(n)]}" for n, _ in found if canonicalize_name(n) in here]
    if kept:
        print(f"build{ws.label}: kept at the main venv's version for the line: {kept}")
    pins = [f"{n}=={v}" for n, v in found if canonicalize_name(n) not in here]
    new = ws.site.with_name(ws.site.name + ".new")
    shutil.rmtree(new, ignore_errors=True)
    pip("install", "-q", "--no-deps", "--no-compile", "--target", str(new), *pins)
    old = ws.site.with_name(ws.site.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if ws.site.exists():
        ws.site.rename(old)
    new.rename(ws.site)
    shutil.rmtree(old, ignore_errors=True)
    return missing


def stray(ws: Workspace) -> list[str]:
    """The packages of the kept line ``ws``'s requirements that this venv holds although the
    main line's requirements do not name them and no installed distribution requires them:
    what a set-up before the line's own folder put into the main venv."""
    asked = requirements(ws.main) + [
        r for f in sorted((ws.root / "requirements").glob("*.txt")) for r in read(f)
    ]  # the main line's tree, and the workspace's own (requirements/workspace.txt ...)
    main = {canonicalize_name(r.name) for r in asked}
    needed = set()  # every name an installed distribution requires (its Requires-Dist)
    for d in importlib.metadata.distributions():
        for line in d.requires or []:
            m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line)
            if m:
                needed.add(canonicalize_name(m.group(1)))
    here = installed()
    names = dict.fromkeys(canonicalize_name(r.name) for r in requirements(ws))
    return [n for n in names if n in here and n not in main and n not in needed]


def set_up(ws: Workspace) -> None:
    """scripts/setup.sh's step for a kept line: install(ws), and a line saying how to get a
    clean main venv when this one holds packages only the line asks for (stray)."""
    install(ws)
    extra = stray(ws)
    if extra:
        print(
            f"build{ws.label}: the main venv holds packages only this line asks for, put there "
            f"by a set-up before kept lines got their own folder: {', '.join(extra)}. The main "
            f"line does not need them; for a main venv without them: {CLEAN}"
        )


def pythonpath(ws: Workspace) -> list[Path]:
    """The folders a kept line's runs put on PYTHONPATH after its tree: ``ws.site`` when it
    holds a distribution this interpreter's environment lacks; none for the main line."""
    if not ws.line or not ws.site.is_dir():
        return []
    here = installed()
    return [ws.site] if set(installed([str(ws.site)])) - set(here) else []
