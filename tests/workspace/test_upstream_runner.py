"""The upstream tier's runner on two tiny trees: it finds a regression test by test, and a
selection that collects nothing is a failure."""

from pathlib import Path

import pytest

from vseries import patchfile, series, upstream
from vseries.workspace import Workspace

TEST = """
def test_stable():
    assert 1 + 1 == 2

def test_changed():
    import mod
    assert mod.VALUE == 1
"""


def tree(path, value):
    path.mkdir()
    (path / "tests").mkdir()
    (path / "tests" / "test_k.py").write_text(TEST)
    (path / "mod.py").write_text(f"VALUE = {value}\n")
    return path


def test_regression_is_reported(tmp_path):
    base, patched = tree(tmp_path / "b", 1), tree(tmp_path / "p", 2)
    text, ok = upstream.compare(
        base, patched, [{"patch": "x", "path": "tests/test_k.py"}], tmp_path / "w"
    )
    assert not ok
    assert "test_changed: failed patched, passed on base" in text
    assert "| 2 passed | 1 passed, 1 failed |" in text


def test_no_regression(tmp_path):
    base, patched = tree(tmp_path / "b", 1), tree(tmp_path / "p", 1)
    text, ok = upstream.compare(
        base, patched, [{"patch": "x", "path": "tests/test_k.py"}], tmp_path / "w"
    )
    assert ok and "No regression" in text


def test_selection_collecting_nothing_fails(tmp_path):
    base, patched = tree(tmp_path / "b", 1), tree(tmp_path / "p", 1)
    text, ok = upstream.compare(
        base,
        patched,
        [{"patch": "x", "path": "tests/test_k.py", "k": "no_such_test"}],
        tmp_path / "w",
    )
    assert not ok and "collected no test" in text


@pytest.mark.slow
def test_xdist_workers_give_the_same_outcomes_and_a_report_as_it_goes(tmp_path, capfd):
    """--jobs 2 runs each tree over two pytest-xdist workers: the same outcomes test by test;
    the report file holds each finished selection and names the ones still to run. Slow: four
    pytest runs with two workers each (about 30 s of CPU)."""
    base, patched = tree(tmp_path / "b", 1), tree(tmp_path / "p", 2)
    sels = [
        {"patch": "x", "path": "tests/test_k.py", "k": "stable"},
        {"patch": "x", "path": "tests/test_k.py"},
    ]
    seen = []
    real = upstream.run_selection

    def watch(tree_, sel, xml, pythonpath, jobs=1):
        seen.append(((tmp_path / "report.md").read_text(), jobs))
        return real(tree_, sel, xml, pythonpath, jobs)

    upstream.run_selection, was = watch, upstream.run_selection
    try:
        text, ok = upstream.compare(
            base, patched, sels, tmp_path / "w", jobs=2, out=tmp_path / "report.md"
        )
    finally:
        upstream.run_selection = was
    assert not ok
    assert "test_changed: failed patched, passed on base" in text
    assert "| 2 passed | 1 passed, 1 failed |" in text
    # before the second selection: the first one's row, the second listed as not run
    before_second = seen[2][0]
    assert "| `tests/test_k.py` -k `stable` | 1 passed | 1 passed |" in before_second
    assert "Not run (the run stopped first):\n- `tests/test_k.py`\n" in before_second
    assert {j for _, j in seen} == {2}
    assert (tmp_path / "report.md").read_text() == text
    # the workers ran it (xdist's start line, in the runs' output)
    assert "bringing up nodes" in capfd.readouterr().out


def test_only_picks_by_patch_path_or_exact_name():
    """--only: a substring of the patch name or path, or a selection's name exactly (the four
    test_moe.py selections share patch and path, and one -k contains another's word)."""
    from pathlib import Path

    sels = upstream.load_selections(Path(upstream.HERE) / "tests" / "upstream.toml")
    names = [s.get("name") for s in upstream.pick(sels, ["test_moe-marlin", "test_moe-rest"])]
    assert names == ["test_moe-marlin", "test_moe-rest"]
    paths = [s["path"] for s in upstream.pick(sels, ["block_int8", "FP8-MoE-decode"])]
    assert paths == [
        "tests/kernels/moe/test_block_int8.py",
        "tests/kernels/moe/test_fused_moe_fp8_decode.py",
    ]
    assert upstream.pick(sels, []) == sels
    assert upstream.pick(sels, ["no-such-selection"]) == []


def test_jobs_without_xdist_is_a_clear_error(tmp_path, monkeypatch, capsys):
    """--jobs N where pytest-xdist is missing: exit 2 with what to install, before any run
    (pytest's own usage error would read as "collected no test")."""
    base, patched = tree(tmp_path / "b", 1), tree(tmp_path / "p", 1)
    sel = tmp_path / "sel.toml"
    sel.write_text('[[select]]\npatch = "x"\npath = "tests/test_k.py"\n')
    monkeypatch.setattr(upstream, "has_xdist", lambda: False)
    ran = []
    monkeypatch.setattr(upstream, "run_selection", lambda *a, **k: ran.append(a))
    args = ["--base", str(base), "--patched", str(patched), "--select", str(sel)]
    assert upstream.main(args + ["--jobs", "4", "--work", str(tmp_path / "w")]) == 2
    assert "needs pytest-xdist" in capsys.readouterr().err and not ran
    monkeypatch.undo()  # the real check and runner: --jobs 1 does not need xdist
    monkeypatch.setattr(upstream, "has_xdist", lambda: False)
    assert upstream.main(args + ["--jobs", "1", "--work", str(tmp_path / "w1")]) == 0


def test_patched_only_selections_name_a_test_file_the_series_adds():
    """A patched_only selection runs a test file that a patch of the series adds; one that
    no patch adds (a patch refreshed without its test) fails the upstream tier on the GPU host
    only, as a missing file."""
    root = Path(upstream.HERE)
    _, entries = series.read(root / "patches" / "series", Workspace(root))
    added = {t for e in entries for t in patchfile.info(e.path).tests}
    sels = upstream.load_selections(root / "tests" / "upstream.toml")
    stray = [s["path"] for s in sels if s.get("patched_only") and s["path"] not in added]
    assert not stray, f"tests/upstream.toml: no patch of the series adds {stray}"
