"""The contract runner: a contract must fail on the base and pass patched; one that passes on
the base tests nothing and is reported as an error."""

from vseries import contract, series

TEST = """import pytest, mod
pytestmark = pytest.mark.contract

def test_value():
    assert mod.VALUE == 2
"""


def trees(tmp_path, base_value):
    (tmp_path / "tests" / "contract").mkdir(parents=True)
    (tmp_path / "tests" / "contract" / "test_c.py").write_text(TEST)
    out = []
    for name, value in (("base", base_value), ("patched", 2)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "mod.py").write_text(f"VALUE = {value}\n")
        out.append(tmp_path / name)
    return out


def test_base_fails_patched_passes_is_ok(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VSERIES_ROOT", str(tmp_path))
    base, patched = trees(tmp_path, 1)
    rb = contract.run_one("tests/contract/test_c.py", base)
    rp = contract.run_one("tests/contract/test_c.py", patched)
    assert (rb.outcome, rp.outcome) == ("fail", "pass")
    assert "1 failed" in rb.line and "1 passed" in rp.line
    assert contract.report([(series.Entry("0001-x.patch"), rp, rb)])
    assert "ok" in capsys.readouterr().out


def test_contract_that_passes_on_base_is_an_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VSERIES_ROOT", str(tmp_path))
    base, patched = trees(tmp_path, 2)
    rb = contract.run_one("tests/contract/test_c.py", base)
    rp = contract.run_one("tests/contract/test_c.py", patched)
    assert not contract.report([(series.Entry("0001-x.patch"), rp, rb)])
    assert "PASSES ON BASE" in capsys.readouterr().out


def test_no_tests_collected_is_not_a_pass(tmp_path, monkeypatch):
    monkeypatch.setenv("VSERIES_ROOT", str(tmp_path))
    base, _ = trees(tmp_path, 1)
    r = contract.run_one("tests/contract/test_c.py", base, ["-k", "nothing_matches"])
    assert r.outcome == "no tests" and not contract.report([(series.Entry("x"), r, None)])
