"""The pin: ``upstream.toml`` read with tomllib into a small dataclass; the only module that
writes it (``dump`` keeps its comments and layout; ``move`` records a rebase's new release).
"""

import re
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

from vseries.errors import SeriesError
from vseries.workspace import Workspace

# The line move() writes above a synthetic commit id: how that id was obtained.
NOTE = "# rebase-note: "

_TAG = re.compile(r"^v\d+\.\d+\.\d+\S*$")
_SHA1 = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Artefact:
    """A release file on PyPI: its file name and published sha256 (64 hex chars)."""

    filename: str
    sha256: str


@dataclass(frozen=True)
class Pin:
    """The upstream release the series sits on.

    Attributes:
        repo: upstream git URL.
        package: PyPI project name ("vllm").
        tag: release tag, e.g. "v0.21.0".
        commit: the tag's commit id, 40 hex chars.
        source: the PyPI source release of that tag.
        wheel: the release wheel whose prebuilt kernels the editable install reuses.
        torch: the torch version the wheel's kernels were built for.
        triton: the Triton version that torch brings (GPU hosts) or that CPU hosts install.
    """

    repo: str
    package: str
    tag: str
    commit: str
    source: Artefact
    wheel: Artefact
    torch: str
    triton: str

    @property
    def version(self) -> str:
        """The PyPI version of the tag ("v0.21.0" -> "0.21.0")."""
        return self.tag.removeprefix("v")


def load(path: Path | None = None) -> Pin:
    """Read and validate the pin file (default: the current workspace's upstream.toml).

    Raises:
        SeriesError: the file is missing, is not TOML, lacks a key, or holds a malformed
            commit id or sha256.
    """
    path = path or Workspace.current().pin_file
    restore = f"git diff -- {path}   # what changed; git checkout -- {path} restores the pin"

    def bad(what: str) -> SeriesError:
        return SeriesError(f"pin file {path} {what}", restore)

    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise SeriesError(f"pin file {path} is missing", "git checkout -- upstream.toml") from None
    except tomllib.TOMLDecodeError as e:
        raise bad(f"is not valid TOML: {e}") from None
    try:
        up, src, whl = data["upstream"], data["source"], data["wheel"]
        fields = dict(
            repo=up["repo"],
            package=up["package"],
            tag=up["tag"],
            commit=up["commit"],
            source=src["filename"],
            source_sha256=src["sha256"],
            wheel=whl["filename"],
            wheel_sha256=whl["sha256"],
            torch=whl["torch"],
            triton=whl["triton"],
        )
    except KeyError as e:
        raise bad(f"lacks the key {e}") from None
    except TypeError:  # e.g. `upstream = 1`: a value where a table belongs
        raise bad("has a value where a table ([upstream], [source], [wheel]) belongs") from None
    for name, value in fields.items():
        if not isinstance(value, str):
            raise bad(f"has {name} = {value!r}; it must be a string")
    pin = Pin(
        repo=fields["repo"],
        package=fields["package"],
        tag=fields["tag"],
        commit=fields["commit"],
        source=Artefact(fields["source"], fields["source_sha256"]),
        wheel=Artefact(fields["wheel"], fields["wheel_sha256"]),
        torch=fields["torch"],
        triton=fields["triton"],
    )
    if not _TAG.match(pin.tag):
        raise bad(f"has tag {pin.tag!r}, not a release tag like v0.34.0")
    if not _SHA1.match(pin.commit):
        raise bad(f"has commit {pin.commit!r}, not a 40-hex commit id")
    for art in (pin.source, pin.wheel):
        if not _SHA256.match(art.sha256):
            raise bad(f"has a malformed sha256 for {art.filename}")
    return pin


def synthetic(path: Path) -> bool:
    """True when the pin file's commit is the synthetic commit made from the source release
    (the ``# rebase-note:`` that ``move`` writes): no git remote has that commit."""
    return any(
        ln.startswith(f"{NOTE}commit is the synthetic commit")
        for ln in path.read_text().splitlines()
    )


def dump(pin: Pin, path: Path) -> None:
    """Rewrite the pin file's values in place, keeping its comments and layout."""
    text = path.read_text()
    section = ""
    out = []
    values = {
        "upstream": {
            "repo": pin.repo,
            "package": pin.package,
            "tag": pin.tag,
            "commit": pin.commit,
        },
        "source": {"filename": pin.source.filename, "sha256": pin.source.sha256},
        "wheel": {
            "filename": pin.wheel.filename,
            "sha256": pin.wheel.sha256,
            "torch": pin.torch,
            "triton": pin.triton,
        },
    }
    for line in text.splitlines(keepends=True):
        m = re.match(r"^\[(\w+)\]", line)
        if m:
            section = m.group(1)
        kv = re.match(r'^(\w+) = "[^"]*"', line)
        if kv and kv.group(1) in values.get(section, {}):
            line = f'{kv.group(1)} = "{values[section][kv.group(1)]}"\n'
        out.append(line)
    path.write_text("".join(out))


def move(
    path: Path,
    tag: str,
    commit: str,
    source: Artefact,
    wheel: Artefact,
    torch: str,
    triton: str,
    upstream_id: str | None = None,
) -> Pin:
    """Move the pin in ``path`` to a new release (what a finished rebase does).

    Comments that name the old torch version follow the new one. When ``upstream_id`` is
    given, ``commit`` is the synthetic commit made from the source release and upstream's
    real id is known only as ``upstream_id`` (a short id): a ``# rebase-note:`` line above
    ``commit`` says so and how to record the full id; an older note is removed.

    Returns:
        The new pin.
    """
    old = load(path)
    new = replace(
        old, tag=tag, commit=commit, source=source, wheel=wheel, torch=torch, triton=triton
    )
    dump(new, path)
    lines = [
        ln.replace(f"torch {old.torch}", f"torch {torch}") if ln.startswith("#") else ln
        for ln in path.read_text().splitlines(keepends=True)
        if not ln.startswith(NOTE)
    ]
    if upstream_id:
        i = next(i for i, ln in enumerate(lines) if ln.startswith("commit = "))
        lines.insert(
            i,
            f"{NOTE}commit is the synthetic commit made from {source.filename}; "
            f"upstream's id is known only as {upstream_id} (vllm/_version.py). "
            "The gitlink records this commit too; with the full id: git -C vllm replace "
            "<full id> <this commit>, put "
            "the full id here, git update-index --cacheinfo 160000,<full id>,vllm\n",
        )
    path.write_text("".join(lines))
    return new
