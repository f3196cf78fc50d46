"""decide(): how the rebase classes a patch, from evidence alone (no git, no files)."""

import pytest

from vseries.rebase import decide as d
from vseries.rebase.decide import decide
from vseries.rebase.evidence import Evidence


def ev(**kw) -> Evidence:
    return Evidence("v0.99.0", "v0.21.0", kw.pop("contract", "tests/c.py"), **kw)


PASS, FAIL = ("pass", "1 passed"), ("fail", "1 failed; test_x: AssertionError: no")
UNDECIDED = ("undecided", "1 failed; it could not reach the code it checks")


@pytest.mark.parametrize(
    "evidence, cls, action",
    [
        (ev(reverse_applies=True), d.UPSTREAMED, d.DROP),
        (ev(same_patch_id=True), d.UPSTREAMED, d.DROP),
        (ev(am="nothing"), d.UPSTREAMED, d.DROP),
        (ev(am="conflict", conflict="a.py", verdict=PASS), d.UPSTREAMED, d.DROP),
        (ev(am="conflict", conflict="a.py", verdict=FAIL), d.CONFLICT, d.STOP),
        (ev(am="conflict", conflict="a.py", verdict=UNDECIDED), d.CONFLICT, d.STOP),
        (ev(am="conflict", conflict="a.py", contract=None), d.CONFLICT, d.STOP),
        (ev(am="applied", verdict=PASS), d.UPSTREAMED, d.DROP),
        (ev(am="applied"), d.CLEAN, d.CARRY),
        (ev(am="applied", threeway=True), d.THREE_WAY, d.CARRY),
        (ev(am="applied", dropped=["a.py: @@ -2,7 +2,7 @@"]), d.PARTLY, d.CARRY),
        (ev(am="applied", taken=["@jit(skip=['n'])"]), d.PARTLY, d.CARRY),
        (ev(am="applied", resolved=True), d.RESOLVED, d.CARRY),
        (ev(am="applied", verdict=FAIL, kept=["test_a"]), d.PARTLY, d.CARRY),
        (ev(am="applied", repeated=["a.py:3 adds `import os`, ..."]), d.TWICE, d.STOP),
        (ev(am="applied", repeated=["a.py:3 ..."], repeats_kept=True), d.CLEAN, d.CARRY),
        (ev(am="conflict", skipped=True), d.SKIPPED, d.DROP),
    ],
    ids=lambda x: x if isinstance(x, str) else None,
)
def test_classes(evidence, cls, action):
    got = decide(evidence)
    assert (got.cls, got.action) == (cls, action)
    assert got.evidence or got.cls in (d.CLEAN, d.THREE_WAY), "every other class says why"


def test_a_conflict_says_what_was_checked_first():
    with_contract = decide(ev(am="conflict", conflict="a.py", verdict=FAIL)).evidence
    assert with_contract[0] == "conflicts on v0.99.0:\na.py"
    assert with_contract[1].startswith("not fully upstream: contract tests/c.py fails")
    assert with_contract[-1].startswith("checked before stopping: contract tests/c.py ran")
    none = decide(ev(am="conflict", conflict="a.py", contract=None)).evidence
    assert (
        none[-1] == "not checked before stopping: patches/series names no contract for this patch"
    )
    off = decide(ev(am="conflict", conflict="a.py")).evidence  # a contract, not run
    assert "(--no-contracts)" in off[-1]


def test_upstreamed_by_its_contract_despite_a_conflict_says_so():
    got = decide(ev(am="conflict", conflict="a.py", verdict=PASS))
    assert got.evidence[0] == "contract tests/c.py passes on plain v0.99.0 (1 passed)"
    assert got.evidence[1] == "the patch itself conflicts there:\na.py"
    assert "decided before asking a person" in got.evidence[2]


def test_a_line_twice_names_the_class_it_would_have():
    got = decide(ev(am="applied", dropped=["a.py: @@ -28,7 +28,7 @@"], repeated=["a.py:6 x"]))
    assert got.evidence[0].startswith("the replay would add lines that v0.99.0 already has")
    assert "  a.py:6 x" in got.evidence[0]
    assert got.evidence[1] == "without them the patch would be partly upstreamed"


def test_reverse_and_patch_id_both_count():
    got = decide(ev(reverse_applies=True, same_patch_id=True))
    assert len(got.evidence) == 2 and "git apply -R --check" in got.evidence[0]
