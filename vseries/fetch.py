"""Verified, cached, resumable downloads of release files from PyPI, and index look-ups.

A file is looked up by name in PyPI's simple index (PEP 691 JSON), downloaded to
``<cache>/<name>.part`` (resumed with an HTTP Range request when a partial file exists),
checked against the pin's sha256, and only then renamed into place. A cached file is hashed
again on every use; a corrupt one is deleted and fetched once more. Processes sharing a cache
(two checkouts testing at once) take turns: an exclusive ``flock`` on the cache folder is held
around each fetch, so one downloads while the other waits and then finds the verified file.

requests, tqdm and packaging are imported where they are used: the command line (every
verb's --help) needs nothing beyond the standard library.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from vseries.errors import SeriesError
from vseries.pin import Artefact
from vseries.workspace import cache_dir

if TYPE_CHECKING:
    import requests

INDEX = os.environ.get("VSERIES_INDEX_URL", "https://pypi.org/simple")
TIMEOUT_S = 30  # connect/read timeout per request; a dead network fails in seconds, not hours
CHUNK = 1 << 20


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def index_files(project: str, session: requests.Session | None = None) -> list[dict]:
    """The ``files`` of ``project``'s page in the simple index (PEP 691 JSON): dicts with
    "filename", "url" and "hashes" {"sha256": hex}.

    Raises:
        requests.RequestException, ValueError: the index is unreachable or answers no JSON
            (callers say what they were looking for).
    """
    import requests

    r = (session or requests).get(
        f"{INDEX}/{project}/",
        timeout=TIMEOUT_S,
        headers={"Accept": "application/vnd.pypi.simple.v1+json"},
    )
    r.raise_for_status()
    return r.json().get("files", [])


def url_for(project: str, filename: str, session: requests.Session) -> str:
    """The download URL of ``filename`` in ``project``'s simple-index page.

    Raises:
        SeriesError: the index is unreachable, or lists no such file (e.g. an unknown tag).
    """
    import requests

    try:
        files = index_files(project, session)
    except (requests.RequestException, ValueError) as e:
        raise SeriesError(
            f"cannot reach the package index {INDEX} to look up {filename}: {e}",
            "check the network or proxy, or put the file in the cache by hand "
            f"({cache_dir()}/{filename}) and run the command again",
        ) from None
    for f in files:
        if f["filename"] == filename:
            return f["url"]
    raise SeriesError(
        f"{INDEX}/{project}/ lists no file {filename}; is the tag or version right?",
        f"pip index versions {project}   # lists the released versions",
    )


def _download(url: str, part: Path, session: requests.Session, name: str) -> None:
    from tqdm import tqdm

    have = part.stat().st_size if part.exists() else 0
    headers = {"Range": f"bytes={have}-"} if have else {}
    with session.get(url, stream=True, timeout=TIMEOUT_S, headers=headers) as r:
        if r.status_code == 416:  # the part file is already complete
            return
        r.raise_for_status()
        if have and r.status_code != 206:  # the server ignored Range: start again
            have = 0
        total = int(r.headers.get("Content-Length", 0)) + have
        mode = "ab" if have else "wb"
        with (
            open(part, mode) as f,
            tqdm(
                total=total or None,
                initial=have,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                desc=name,
                disable=None,
            ) as bar,
        ):
            for block in r.iter_content(CHUNK):
                f.write(block)
                bar.update(len(block))


def fetch(project: str, art: Artefact, cache: Path | None = None) -> Path:
    """Return the path of a verified copy of ``art`` in the cache, downloading it if needed.

    Args:
        project: PyPI project name, e.g. "vllm".
        art: file name and expected sha256.
        cache: cache folder (default workspace.cache_dir()).

    Raises:
        SeriesError: no network and no cached copy; the file is not on the index; or the
            download's sha256 differs from the pin twice in a row (the cached copy is removed).
    """
    cache = cache or cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    fd = os.open(cache, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"fetch: waiting for another process using {cache}", flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        return _fetch_locked(project, art, cache)
    finally:
        os.close(fd)  # releases the lock


def _fetch_locked(project: str, art: Artefact, cache: Path) -> Path:
    """``fetch`` with the cache's lock held."""
    dest = cache / art.filename
    if dest.exists():
        if sha256_of(dest) == art.sha256:
            return dest
        print(f"fetch: cached {dest} does not match its sha256; fetching it again")
        dest.unlink()
    import requests

    part = dest.with_name(dest.name + ".part")
    session = requests.Session()
    url = url_for(project, art.filename, session)
    # tqdm draws a bar only on a terminal; say what is fetched in logs too
    print(f"fetch: downloading {art.filename} from {url.split('/')[2]} into {cache}", flush=True)
    for attempt in (1, 2):
        try:
            _download(url, part, session, art.filename)
        except requests.RequestException as e:
            raise SeriesError(
                f"download of {art.filename} broke off: {e} (the partial file is kept and "
                "the next run resumes it)",
                "run the same command again",
            ) from None
        got = sha256_of(part)
        if got == art.sha256:
            part.rename(dest)
            return dest
        part.unlink()
        print(
            f"fetch: {art.filename} has sha256 {got}, expected {art.sha256}"
            + ("; fetching it again" if attempt == 1 else "")
        )
    raise SeriesError(
        f"{art.filename} from {url} does not match the pin's sha256 {art.sha256}; nothing was "
        "kept. Either the index serves a different file or the pin is wrong.",
        "compare with the digest PyPI shows for the file, then correct upstream.toml",
    )


def release_files(project: str, version: str) -> tuple[Artefact, Artefact | None]:
    """The source release and the manylinux x86_64 wheel of ``version`` with their sha256,
    from the simple index. Among several such wheels the highest build tag wins.

    Raises:
        SeriesError: the index is unreachable or lists no source release of that version.
    """
    import requests
    from packaging.utils import parse_wheel_filename

    try:
        files = index_files(project)
    except (requests.RequestException, ValueError) as e:
        raise SeriesError(
            f"cannot read the package index {INDEX}/{project}/: {e}",
            "check the network or proxy, then run the same command again",
        ) from None
    sdist = next((f for f in files if f["filename"] == f"{project}-{version}.tar.gz"), None)
    if sdist is None:
        raise SeriesError(
            f"{INDEX}/{project}/ has no source release {project}-{version}"
            ".tar.gz; is the tag right?",
            f"pip index versions {project}",
        )
    wheels = []
    for f in files:
        if not f["filename"].endswith(".whl"):
            continue
        _, ver, build, tags = parse_wheel_filename(f["filename"])
        if str(ver) == version and any(
            t.platform.startswith("manylinux") and t.platform.endswith("x86_64") for t in tags
        ):
            wheels.append((build, f))

    def art(f: dict) -> Artefact:
        return Artefact(f["filename"], f["hashes"]["sha256"])

    return art(sdist), art(max(wheels, key=lambda w: w[0])[1]) if wheels else None


def triton_of(torch_version: str) -> str | None:
    """The Triton version a torch release requires on Linux x86_64 (from the core metadata
    of its wheel on the index), or None when that cannot be read."""
    import requests

    try:
        f = next(
            f
            for f in index_files("torch")
            if f["filename"].startswith(f"torch-{torch_version}-")
            and "manylinux" in f["filename"]
            and "x86_64" in f["filename"]
        )
        meta = requests.get(f["url"] + ".metadata", timeout=TIMEOUT_S).text
    except (requests.RequestException, ValueError, KeyError, StopIteration):
        return None
    m = re.search(r"^Requires-Dist: triton\s*(?:==|~=|>=)\s*([\w.]+)", meta, re.M)
    return m.group(1) if m else None
