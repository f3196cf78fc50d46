"""The container recipe's default release image follows the pin.

``deploy/Dockerfile`` builds from ``vllm/vllm-openai:${VLLM_TAG}``, and its ``ARG VLLM_TAG=<tag>``
default is the main line's pin (upstream.toml's tag): ``docker build`` without a build
argument then installs the series' wheel over the release it was built for. The rebase verb
moves the default with the pin (and ``--abort`` moves it back); a kept line passes its tag as a
build argument.
"""

import re
from pathlib import Path

DOCKERFILE = Path("deploy") / "Dockerfile"
_ARG = re.compile(r"^ARG VLLM_TAG=(\S+)[ \t]*$", re.M)


def default_tag(root: Path) -> str | None:
    """The recipe's default ``VLLM_TAG``, or None (no recipe, or no default in it)."""
    path = root / DOCKERFILE
    m = _ARG.search(path.read_text()) if path.is_file() else None
    return m.group(1) if m else None


def move_default(root: Path, old: str, new: str) -> bool:
    """Set the recipe's default ``VLLM_TAG`` from ``old`` to ``new``; a default that is not
    ``old`` (edited by hand, or already moved) is left as it is.

    Returns:
        Whether the recipe changed.
    """
    path = root / DOCKERFILE
    if old == new or default_tag(root) != old:
        return False
    data = path.read_bytes()  # bytes: a CRLF checkout keeps its line ends
    pattern = re.compile(rb"^ARG VLLM_TAG=" + re.escape(old.encode()) + rb"(?=[ \t]*\r?$)", re.M)
    path.write_bytes(pattern.sub(b"ARG VLLM_TAG=" + new.encode(), data, count=1))
    return True
