"""The pin file and the series file: parsing, validation, and the real ones in this repo."""

import re

import pytest
from conftest import ROOT

from vseries import pin as pinmod
from vseries import series
from vseries.errors import SeriesError


def test_real_pin_is_one_release(pin):
    """The pin names one release throughout (read from upstream.toml, so that it holds on
    whatever release a rebase moved it to): tag, version, commit id and file names agree."""
    assert re.fullmatch(r"v\d+\.\d+\.\d+\S*", pin.tag) and pin.version == pin.tag[1:]
    assert re.fullmatch(r"[0-9a-f]{40}", pin.commit)
    assert pin.source.filename == f"{pin.package}-{pin.version}.tar.gz"
    assert pin.wheel.filename.startswith(f"{pin.package}-{pin.version}-")


@pytest.mark.parametrize(
    "bad, msg",
    [
        ('commit = "9da56fd"', "not a 40-hex commit id"),
        ('sha256 = "xyz"', "malformed"),
        ("[upstream", "not valid TOML"),
    ],
)
def test_malformed_pin_is_refused(tmp_path, bad, msg):
    text = (ROOT / "upstream.toml").read_text()
    key = bad.split(" =")[0] if "=" in bad else None
    lines = [bad if key and line.startswith(key + " =") else line for line in text.splitlines()]
    if not key:
        lines.append(bad)
    (tmp_path / "upstream.toml").write_text("\n".join(lines) + "\n")
    with pytest.raises(SeriesError, match=msg):
        pinmod.load(tmp_path / "upstream.toml")


def test_pin_dump_round_trips_and_keeps_comments(tmp_path, pin):
    dest = tmp_path / "upstream.toml"
    dest.write_text((ROOT / "upstream.toml").read_text())
    moved = pinmod.Pin(**{**pin.__dict__, "tag": "v0.22.0", "commit": "0" * 40})
    pinmod.dump(moved, dest)
    assert pinmod.load(dest) == moved
    assert "# The pin:" in dest.read_text()


def test_real_series_is_consistent():
    entries = series.load()  # every file exists, is a patch, and is listed
    assert entries, "the series must hold at least one patch"
    for e in entries:
        assert "Signed-off-by: " in e.path.read_text(), f"{e.name} lacks DCO sign-off"
        assert e.contract and (ROOT / e.contract).exists(), f"{e.name}: no contract test"


def test_series_options_and_errors(tiny):
    (tiny / "patches" / "series").write_text("# head\n0001-a.patch contract=tests/x.py\n")
    header, entries = series.read()
    assert header == ["# head"] and entries[0].contract == "tests/x.py"
    (tiny / "patches" / "series").write_text("0001-a.patch contract\n")
    with pytest.raises(SeriesError, match="not key=value"):
        series.read()


@pytest.mark.parametrize(
    "line,why",
    [
        (b"\xff\xfe0001-a.patch\n", "not UTF-8 text"),
        (b"0001-a\x00.patch\n", "is not the name of a file in patches/"),
        (b"../upstream.toml\n", "is not the name of a file in patches/"),
        (b"..\n", "is not the name of a file in patches/"),
        (b"0001-a.patch contrct=tests/x.py\n", r"unknown option 'contrct' \(known: contract="),
        (b"0001-a.patch extra=1\n", "unknown option 'extra'"),
        (b"x" * 10_000_000 + b".patch\n", "longer than 200 characters"),
        (b"x" * 300 + b".patch\n", "longer than 200 characters"),
        (b"0001-a.patch contract=tests/" + b"x" * 10_000_000 + b"\n", "longer than 300"),
        (b"0001-a.patch contract=../../../../etc/passwd\n", "is not a test file under tests/"),
        (b"0001-a.patch contract=tests/../../x.py\n", "is not a test file under tests/"),
        (b"0001-a.patch contract=/etc/passwd\n", "is not a test file under tests/"),
        (b"0001-a.patch contract=vseries/cli.py\n", "is not a test file under tests/"),
    ],
    ids=[
        "binary",
        "nul",
        "outside",
        "dotdot",
        "misspelt option",
        "unknown option",
        "10 MB name",
        "300-character name",
        "10 MB contract",
        "contract escapes",
        "contract escapes from tests",
        "absolute contract",
        "contract outside tests",
    ],
)
def test_series_line_that_names_no_patch_file_is_refused(tiny, line, why):
    """A series line is a file name in patches/: binary junk, control characters or a path
    elsewhere get a SeriesError naming the line (not a traceback, not a file outside)."""
    (tiny / "patches" / "series").write_bytes(b"# head\n" + line)
    with pytest.raises(SeriesError, match=why) as e:
        series.load()
    assert "patches/series:2" in str(e.value) and "next: git checkout -- patches/series" in str(
        e.value
    )
    assert len(str(e.value)) < 1000  # a huge name or value is not echoed whole


def test_lint_reads_the_series_through_the_same_check(tiny):
    """The series lint refuses what apply refuses (one check, in series.read), without a
    traceback on a 10 MB value."""
    from vseries import lint_series

    for line in ("0001-a.patch extra=1", "0001-a.patch contract=" + "t" * 10_000_000):
        (tiny / "patches" / "series").write_text(line + "\n")
        [found] = lint_series.problems()
        assert "patches/series:1" in found and "\n  next: " in found
