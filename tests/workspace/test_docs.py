"""The documents a user and a contributor read: every relative link resolves, `docs/` stays
short (the rebase transcripts live compressed in `docs/raw/` and are not counted), nothing reads
as a work diary, and CHANGELOG.md has an entry per version of each line, newest first."""

import re
from datetime import date

import pytest
from conftest import ROOT
from packaging.version import Version

DOCS_LINES = 1500  # all of docs/*.md together
LINKED = ["README.md", "CONTRIBUTING.md", "CHANGELOG.md", "docs/*.md"]
READ = LINKED + [
    "benchmarks/README.md",
    "benchmarks/h200/README.md",
    "benchmarks/results/README.md",
]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# how a diary speaks: numbered sessions and rounds, "this session", who tried what, the budget
# of device time. A raw/roundN folder or a results file's name (e2e_round5.md) is a name.
DIARY = re.compile(
    r"\b(?:session \d+|(?:this|next|last|previous|that|\w+(?:th|st|nd|rd)) session"
    r"|a session (?:before|later)|(?<![/_\w])rounds? \d+|helper|device (?:time|budget))\b"
    r"|(?-i:(?<![A-Z_-])budget)\b",
    re.IGNORECASE,
)
# an entry's wheel version: <pin>+series.<time>.<n>.h<digest> (scripts/wheel.sh), or the
# label of the versions before it, <pin>+series.<n>
ENTRY = re.compile(
    r"^### (v\d+\.\d+\.\d+), (\d{4}-\d\d-\d\d) "
    r"\(`((\d+\.\d+\.\d+)\+series\.(?:(\d{14})\.\d+\.h[0-9a-f]{8}|\d+))`\)$"
)


def files(patterns: list[str]):
    for pat in patterns:
        yield from sorted(ROOT.glob(pat))


def prose(text: str) -> str:
    """The text without fenced code blocks and inline code, where commands, not links, live."""
    text = re.sub(r"(?ms)^```.*?^```\n", "", text)
    return re.sub(r"`[^`\n]*`", "``", text)


def test_docs_stay_short():
    lines = {p.name: len(p.read_text().splitlines()) for p in files(["docs/*.md"])}
    total = sum(lines.values())
    assert total < DOCS_LINES, f"docs/*.md has {total} lines (under {DOCS_LINES}): {lines}"


@pytest.mark.parametrize("doc", [str(p.relative_to(ROOT)) for p in files(READ)])
def test_every_relative_link_resolves(doc):
    path = ROOT / doc
    broken = []
    for target in LINK.findall(prose(path.read_text())):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a web address, mail, or an anchor in the same file
        if not (path.parent / target.split("#")[0]).exists():
            broken.append(target)
    assert not broken, f"{doc}: links to nothing: {broken}"


@pytest.mark.parametrize("doc", [str(p.relative_to(ROOT)) for p in files(READ)])
def test_nothing_reads_as_a_work_diary(doc):
    text = prose((ROOT / doc).read_text())
    hits = [
        f"line {n}: {m.group(0)!r}"
        for n, line in enumerate(text.splitlines(), 1)
        for m in DIARY.finditer(line)
    ]
    assert not hits, f"{doc} reads as a work diary (say what is, not who did what when): {hits}"


def test_contributing_names_no_staging_of_the_project_s_own_host():
    """A contributor with a GPU of their own needs no staging folder, transfer or lent host:
    those live in benchmarks/h200/README.md."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    named = re.findall(r"/root/|\.gpu/|\bcarry(?::| list)|device run|\blent\b", text)
    assert not named, f"CONTRIBUTING.md names the project's own GPU staging: {named}"


def test_changelog_has_a_section_per_line_newest_first():
    text = (ROOT / "CHANGELOG.md").read_text()
    heads = re.findall(r"^## .*$", text, re.M)
    assert heads[0] == "## Unreleased", f"the first entry is not Unreleased: {heads[:1]}"
    # no pin named here: a rebase moves the pin and keeps a line before anyone writes its entry
    lines = [re.match(r"## (Main|Kept) line: vLLM v\d+\.\d+\.\d+$", h) for h in heads[1:]]
    assert lines and all(lines), f"after Unreleased, one section per line: {heads}"
    assert [m.group(1) for m in lines] == ["Main"] + ["Kept"] * (len(lines) - 1), heads
    sections = re.split(r"^## ", text, flags=re.M)[2:]
    for section in sections:
        pin = re.match(r"\w+ line: vLLM (v\S+)", section)
        assert pin, f"a section that is not a line: {section[:60]!r}"
        entries = [ENTRY.match(x) for x in re.findall(r"^### .*$", section, re.M)]
        assert entries and all(entries), (
            f"{pin.group(1)}: entries as '### <pin>, <date> (`<pin>+series.<time>.<n>.h<digest>`)'"
        )
        dates = [date.fromisoformat(e.group(2)) for e in entries]
        assert dates == sorted(dates, reverse=True), f"{pin.group(1)}: not newest first: {dates}"
        assert {e.group(1) for e in entries} == {pin.group(1)}
        assert {"v" + e.group(4) for e in entries} == {pin.group(1)}
        # a version of the label with the time: dated by it, and sorted newest first by pip
        timed = [e for e in entries if e.group(5)]
        assert all(e.group(2).replace("-", "") == e.group(5)[:8] for e in timed), pin.group(1)
        versions = [Version(e.group(3)) for e in timed]
        assert versions == sorted(versions, reverse=True), f"{pin.group(1)}: {versions}"
        assert entries[: len(timed)] == timed, f"{pin.group(1)}: an older label above a newer"
