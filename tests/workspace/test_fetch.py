"""Downloads: verified against the pin's sha256, cached, resumed, refetched when corrupt, and
clear errors for no network, an unknown file and a checksum mismatch."""

import hashlib

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
