"""The tree-name rule, in one place: which patches a tree of that name carries, and where it is.

Names: ``base`` (the pin, no patch), ``p1`` (pin + patch 1), ``p1_K`` (patches 1..K; ``p1-K``
is accepted and made ``p1_K``, since stage.py wants identifiers), ``series`` (every patch of
patches/series). A staged tree on the GPU host is ``<root>/vllm-<name>`` (assemble.sh unpacks
stage.py's ``src-<name>`` part there; ``benchmarks/h200/lib.sh`` ``tree_dir`` is the same rule
for the shell scripts). ``VSERIES_TREE.json`` (trees.py writes it at the tree's top and in its
``vllm/`` package, which travels) records what the tree carries.
"""

import json
import re
from pathlib import Path

TREE_JSON = "VSERIES_TREE.json"


def canonical(name: str) -> str:
    """``p1-2`` -> ``p1_2``; ``p1_1`` -> ``p1``."""
    name = name.replace("-", "_")
    return "p1" if name == "p1_1" else name


def patch_count(name: str, n_series: int | None) -> int | None:
    """How many patches of the series the tree ``name`` carries; None for ``series`` when the
    series' length ``n_series`` is not known (all of them).

    Raises:
        ValueError: an unknown name, or one asking for more patches than the series has.
    """
    if name == "base":
        return 0
    if name == "series":
        return n_series
    m = re.fullmatch(r"p1(?:[_-](\d+))?", name)
    if not m:
        raise ValueError(f"tree name {name!r}: use base, series, p1 or p1_K (patches 1..K)")
    k = int(m.group(1) or 1)
    if not 1 <= k <= (n_series if n_series is not None else k):
        raise ValueError(f"tree {name!r}: the series has {n_series} patches")
    return k


def host_dir(root: Path | str, name: str) -> Path:
    """Where the staged tree ``name`` is on the GPU host: ``<root>/vllm-<name>``."""
    return Path(root) / f"vllm-{name}"


def parse_spec(spec: str, root: Path | str) -> tuple[str, Path]:
    """``NAME[=DIR]`` -> (name, dir); DIR defaults to ``host_dir(root, NAME)``."""
    name, sep, d = spec.partition("=")
    return name, Path(d) if sep else host_dir(root, name)


def read_meta(name: str, d: Path) -> dict:
    """VSERIES_TREE.json of the tree at ``d`` (in its vllm/ package, else at its top), or a
    record saying it is missing."""
    for f in (d / "vllm" / TREE_JSON, d / TREE_JSON):
        if f.exists():
            try:
                return json.loads(f.read_text())
            except ValueError:
                break
    return {"name": name, "head": None, "patches": None, "missing": f"no {TREE_JSON} in {d}"}


def patches_of(name: str, d: Path) -> int | None:
    """How many patches the tree at ``d`` carries: its VSERIES_TREE.json, else its name
    (``patch_count``; None: all of them, or a name outside the rule)."""
    patches = read_meta(name, d).get("patches")
    if isinstance(patches, list):
        return len(patches)
    try:
        return patch_count(canonical(name), None)
    except ValueError:
        return None
