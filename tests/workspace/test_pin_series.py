"""The pin file and the series file: parsing, validation, and the real ones in this repo."""

import re

import pytest
from conftest import ROOT, make_patch

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
        ("commit = 123", "commit = 123; it must be a string"),
        ('sha256 = ["x"]', "must be a string"),
        ('tag = "v0.34"', "not a release tag"),
        ("torch = true", "torch = True; it must be a string"),
    ],
)
def test_malformed_pin_is_refused(tmp_path, bad, msg):
    """A malformed value is named, never a traceback, and the next: line restores the file."""
    text = (ROOT / "upstream.toml").read_text()
    key = bad.split(" =")[0] if "=" in bad else None
    lines = [bad if key and line.startswith(key + " =") else line for line in text.splitlines()]
    if not key:
        lines.append(bad)
    (tmp_path / "upstream.toml").write_text("\n".join(lines) + "\n")
    with pytest.raises(SeriesError, match=re.escape(msg)) as e:
        pinmod.load(tmp_path / "upstream.toml")
    assert e.value.fix and "git checkout -- " in e.value.fix


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


@pytest.mark.parametrize(
    "make, line",
    [
        (lambda t: (t / "tests" / "evil").symlink_to("/etc"), "contract=tests/evil/passwd"),
        (lambda t: (t / "tests" / "evil.py").symlink_to("/etc/passwd"), "contract=tests/evil.py"),
        (lambda t: None, "contract=tests/contract"),
        (lambda t: None, "contract=tests/"),
    ],
    ids=["folder linked outside", "file linked outside", "a folder", "tests itself"],
)
def test_contract_must_be_a_test_file_inside_tests(tiny, make, line):
    """contract= names a Python test file that stays inside the workspace's tests/ once
    links are followed: a symbolic link out of tests/ (to /etc) and a folder are refused by
    the series check, the lint (pre-commit) and every verb that reads the series."""
    from vseries import lint_series

    (tiny / "tests" / "contract").mkdir(parents=True)
    make(tiny)
    (tiny / "patches" / "series").write_text(f"0001-a.patch {line}\n")
    with pytest.raises(SeriesError, match="is not a test file under tests/") as e:
        series.read()
    assert "patches/series:1" in str(e.value)
    [found] = lint_series.problems()
    assert "is not a test file under tests/" in found


def test_a_patch_file_linked_out_of_patches_is_refused(tiny, tmp_path):
    """A series entry whose file is a symbolic link out of patches/ (here to a real patch of
    another folder): refused before any verb reads it, or refresh writes through it."""
    outside = make_patch(
        tiny / "vllm", tmp_path / "elsewhere", lambda r: (r / "b.py").write_text("x = 2\n"), "[P] b"
    )
    before = outside.read_bytes()
    (tiny / "patches" / outside.name).symlink_to(outside)
    (tiny / "patches" / "series").write_text(outside.name + "\n")
    with pytest.raises(SeriesError, match="a symbolic link out of patches/"):
        series.load()
    assert outside.read_bytes() == before


@pytest.mark.parametrize("records", ["retired.toml", "upstreamed.toml"])
def test_a_retired_record_s_contract_gets_the_same_check(tiny, records):
    """patches/retired.toml (and its old name upstreamed.toml) names contracts that keep
    running on the pin as guards: a record's contract that a symbolic link leads out of
    tests/ is refused like a series line's."""
    from vseries import retired
    from vseries.workspace import Workspace

    (tiny / "tests").mkdir()
    (tiny / "tests" / "evil").symlink_to("/etc")
    (tiny / "patches" / records).write_text(
        '[[patch]]\nname = "0001-a.patch"\nsubject = "[P] a"\ncontract = "tests/evil/passwd"\n'
    )
    with pytest.raises(SeriesError, match="is not a test file under tests/"):
        retired.load(Workspace(tiny))
