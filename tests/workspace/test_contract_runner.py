"""The contract runner: a contract must fail on the base and pass patched; one that passes on
the base tests nothing and is reported as an error. The base is a worktree of this workspace's
own vllm/ (never one a copied workspace inherited)."""

import shutil
from pathlib import Path

import pytest
from conftest import git, make_patch

from vseries import contract, series
from vseries import git as vgit
from vseries.errors import SeriesError
from vseries.workspace import Workspace

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
    rows = [
        ln
        for ln in out.splitlines()
        if ln and not ln.startswith((" ", "patch ")) and " contracts ok; " not in ln
    ]
    return {ln[:58].strip(): ln[81:] for ln in rows}


def test_base_fails_patched_passes_is_ok(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VSERIES_ROOT", str(tmp_path))
    base, patched = trees(tmp_path, 1)
    rb = contract.run_one("tests/contract/test_c.py", base)
    rp = contract.run_one("tests/contract/test_c.py", patched)
    assert (rb.outcome, rp.outcome) == ("fail", "pass")
    assert "1 failed" in rb.line and "1 passed" in rp.line
    assert contract.report([(series.Entry("0001-x.patch"), rp, rb)])
    out = capsys.readouterr().out
    assert verdicts(out) == {"0001-x.patch": "ok"}
    assert out.splitlines()[-1].startswith("1 of 1 contracts ok; patched, all together: 1 passed")


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


# Each contract leaves a marker named by its tree, its file and its process, and waits for a
# marker of the other tree: base and patched must run at the same time (one after the other,
# the first would wait for 600 s, then fail).
WAITS = """import os, pathlib, time, pytest, mod
pytestmark = pytest.mark.contract
MARKS = pathlib.Path(os.environ["VSERIES_TEST_MARKS"])

def test_value():
    (MARKS / f"{{mod.NAME}}-{me}-{{os.getpid()}}").touch()
    other = "base" if mod.NAME == "patched" else "patched"
    end = time.monotonic() + 600  # a hang guard: the other tree's run starts within seconds
    while not list(MARKS.glob(other + "-*")) and time.monotonic() < end:
        time.sleep(0.05)
    assert list(MARKS.glob(other + "-*")) and mod.VALUE == 2
"""


def named_trees(tmp_path) -> tuple:
    """trees() whose mod.py also says which tree it is (NAME)."""
    base, patched = trees(tmp_path, 1)
    for tree in (base, patched):
        (tree / "mod.py").write_text((tree / "mod.py").read_text() + f"NAME = '{tree.name}'\n")
    return base, patched


def entries_of(tmp_path, bodies: dict[str, str]) -> list:
    out = []
    for me, body in bodies.items():
        test = tmp_path / "tests" / "contract" / f"test_{me}.py"
        test.write_text(body)
        out.append(series.Entry(f"000{len(out) + 1}-{me}.patch", {"contract": str(test)}))
    return out


def test_a_trees_contracts_share_one_interpreter_and_the_trees_go_at_once(
    tmp_path, monkeypatch, capsys
):
    """On a host without a GPU (more than one job) the contracts of one tree run in one
    interpreter (torch and vLLM imported once, not once per contract), base and patched side
    by side (issue 40: a 2-core host ran 24 interpreters one at a time, on one core); the
    table keeps the series' order."""
    monkeypatch.setenv("VSERIES_ROOT", str(tmp_path))
    monkeypatch.setenv("VSERIES_CONTRACT_JOBS", "2")
    monkeypatch.setenv("VSERIES_TEST_MARKS", str(tmp_path / "marks"))
    (tmp_path / "marks").mkdir()
    base, patched = named_trees(tmp_path)
    entries = entries_of(tmp_path, {me: WAITS.format(me=me) for me in ("a", "b")})
    rows = contract.check_many(entries, base, patched)
    assert contract.report(rows)
    assert verdicts(capsys.readouterr().out) == {"0001-a.patch": "ok", "0002-b.patch": "ok"}
    pids = {}
    for mark in (tmp_path / "marks").iterdir():
        tree, me, pid = mark.name.split("-")
        pids.setdefault(tree, set()).add(pid)
    assert len(pids["base"]) == len(pids["patched"]) == 1 and pids["base"] != pids["patched"]
    assert all("one run with the tree's other contracts" in r[1].line for r in rows)


ALONE = """import sys, pytest, mod
pytestmark = pytest.mark.contract

def test_value():
    assert mod.VALUE == 2
    assert not [m for m in sys.modules if m.endswith("test_a")], "test_a ran in this process"
"""


def test_an_unexpected_outcome_in_the_shared_run_is_run_again_alone(tmp_path, monkeypatch, capsys):
    """A contract that fails patched next to another contract (here on purpose: it fails
    where test_a was imported) is run again alone, and that run decides: a shared interpreter
    never turns a pass into a reported failure, nor hides a contract that passes on base."""
    monkeypatch.setenv("VSERIES_ROOT", str(tmp_path))
    monkeypatch.setenv("VSERIES_CONTRACT_JOBS", "2")
    base, patched = trees(tmp_path, 1)
    entries = entries_of(tmp_path, {"a": TEST, "b": ALONE})
    rows = contract.check_many(entries, base, patched)
    assert contract.report(rows)
    assert verdicts(capsys.readouterr().out) == {"0001-a.patch": "ok", "0002-b.patch": "ok"}
    assert "one run with" in rows[0][1].line and "one run with" not in rows[1][1].line
    assert rows[1][1].line.startswith("1 passed"), rows[1][1].line


def test_a_worktree_of_another_repository_is_remade(tmp_path):
    """A workspace copied with its scratch (.vseries/base) keeps the original's worktree link:
    the copy's base worktree is remade from the copy's own vllm/, and the original's stays."""
    original, copy = tmp_path / "original", tmp_path / "copy"
    original.mkdir()
    git(original, "init", "-q")
    (original / "a.py").write_text("a = 1\n")
    git(original, "add", "a.py")
    git(original, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "r")
    commit = git(original, "rev-parse", "HEAD")
    vgit.add_worktree(original, tmp_path / "base", commit)
    git(tmp_path, "clone", "-q", str(original), str(copy))
    dest = tmp_path / "copied-base"
    shutil.copytree(tmp_path / "base", dest)  # its .git still names the original's git dir
    assert vgit.rev(dest, "HEAD") == commit
    vgit.add_worktree(copy, dest, commit)
    common = git(dest, "rev-parse", "--path-format=absolute", "--git-common-dir")
    assert Path(common).resolve() == (copy / ".git").resolve()
    assert vgit.is_repo(tmp_path / "base")  # the original's own worktree is untouched


def test_a_file_added_to_the_base_worktree_by_hand_is_gone_at_the_next_run(tmp_path):
    """An untracked module copied into the base worktree would make the base pass a contract
    (the patch's new file, there): the worktree is put back without it; ignored files (the
    release kernels linked into a tree) stay."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a.py").write_text("a = 1\n")
    (repo / ".gitignore").write_text("*.so\n")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "r")
    commit = git(repo, "rev-parse", "HEAD")
    base = vgit.add_worktree(repo, tmp_path / "base", commit)
    (base / "decode.py").write_text("copied in by hand\n")
    (base / "_C.so").write_text("a linked kernel\n")
    vgit.add_worktree(repo, base, commit)
    assert not (base / "decode.py").exists() and (base / "_C.so").exists()


def test_a_misspelt_contract_is_named_with_the_files_there_are(tiny):
    """A series line whose contract= names no file: the error lists tests/contract/ and the
    next step looks at the series file's change."""
    p = make_patch(
        tiny / "vllm", tiny / "patches", lambda r: (r / "b.py").write_text("x=2\n"), "[P] b"
    )
    (tiny / "tests" / "contract").mkdir(parents=True)
    (tiny / "tests" / "contract" / "test_b.py").write_text("")
    (tiny / "patches" / "series").write_text(f"{p.name} contract=tests/contract/test_bb.py\n")
    with pytest.raises(
        SeriesError, match=r"test_bb.py of .* does not exist \(tests/contract/ holds test_b.py\)"
    ) as e:
        contract.check_all(Workspace.current(), base=False)
    assert e.value.fix.startswith("git diff -- patches/series")


def test_a_row_names_its_patch_by_number_and_subject_cut_with_an_ellipsis():
    """The table's first column read like the README's patch table: number and Subject, a
    long one cut with an ellipsis (a file name cut at 58 ended in a stray "-.")."""
    long = "[Perf][Kernel] Default per-tensor FP8 MoE to Triton on Hopper without EP"
    assert contract.label("0001-Perf-Kernel-Default.patch", long) == f"0001 {long}"[:57] + "…"
    assert contract.label("0002-x.patch", "[P] b", "retired ") == "retired 0002 [P] b"
    assert contract.label("0001-x.patch") == "0001-x.patch"  # no file to read a Subject from


def test_an_upstreamed_row_counts_its_cases_as_the_other_rows_do(capsys):
    """The guard's pin line says its cases as every other row does, not pytest's closing
    line with its deselected tests and warnings (which a newcomer asked about)."""
    from vseries import retired
    from vseries.pytestrun import Case

    cases = [Case("test_a", "tests.contract.t", "t.py", "passed")] * 8
    res = contract.Result(0, "8 passed, 9 deselected, 15 warnings in 8.66s", "base", (), cases)
    rec = retired.Record("0001-x.patch", "Swap AB", contract="t.py", left_at="v0.34.0")
    assert contract.report_upstreamed([(rec, res)])
    out = capsys.readouterr().out
    assert "    pin:     8 passed\n" in out and "warnings" not in out
    # without a JUnit report (a run that broke off) the closing line is all there is
    contract.report_upstreamed([(rec, contract.Result(2, "1 error in 3.0s", "base"))])
    assert "    pin:     1 error in 3.0s\n" in capsys.readouterr().out
