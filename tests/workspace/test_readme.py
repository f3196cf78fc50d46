"""README.md stays a five-minute read with one source for every figure: no paragraph (or
table row) over PARAGRAPH characters, at most WORDS words, and no figure of a results file but
one headline per patch, in the patches table, next to a link to the results file that holds
it."""

import re

from conftest import ROOT

PARAGRAPH = 600  # characters of one paragraph, or of one table row
WORDS = 800
FIGURE = re.compile(r"\b\d+\.\d+x\b")  # a ratio of a results file, e.g. 1.27x
LINK = re.compile(r"\]\((benchmarks/results/[^)#]+\.md)\)")


def blocks(text: str) -> list[str]:
    """The README's paragraphs and table rows (code blocks left out)."""
    text = re.sub(r"(?ms)^```.*?^```\n", "", text)
    out = []
    for para in re.split(r"\n\s*\n", text):
        lines = para.strip().splitlines()
        if lines and all(x.startswith("|") for x in lines):
            out += lines
        elif lines:
            out.append(" ".join(x.strip() for x in lines))
    return out


def test_no_paragraph_is_long_and_the_whole_is_short():
    text = (ROOT / "README.md").read_text()
    long = [b[:80] + "..." for b in blocks(text) if len(b) > PARAGRAPH]
    assert not long, f"README paragraphs over {PARAGRAPH} characters: {long}"
    words = len(text.split())
    assert words <= WORDS, f"README.md has {words} words (at most {WORDS}: move detail to docs/)"


def test_figures_are_one_headline_per_patch_from_its_results_file():
    text = (ROOT / "README.md").read_text()
    series = [
        x
        for x in (ROOT / "patches" / "series").read_text().splitlines()
        if x.strip() and not x.startswith("#")
    ]
    rows = [b for b in blocks(text) if FIGURE.search(b)]
    assert len(rows) <= len(series), f"more rows with figures than patches: {rows}"
    for row in rows:
        assert row.startswith("|"), f"a figure outside the patches table: {row[:120]}"
        files = LINK.findall(row)
        assert files, f"a headline without a link to its results file: {row[:120]}"
        held = "".join((ROOT / f).read_text() for f in files)
        for fig in FIGURE.findall(row):
            assert fig in held, f"{fig} is not in {files}: the README repeats no other figure"
