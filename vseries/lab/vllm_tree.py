"""Import a plain vLLM checkout as the one vLLM of the process (not the installed one)."""

import atexit
import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlparse


def use_vllm_tree() -> str | None:
    """Make the vLLM tree that ``import vllm`` loads the only vLLM this process sees.

    Call it before vLLM is imported. A plain checkout put first on PYTHONPATH (the base, or
    plain upstream in the rebase tool) is not the installed vLLM (here: the patched pin,
    installed editable), and the installed one leaks into it in two ways, both fixed here:

    - Metadata. vLLM v0.24.0 and later read ``importlib.metadata.version("vllm")`` to tell a
      CPU build: with "cpu" in it, and no CPU backend in Triton,
      ``vllm/triton_utils/importing.py`` puts its Triton placeholder in place whatever
      ``CUDA_VISIBLE_DEVICES`` says (v0.33.0: through
      ``vllm.platforms.vllm_version_matches_substr``, which also makes the platform CPU). A
      checkout has no metadata of its own, so the installed vLLM answers: "0.21.0+cpu", as it
      was built against a CPU-only torch. The tree gets a metadata entry of its own
      (``vllm-<version>.dist-info`` in a temporary directory, served by a metadata finder
      first on ``sys.meta_path``, which importlib.metadata asks in order; it finds no
      module), with the tree's version from its ``vllm/_version.py`` or ``PKG-INFO`` when it
      has one, else "0+unknown".
    - Modules. setuptools' editable finder (on ``sys.meta_path``, after the path finder)
      resolves ``vllm.<name>`` that the tree lacks in the installed tree: ``vllm._C`` and
      ``vllm._moe_C`` (the pin's release kernels) and ``vllm._version`` would be the pin's.
      Meta-path finders that find ``vllm`` outside the tree are removed.

    An installed vLLM (editable or not), or a source release with its egg-info, is left as
    it is.

    Returns:
        The version given to the tree, or None when nothing was done (vllm already imported,
        not importable, or the tree is the installed vLLM).
    """
    if "vllm" in sys.modules:
        return None
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.origin:
        return None
    tree = Path(spec.origin).resolve().parents[1]
    try:
        if _metadata_tree(importlib.metadata.distribution("vllm")) == tree:
            return None
    except importlib.metadata.PackageNotFoundError:
        pass
    for finder in list(sys.meta_path):
        if finder is importlib.machinery.PathFinder or not hasattr(finder, "find_spec"):
            continue
        found = finder.find_spec("vllm", None)
        if found is not None and found.origin and tree not in Path(found.origin).parents:
            sys.meta_path.remove(finder)
    version = _tree_version(tree)
    where = Path(tempfile.mkdtemp(prefix="vseries-vllm-metadata-"))
    atexit.register(shutil.rmtree, where, ignore_errors=True)
    info = where / f"vllm-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    # Names the tree, so that a second call (another contract module) sees it as the tree's.
    url = {"url": tree.as_uri(), "dir_info": {"editable": True}}
    (info / "direct_url.json").write_text(json.dumps(url))
    sys.meta_path.insert(0, _TreeMetadata(importlib.metadata.PathDistribution(info)))
    importlib.invalidate_caches()
    return version


class _TreeMetadata(importlib.metadata.DistributionFinder):
    """Answers importlib.metadata's look-ups of "vllm" with the tree's own distribution,
    ahead of every other finder (the path's: the installed vLLM's); it finds no module."""

    def __init__(self, dist: importlib.metadata.Distribution):
        self.dist = dist

    def find_spec(self, *args, **kwargs):
        return None

    def find_distributions(self, context=None):
        name = context.name if context is not None else None
        if name is None or re.sub(r"[-_.]+", "_", name).lower() == "vllm":
            return iter([self.dist])
        return iter([])


def _metadata_tree(dist: importlib.metadata.Distribution) -> Path:
    """The directory whose ``vllm/`` package a distribution's metadata describes."""
    url = json.loads(dist.read_text("direct_url.json") or "{}")
    if url.get("dir_info", {}).get("editable") and url.get("url", "").startswith("file:"):
        return Path(unquote(urlparse(url["url"]).path)).resolve()
    return Path(dist.locate_file("")).resolve()


def _tree_version(tree: Path) -> str:
    """A vLLM tree's version: from its vllm/_version.py (setuptools-scm's, in a source
    release) or PKG-INFO; "0+unknown" for a checkout that has neither (the rebase tool's
    plain-upstream worktree: the sdist-only files are removed)."""
    for path, pattern in (
        (tree / "vllm" / "_version.py", r"__version__\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)"),
        (tree / "PKG-INFO", r"^Version:\s*(\S+)"),
    ):
        m = re.search(pattern, path.read_text(errors="replace"), re.M) if path.is_file() else None
        if m:
            return m.group(1)
    return "0+unknown"
