"""The upstream tier's runner on two tiny trees: it finds a regression test by test, and a
selection that collects nothing is a failure."""

from vseries import upstream

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
