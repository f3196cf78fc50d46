"""The pin: ``upstream.toml`` read with tomllib into a small dataclass."""

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from vseries import paths
from vseries.errors import SeriesError

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
    """Read and validate the pin file.

    Raises:
        SeriesError: the file is missing, is not TOML, lacks a key, or holds a malformed
            commit id or sha256.
    """
    path = path or paths.root() / "upstream.toml"
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise SeriesError(f"pin file {path} is missing", "git checkout -- upstream.toml") from None
    except tomllib.TOMLDecodeError as e:
        raise SeriesError(f"pin file {path} is not valid TOML: {e}") from None
    try:
        up, src, whl = data["upstream"], data["source"], data["wheel"]
        pin = Pin(
            repo=up["repo"],
            package=up["package"],
            tag=up["tag"],
            commit=up["commit"],
            source=Artefact(src["filename"], src["sha256"]),
            wheel=Artefact(whl["filename"], whl["sha256"]),
            torch=whl["torch"],
            triton=whl["triton"],
        )
    except KeyError as e:
        raise SeriesError(f"pin file {path} lacks the key {e}") from None
    if not _SHA1.match(pin.commit):
        raise SeriesError(f"pin file {path}: commit {pin.commit!r} is not a 40-hex commit id")
    for art in (pin.source, pin.wheel):
        if not _SHA256.match(art.sha256):
            raise SeriesError(f"pin file {path}: sha256 of {art.filename} is malformed")
    return pin


def dump(pin: Pin, path: Path | None = None) -> None:
    """Rewrite the pin file's values in place, keeping its comments and layout."""
    path = path or paths.root() / "upstream.toml"
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
