"""Downloads: verified against the pin's sha256, cached, resumed, refetched when corrupt, and
clear errors for no network, an unknown file and a checksum mismatch."""

import hashlib
import threading

import pytest

from vseries import fetch
from vseries.errors import SeriesError
from vseries.pin import Artefact

DATA = bytes(range(256)) * 4096  # 1 MiB of non-trivial bytes


def art(name="pkg-1.0.tar.gz", data=DATA):
    return Artefact(name, hashlib.sha256(data).hexdigest())


def test_download_verifies_and_caches(index, tmp_path):
    index.files["pkg-1.0.tar.gz"] = DATA
    path = fetch.fetch("pkg", art(), tmp_path)
    assert path.read_bytes() == DATA
    del index.files["pkg-1.0.tar.gz"]  # a second call must not need the network
    assert fetch.fetch("pkg", art(), tmp_path) == path


def test_partial_download_is_resumed(index, tmp_path):
    index.files["pkg-1.0.tar.gz"] = DATA
    (tmp_path / "pkg-1.0.tar.gz.part").write_bytes(DATA[:300_000])
    assert fetch.fetch("pkg", art(), tmp_path).read_bytes() == DATA
    assert index.ranges == ["bytes=300000-"]


def test_corrupt_cache_file_is_fetched_again(index, tmp_path):
    index.files["pkg-1.0.tar.gz"] = DATA
    (tmp_path / "pkg-1.0.tar.gz").write_bytes(b"truncated")
    assert fetch.fetch("pkg", art(), tmp_path).read_bytes() == DATA


def test_checksum_mismatch_keeps_nothing(index, tmp_path):
    index.files["pkg-1.0.tar.gz"] = DATA[:-1] + b"\x00"
    with pytest.raises(SeriesError, match="does not match the pin's sha256"):
        fetch.fetch("pkg", art(), tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_unknown_file_names_the_fix(index, tmp_path):
    with pytest.raises(SeriesError, match="lists no file pkg-9.9.tar.gz") as e:
        fetch.fetch("pkg", art("pkg-9.9.tar.gz"), tmp_path)
    assert "pip index versions" in str(e.value)


def test_no_network_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(fetch, "INDEX", "http://127.0.0.1:9/simple")  # discard port: refused
    with pytest.raises(SeriesError, match="cannot reach the package index") as e:
        fetch.fetch("pkg", art(), tmp_path)
    assert "next:" in str(e.value)


def test_concurrent_fetches_of_one_file_take_turns(index, tmp_path):
    """Two checkouts testing at once share the cache: without a lock both wrote the same
    ``.part`` file and one's rename found it gone (CI, 2026-12-02)."""
    data = DATA * 8
    index.files["pkg-1.0.tar.gz"] = data
    start = threading.Barrier(4)
    got, errors = [], []

    def one():
        start.wait()
        try:
            got.append(fetch.fetch("pkg", art(data=data), tmp_path).read_bytes())
        except Exception as e:  # collected and asserted on below
            errors.append(repr(e))

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)  # a hang guard: the four take turns in well under a second
    assert errors == []
    assert got == [data] * 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pkg-1.0.tar.gz"]
