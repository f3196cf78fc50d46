"""rebase: the stop on lines added twice leads somewhere (issue 33, item 2).

From the stop, each way on ends in a clean finish (the pin moved, patches/ and the series
consistent, the report written, no rebase left): the printed ``next:`` command
(``--continue --drop-repeats``: the repeats taken out of the commit, the patch upstreamed
when nothing is left), a hand fix that git refuses to commit because it would empty the
commit, an emptied commit, a commit reset away, uncommitted edits; and ``--abort`` puts
everything back from a half-done hand fix.
"""

import pytest
from conftest import git, run_next
from test_rebase import FULL, A, cli, publish, report_of, rows_of, snapshot
from test_rebase_content import SHAPES, edit, insert_after, lines_of, offline, series_of

from vseries import pin as pinmod
from vseries import series
from vseries.errors import SeriesError

__all__ = ["offline"]  # the fixture, used by name
LINE = "use_fast_path = True"
UPSTREAMED, PARTLY, SKIPPED = "upstreamed", "partly upstreamed", "dropped by --skip"
RESOLVED = "carried, resolved by hand"


def stop_on(ws, index, partial: bool) -> str:
    """Rebase a one-patch series that adds LINE (and, when ``partial``, also changes line 35)
    onto a release that added LINE elsewhere; returns the stop's message."""
    if partial:
        change = lambda r: (  # noqa: E731
            insert_after("a.py", "line 5\n", LINE + "\n")(r),
            edit("a.py", "line 35\n", "thirty-five\n")(r),
        )
    else:
        change = insert_after("a.py", "line 5\n", LINE + "\n")
    series_of(ws, (change, "[P] fast path"))
    publish(
        index, "0.99.0", {"a.py": A.replace("line 20\n", f"line 20\n{LINE}\n"), "b.py": "x = 1\n"}
    )
    with pytest.raises(SeriesError) as e:
        cli("v0.99.0", "--commit", FULL)
    assert "would add lines twice" in str(e.value)
    return str(e.value)


def finished(ws, cls: str) -> str:
    """The rebase finished cleanly with the one patch classed ``cls``; returns the report."""
    assert not (ws / ".vseries" / "rebase" / "state.json").exists()
    assert pinmod.load().tag == "v0.99.0"
    rep = report_of(ws)
    assert list(rows_of(rep).values()) == [cls], rep
    listed = [e.name for e in series.load()]  # checks every file: listed, exists, a patch
    assert sorted(p.name for p in (ws / "patches").glob("*.patch")) == sorted(listed)
    assert len(listed) == (0 if cls in (UPSTREAMED, SKIPPED) else 1)
    vdir = ws / "vllm"
    assert not git(vdir, "status", "--porcelain")
    assert git(vdir, "rev-list", "--count", f"{FULL}..HEAD") == str(len(listed))
    assert lines_of(ws, "a.py", LINE) == 1
    return rep


def amend(vdir, *extra: str) -> int:
    import subprocess

    return subprocess.run(
        ["git", "-C", str(vdir), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qa"]
        + ["--amend", "--no-edit", *extra],
        capture_output=True,
    ).returncode


def take_line_out(ws) -> None:
    f = ws / "vllm" / "a.py"
    f.write_text(f.read_text().replace(f"line 5\n{LINE}\n", "line 5\n", 1))


@pytest.mark.parametrize("partial", [True, False], ids=["the rest carried", "nothing left"])
def test_the_printed_next_command_finishes_the_rebase(offline, index, partial):
    """The stop's next: line, run as printed (--continue --drop-repeats)."""
    msg = stop_on(offline, index, partial)
    assert "next: scripts/rebase.sh --continue --drop-repeats" in msg
    r = run_next(offline, msg)
    assert r.returncode == 0, r.stdout + r.stderr
    rep = finished(offline, PARTLY if partial else UPSTREAMED)
    if partial:
        text = series.load()[0].path.read_text()
        assert "+thirty-five" in text and LINE not in text
        assert "so taken out with --drop-repeats" in rep
    else:
        assert "nothing of the patch is left" in rep and "(--drop-repeats)" in rep


@pytest.mark.parametrize("how", ["amend refused", "amended empty", "reset away"])
def test_continue_when_the_hand_fix_leaves_nothing(offline, index, how):
    """The hand remedy on a patch that is all repeats: git refuses the amend ("would make it
    empty") and leaves the edit uncommitted, or the user forces an empty commit, or resets
    the commit away; --continue classes the patch upstreamed (it used to stop in refresh)."""
    stop_on(offline, index, partial=False)
    vdir = offline / "vllm"
    if how == "reset away":
        git(vdir, "reset", "-q", "--hard", "HEAD~1")
    else:
        take_line_out(offline)
        assert amend(vdir) != 0  # "You asked to amend ... would make it empty"
        if how == "amended empty":
            assert amend(vdir, "--allow-empty") == 0
    assert cli("--continue") == 0
    rep = finished(offline, UPSTREAMED)
    assert "nothing of the patch is left" in rep


def test_continue_after_resetting_away_a_patch_with_more_in_it(offline, index):
    stop_on(offline, index, partial=True)
    git(offline / "vllm", "reset", "-q", "--hard", "HEAD~1")
    assert cli("--continue") == 0
    assert "its commit taken out of vllm/ by hand" in finished(offline, SKIPPED)


def test_continue_folds_uncommitted_edits_into_the_commit(offline, index):
    stop_on(offline, index, partial=True)
    take_line_out(offline)  # and no amend
    assert cli("--continue") == 0
    finished(offline, RESOLVED)
    assert "+thirty-five" in series.load()[0].path.read_text()


def test_skip_and_continue_as_it_is_still_finish(offline, index):
    stop_on(offline, index, partial=True)
    assert cli("--skip") == 0
    finished(offline, SKIPPED)


def test_drop_repeats_needs_the_stopped_commit(offline, index):
    stop_on(offline, index, partial=True)
    take_line_out(offline)
    with pytest.raises(SeriesError, match="--drop-repeats takes the repeated lines out"):
        cli("--continue", "--drop-repeats")
    assert cli("--continue") == 0
    finished(offline, RESOLVED)


def test_abort_from_a_half_done_hand_fix_restores_everything(offline, index):
    patches, files, _ = SHAPES["moved import"]
    series_of(offline, *patches)
    before = snapshot(offline)
    publish(index, "0.99.0", {"b.py": "x = 1\n", **files})
    with pytest.raises(SeriesError, match="would add lines twice"):
        cli("v0.99.0", "--commit", FULL)
    f = offline / "vllm" / "a.py"
    f.write_text(f.read_text().replace("line 2\nimport os\n", "line 2\n", 1))
    assert amend(offline / "vllm") != 0
    assert cli("--abort") == 0
    assert snapshot(offline) == before
