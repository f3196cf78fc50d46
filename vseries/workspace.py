"""The workspace: one explicit object that says where its files live.

A workspace is a folder holding ``upstream.toml`` (the pin), ``patches/`` (the series),
``vllm/`` (the upstream checkout) and ``.vseries/`` (scratch state, ignored by git). Verbs
take a ``Workspace`` and pass it down; nothing changes the process environment to point the
code at another workspace (``rebase --check`` builds a scratch ``Workspace`` and hands it on).

``Workspace.current()`` is the one place that reads ``VSERIES_ROOT``: the command line (and
the tests, on copies) start from it.
"""

import os
from dataclasses import dataclass
from pathlib import Path

# The checkout this package was installed from (editable); the default workspace.
HOME = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Workspace:
    """A workspace root and the places in it (all absolute paths).

    Attributes:
        root: the workspace folder (holds upstream.toml, patches/, vllm/).
    """

    root: Path

    @classmethod
    def current(cls) -> "Workspace":
        """The workspace the command runs in: ``VSERIES_ROOT`` when set, else HOME."""
        return cls(Path(os.environ.get("VSERIES_ROOT", HOME)).resolve())

    @property
    def vllm(self) -> Path:
        """The upstream checkout (the git submodule), ``<root>/vllm``."""
        return self.root / "vllm"

    @property
    def patches(self) -> Path:
        """The patch files and the series file, ``<root>/patches``."""
        return self.root / "patches"

    @property
    def series_file(self) -> Path:
        return self.patches / "series"

    @property
    def pin_file(self) -> Path:
        return self.root / "upstream.toml"

    @property
    def state(self) -> Path:
        """Workspace-local scratch (base worktree, rebase state, reports); ignored by git."""
        return self.root / ".vseries"

    def rel(self, path: Path) -> str:
        """``path`` relative to the root when it is inside it, else the whole path."""
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)


def cache_dir() -> Path:
    """Download cache shared by every workspace on the machine: VSERIES_CACHE, else
    $XDG_CACHE_HOME/vseries, else ~/.cache/vseries."""
    env = os.environ.get("VSERIES_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(xdg) / "vseries"
