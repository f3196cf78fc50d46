"""patches/retired.toml: the patches that left the series. An upstreamed patch's contract is
a guard on the pin; a dropped one's is kept for reading and never run (it fails on the pin by
design). The real file is held to what it says: the dropped rope patch is out of the series,
its last version kept in patches/retired/."""

import argparse

import pytest
from conftest import ROOT

from vseries import contract, lint_series, retired, series
from vseries.errors import SeriesError
from vseries.workspace import Workspace

DROPPED = """
[[patch]]
name = "0002-Kernel-b.patch"
subject = "[Kernel] b"
kind = "dropped"
contract = "tests/contract_b.py"
left_at = "v0.99.0"
why = "no model reaches it"
file = "patches/retired/0002-Kernel-b.patch"
"""


def put(root, text, name=retired.FILE):
    (root / "patches" / name).write_text(retired.HEADER + text)
    return Workspace(root)


def test_a_dropped_contract_is_named_and_not_run_as_a_guard(tiny, capsys):
    """A dropped patch's contract would fail on the pin: the contract tier names the patch
    and why, and runs nothing (no base tree is even made)."""
    ws = put(tiny, DROPPED)
    (tiny / "patches" / "retired").mkdir()
    (tiny / "patches" / "retired" / "0002-Kernel-b.patch").write_text("From: x\n")
    assert contract.check_upstreamed(ws) == []
    assert not (ws.state / "base").exists()
    contract.report_dropped(ws)
    out = capsys.readouterr().out
    assert "retired, was v0.99.0's 0002 [Kernel] b" in out and "dropped at v0.99.0: not run" in out
    assert "why: no model reaches it" in out
    assert retired.problems(ws) == [] and lint_series.problems(ws) == []


def test_an_upstreamed_record_with_a_contract_is_a_guard():
    up = retired.Record("a", "s", contract="tests/c.py")
    assert up.kind == retired.UPSTREAMED and up.guard
    assert not retired.Record("a", "s").guard  # no contract: nothing to run
    assert not retired.Record("a", "s", kind=retired.DROPPED, contract="tests/c.py").guard


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (('why = "no model reaches it"', 'why = "  "'), "dropped without a why"),
        (('kind = "dropped"', 'kind = "gone"'), "has kind 'gone'; known: upstreamed, dropped"),
        (('left_at = "v0.99.0"', 'left = "v0.99.0"'), "(unknown: ['left'])"),
        # values of the wrong type gave a TypeError or AttributeError traceback, and a single
        # [patch] table was read letter by letter
        (('contract = "tests/contract_b.py"', "contract = 5"), "contract = 5 (a string)"),
        (('why = "no model reaches it"', "why = 3"), "why = 3 (a string)"),
        (('name = "0002-Kernel-b.patch"', "name = [1]"), "name = [1] (a string)"),
        (('left_at = "v0.99.0"', "evidence = [1]"), "evidence = [1] (a list of strings)"),
        (("[[patch]]", "[patch]"), "each record is a [[patch]] table"),
    ],
)
def test_a_record_a_reader_cannot_use_is_refused_with_the_fix(tiny, change, said):
    ws = put(tiny, DROPPED.replace(*change))
    with pytest.raises(SeriesError, match="git checkout -- patches/retired.toml") as e:
        retired.load(ws)
    assert said in str(e.value)
    assert said in lint_series.problems(ws)[0]  # the series check reports it too


def test_a_dropped_patch_must_be_kept_in_patches_retired(tiny):
    ws = put(tiny, DROPPED.replace("patches/retired/0002", "patches/0002"))
    (tiny / "patches" / "0002-Kernel-b.patch").write_text("From: x\n")
    [p] = retired.problems(ws)
    assert "keep its file in patches/retired/" in p and "git mv patches/0002-Kernel-b.patch" in p
    (tiny / "patches" / "0002-Kernel-b.patch").unlink()
    assert any("does not exist" in p for p in retired.problems(ws))


def test_the_old_upstreamed_toml_is_read_and_replaced_by_the_next_write(tiny):
    old = '\n[[patch]]\nname = "0001-a.patch"\nsubject = "[Kernel] a"\ncontract = "tests/c.py"\n'
    ws = put(tiny, old, name=retired.OLD_FILE)
    [rec] = retired.load(ws)
    assert (rec.kind, rec.guard) == (retired.UPSTREAMED, True)
    retired.add(ws, [retired.Record("0002-b.patch", "[Kernel] b", why="x", kind="dropped")])
    assert not (tiny / "patches" / retired.OLD_FILE).exists()
    assert [r.name for r in retired.load(ws)] == ["0001-a.patch", "0002-b.patch"]


def test_the_workspace_records_the_rope_patch_as_dropped_and_keeps_its_file():
    ws = Workspace(ROOT)
    records = {r.name: r for r in retired.load(ws)}
    rope = records["0002-Perf-Kernel-No-per-token-count-Triton-re-specialisat.patch"]
    assert rope.kind == retired.DROPPED and not rope.guard and rope.left_at == "v0.34.0"
    assert (ROOT / rope.file).is_file() and (ROOT / rope.contract).is_file()
    assert "tma_aligned_scales" in rope.why and "XPU" in rope.why
    listed = {e.name for e in series.load(ws)}
    assert not listed & set(records), "a retired patch is still in the series"
    assert [r.name for r in records.values() if r.guard] == [
        "0001-Perf-Kernel-Swap-AB-in-fused_moe_kernel-so-decode-ti.patch"
    ]
    assert retired.problems(ws) == []


def test_a_dropped_patch_s_why_is_printed_as_a_whole_sentence():
    """The contract tier prints the first sentence of a long why, never cut mid-sentence (a
    newcomer read the real record's line, cut at 200 characters, as a different claim)."""
    real = [r for r in retired.load(Workspace.current()) if r.kind == retired.DROPPED]
    for r in real:
        line = contract.first_sentence(r.why)
        assert line.endswith((".", "...")) and r.why.startswith(line.rstrip(".").rstrip("."))
    assert contract.first_sentence("One. Two.") == "One."
    assert contract.first_sentence("x" * 400).endswith("...")
    assert len(contract.first_sentence("x" * 400)) == 300


def test_the_contract_tier_reads_the_records_before_any_run(tiny, monkeypatch):
    """A record it cannot read stopped the contract tier only after every base and patched
    run (minutes); it now stops first."""
    put(tiny, DROPPED.replace('why = "no model reaches it"', "why = 3"))
    monkeypatch.setattr(contract, "check_all", lambda *a, **k: pytest.fail("ran the contracts"))
    with pytest.raises(SeriesError, match="why = 3"):
        contract.main(argparse.Namespace(patched_only=False))


def test_a_retired_row_cut_short_gets_its_whole_title():
    """A retired patch's row cuts its Subject at 58 characters; the line under it gives the
    whole Subject, and for a patch dropped from the pin's series that the number is the one it
    had then (a newcomer matched the cut `retired, was v0.34.0's 0004 [Perf][Kernel] H200
    per-tenso…` to today's 0004)."""
    subject = "[Perf][Kernel] H200 per-tensor FP8 MoE configs for three model shapes"
    prefix = "retired, was v0.34.0's "
    row = contract.label("0004-Perf-Kernel-H200.patch", subject, prefix)
    assert row.endswith("…") and len(row) == 58
    line = contract.full_title("0004-Perf-Kernel-H200.patch", subject, prefix, renumbered=True)
    assert subject in line and "its number then" in line
    # an upstreamed patch keeps the number of the line it was carried on (still its number there)
    kept = contract.full_title("0004-Perf-Kernel-H200.patch", subject, "retired, was v0.21.0's ")
    assert kept == f"    title:   {subject}"
    assert contract.full_title("0002-Kernel-b.patch", "[Kernel] b", prefix) == ""
    # a Subject a sentence long is wrapped, every word kept
    long = "[Perf][Kernel] " + " ".join(f"word{i}" for i in range(60))
    lines = contract.full_title("0001-Perf-Kernel-x.patch", long, prefix).split("\n")
    assert len(lines) > 1 and all(len(x) <= 100 for x in lines)
    assert " ".join(" ".join(lines).split()) == f"title: {long}"
