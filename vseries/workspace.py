"""The workspace: one explicit object that says where its files live.

A workspace is a folder holding ``upstream.toml`` (the pin), ``patches/`` (the series),
``vllm/`` (the upstream checkout) and ``.vseries/`` (scratch state, ignored by git). Verbs
take a ``Workspace`` and pass it down; nothing changes the process environment to point the
code at another workspace (``rebase --check`` builds a scratch ``Workspace`` and hands it on).

``Workspace.current()`` is the one place that reads ``VSERIES_ROOT`` and ``VSERIES_LINE``: the
command line (and the tests, on copies) start from it.

Lines. The main line is the pin at the root (``upstream.toml``, ``patches/``, ``vllm/``). A
rebase keeps the line it leaves under ``lines/<tag>/`` (its ``upstream.toml`` and
``patches/``), so that users of the older release keep their series. ``Workspace(root,
line=tag)`` is that line as a workspace of its own: its pin and patches from ``lines/<tag>/``,
its checkout and scratch under ``.vseries/lines/<tag>/`` (the ``vllm/`` submodule is the main
line's).
"""

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from vseries.errors import SeriesError

# The checkout this package was installed from (editable); the default workspace.
HOME = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Workspace:
    """A workspace root and the places in it (all absolute paths).

    Attributes:
        root: the workspace folder (holds upstream.toml, patches/, vllm/).
    """

    root: Path
    line: str | None = None

    @classmethod
    def current(cls) -> "Workspace":
        """The workspace the command runs in: ``VSERIES_ROOT`` when set, else HOME; the kept
        line ``VSERIES_LINE`` of it when that is set (the verbs' ``--line <tag>``, where they
        have one, gives ``kept``).

        Raises:
            SeriesError: ``VSERIES_LINE`` names no kept line.
        """
        ws = cls(Path(os.environ.get("VSERIES_ROOT", HOME)).resolve())
        line = os.environ.get("VSERIES_LINE")
        fix = "unset VSERIES_LINE   # the main line; or set it to one of those"
        return ws.kept(line, "VSERIES_LINE", fix) if line else ws

    @property
    def main(self) -> "Workspace":
        """The main line of this workspace (itself when it is the main line)."""
        return Workspace(self.root)

    @property
    def line_dir(self) -> Path:
        """Where a kept line's pin and patches live: ``<root>/lines/<tag>`` (the root itself
        for the main line)."""
        return self.root / "lines" / self.line if self.line else self.root

    def lines(self) -> list["Workspace"]:
        """The kept lines of this workspace (``lines/<tag>/upstream.toml``), oldest tag last."""
        found = [p.parent.name for p in (self.root / "lines").glob("*/upstream.toml")]
        return [Workspace(self.root, t) for t in sorted(found, key=_tag_key, reverse=True)]

    @property
    def vllm(self) -> Path:
        """The upstream checkout: the git submodule ``<root>/vllm``; for a kept line its own
        repository ``.vseries/lines/<tag>/vllm``."""
        if self.line:
            return self.root / ".vseries" / "lines" / self.line / "vllm"
        return self.root / "vllm"

    @property
    def patches(self) -> Path:
        """The patch files and the series file, ``<root>/patches`` (a kept line's:
        ``lines/<tag>/patches``)."""
        return self.line_dir / "patches"

    @property
    def series_file(self) -> Path:
        return self.patches / "series"

    @property
    def pin_file(self) -> Path:
        return self.line_dir / "upstream.toml"

    @property
    def state(self) -> Path:
        """Workspace-local scratch (base worktree, rebase state, reports); ignored by git.
        A kept line's: ``.vseries/lines/<tag>/state``."""
        if self.line:
            return self.root / ".vseries" / "lines" / self.line / "state"
        return self.root / ".vseries"

    @property
    def rebase_state(self) -> Path:
        """The state file of a ``scripts/rebase.sh`` run that has not finished
        (vseries.rebase.state.Store)."""
        return self.state / "rebase" / "state.json"

    @property
    def site(self) -> Path:
        """A kept line's own packages, those its tree needs and the main line's venv lacks
        (``pip install --target``; on PYTHONPATH for that line's runs only):
        ``.vseries/lines/<tag>/site``. The main line has none: its venv holds what it needs."""
        if not self.line:
            raise ValueError("the main line has no site folder: its venv holds what it needs")
        return self.root / ".vseries" / "lines" / self.line / "site"

    @property
    def label(self) -> str:
        """How messages name this line: "" for the main line, " (line v0.21.0)" else."""
        return f" (line {self.line})" if self.line else ""

    def rel(self, path: Path) -> str:
        """``path`` relative to the root when it is inside it, else the whole path."""
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)

    def kept(self, tag: str, command: str, fix: str | None = None) -> "Workspace":
        """The kept line ``tag`` of this workspace (``lines/<tag>/``).

        Args:
            command: what named the line: the script that was given ``--line``, or
                ``VSERIES_LINE`` (named in the error).
            fix: the error's next step (default: the script with another ``--line``).

        Raises:
            SeriesError: there is no such kept line (the message names the ones there are).
        """
        kept = [w.line for w in self.main.lines()]
        if tag not in kept:
            raise SeriesError(
                f"no kept line {tag[:80]!r} (lines/ holds {kept or 'none'})",
                fix or f"{command} --line <one of them>, or {command} for the main line",
            )
        return Workspace(self.root, tag)

    @contextmanager
    def hints(self) -> Iterator[None]:
        """For a kept line, the ``next:`` commands of the SeriesErrors raised in the block
        name its own tree (``git -C .vseries/lines/<tag>/vllm``) and ``--line <tag>`` on
        scripts/apply.sh and scripts/refresh.sh (the verbs write them for the main line)."""
        try:
            yield
        except SeriesError as e:
            if not self.line or not e.fix:
                raise
            fix = re.sub(r"git -C vllm\b", f"git -C {self.rel(self.vllm)}", e.fix)
            fix = re.sub(r"scripts/(apply|refresh)\.sh", rf"scripts/\1.sh --line {self.line}", fix)
            raise SeriesError(e.what, fix) from None


def _tag_key(tag: str) -> tuple:
    """Sort key of a release tag: v0.21.0 < v0.34.0 < v0.100.0 (numbers compared as such)."""
    return tuple(int(n) if n.isdigit() else n for n in re.split(r"(\d+)", tag))


def cache_dir() -> Path:
    """Download cache shared by every workspace on the machine: VSERIES_CACHE, else
    $XDG_CACHE_HOME/vseries, else ~/.cache/vseries."""
    env = os.environ.get("VSERIES_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(xdg) / "vseries"
