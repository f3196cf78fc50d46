"""The contract runner: a contract must fail on the base and pass patched; one that passes on
the base tests nothing and is reported as an error."""

from vseries import contract, series

TEST = """import pytest, mod
pytestmark = pytest.mark.contract

def test_value():
    assert mod.VALUE == 2
"""
# A guard of the patched tree: the patched mod must keep GUARDED, which the base has anyway.
GUARD = """

@pytest.mark.guard
def test_guarded():
    assert mod.GUARDED
"""


def trees(tmp_path, base_value, guarded=True, test=TEST):
    (tmp_path / "tests" / "contract").mkdir(parents=True)
    (tmp_path / "tests" / "contract" / "test_c.py").write_text(test)
    out = []
    for name, value in (("base", base_value), ("patched", 2)):
        (tmp_path / name).mkdir()
        g = guarded or name == "base"
        (tmp_path / name / "mod.py").write_text(f"VALUE = {value}\nGUARDED = {g}\n")
        out.append(tmp_path / name)
    return out


def verdicts(out: str) -> dict[str, str]:
    """{patch: verdict} from the rows of contract.report's table (the verdict column)."""
    rows = [ln for ln in out.splitlines() if ln and not ln.startswith((" ", "patch "))]
    return {ln[:58].strip(): ln[81:] for ln in rows}


def test_base_fails_patched_passes_is_ok(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VSERIES_ROOT", str(tmp_path))
    base, patched = trees(tmp_path, 1)
    rb = contract.run_one("tests/contract/test_c.py", base)
    rp = contract.run_one("tests/contract/test_c.py", patched)
    assert (rb.outcome, rp.outcome) == ("fail", "pass")
    assert "1 failed" in rb.line and "1 passed" in rp.line
    assert contract.report([(series.Entry("0001-x.patch"), rp, rb)])
    assert verdicts(capsys.readouterr().out) == {"0001-x.patch": "ok"}


def test_contract_that_passes_on_base_is_an_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VSERIES_ROOT", str(tmp_path))
    base, patched = trees(tmp_path, 2)
    rb = contract.run_one("tests/contract/test_c.py", base)
    rp = contract.run_one("tests/contract/test_c.py", patched)
    assert not contract.report([(series.Entry("0001-x.patch"), rp, rb)])
    assert verdicts(capsys.readouterr().out) == {"0001-x.patch": "PASSES ON BASE: tests nothing"}


def test_no_tests_collected_is_not_a_pass(tmp_path, monkeypatch):
    monkeypatch.setenv("VSERIES_ROOT", str(tmp_path))
    base, _ = trees(tmp_path, 1)
    r = contract.run_one("tests/contract/test_c.py", base, ["-k", "nothing_matches"])
    assert r.outcome == "no tests" and not contract.report([(series.Entry("x"), r, None)])


def test_guards_run_with_the_patch_only(tmp_path, monkeypatch, capsys):
    """A guard that the patched tree breaks fails the contract; on the base, where it passes
    by construction, it is not run (it could not fail there)."""
    monkeypatch.setenv("VSERIES_ROOT", str(tmp_path))
    base, patched = trees(tmp_path, 1, guarded=False, test=TEST + GUARD)
    entry = series.Entry("0001-x.patch", {"contract": "tests/contract/test_c.py"})
    row = contract.check_one(entry, base, patched)
    assert "1 failed, 1 passed" in row[1].line  # the guard failed with the patch
    assert "1 failed, 1 deselected" in row[2].line  # the base ran the contract alone
    assert not contract.report([row])
    assert verdicts(capsys.readouterr().out) == {"0001-x.patch": "FAILS WITH THE PATCH"}


# Each contract writes its own marker and waits for the other's: run one after the other, the
# first would wait for a contract not started yet (600 s, then fail); run at once, both pass.
WAITS = """import os, pathlib, time, pytest, mod
pytestmark = pytest.mark.contract
MARKS = pathlib.Path(os.environ["VSERIES_TEST_MARKS"])

def test_value():
    (MARKS / "{me}").touch()
    end = time.monotonic() + 600  # a hang guard: the other run starts within seconds
    while not (MARKS / "{other}").exists() and time.monotonic() < end:
        time.sleep(0.05)
    assert (MARKS / "{other}").exists() and mod.VALUE == 2
"""


def test_contract_runs_go_at_once(tmp_path, monkeypatch, capsys):
    """The contract tier runs patches' contracts side by side (issue 40: a 2-core host ran
    them one at a time, on one core); the table keeps the series' order."""
    monkeypatch.setenv("VSERIES_ROOT", str(tmp_path))
    monkeypatch.setenv("VSERIES_CONTRACT_JOBS", "2")
    monkeypatch.setenv("VSERIES_TEST_MARKS", str(tmp_path / "marks"))
    (tmp_path / "marks").mkdir()
    base, patched = trees(tmp_path, 1)
    entries = []
    for me, other in (("a", "b"), ("b", "a")):
        test = tmp_path / "tests" / "contract" / f"test_{me}.py"
        test.write_text(WAITS.format(me=me, other=other))
        entries.append(series.Entry(f"000{len(entries) + 1}-{me}.patch", {"contract": str(test)}))
    rows = contract.check_many(entries, base, patched)
    assert contract.report(rows)
    assert verdicts(capsys.readouterr().out) == {"0001-a.patch": "ok", "0002-b.patch": "ok"}
