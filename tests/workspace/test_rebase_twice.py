"""rebase: the stop on lines added twice leads somewhere (issue 33, item 2).

From the stop, each way on ends in a clean finish (the pin moved, patches/ and the series
consistent, the report written, no rebase left): the printed ``next:`` command
(``--continue --drop-repeats``: the repeats taken out of the commit, the patch upstreamed
when nothing is left), a hand fix that git refuses to commit because it would empty the
commit, an emptied commit, a commit reset away, uncommitted edits; and ``--abort`` puts
everything back from a half-done hand fix.
"""

import re

import pytest
from conftest import git, make_patch, pin_with, run_next
from test_rebase import FULL, A, cli, publish, report_of, rows_of, snapshot
from test_rebase_content import SHAPES, edit, funcs, insert_after, lines_of, offline, series_of

from vseries import apply, series
from vseries import pin as pinmod
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


# ---- issue 43, item 3: every way on from a stop finishes ------------------------------------


def test_a_fix_committed_on_top_of_the_stopped_commit_is_folded_into_it(offline, index):
    """Item 3: the person takes the repeated line out in a new commit on top of the patch's
    (instead of amending) and continues. It used to end in "refresh exported 2 patches but 1
    were carried", and --continue and --skip looped from there; now the commits above the
    last decision are folded into the patch's one commit (its message and author)."""
    stop_on(offline, index, partial=True)
    vdir = offline / "vllm"
    take_line_out(offline)
    git(vdir, "-c", "user.name=u", "-c", "user.email=u@u", "commit", "-qam", "no repeat")
    assert cli("--continue") == 0
    finished(offline, RESOLVED)
    text = series.load()[0].path.read_text()
    assert "Subject: [P] fast path" in text and "+thirty-five" in text and LINE not in text
    assert "no repeat" not in text


def test_a_conflict_resolved_with_a_commit_of_its_own_is_folded_too(offline, index):
    """The same at a conflict: the person commits the resolution (git commit) while the am
    session is open, then continues; the rebase used to send them to --skip, which drops the
    patch. The session is closed and the commit becomes the patch's."""
    series_of(offline, (edit("a.py", "line 30\n", "thirty\n"), "[P] thirty"))
    publish(index, "0.99.0", {"a.py": A.replace("line 30\n", "THIRTY\n"), "b.py": "x = 1\n"})
    with pytest.raises(SeriesError, match="conflicts"):
        cli("v0.99.0", "--commit", FULL)
    vdir = offline / "vllm"
    (vdir / "a.py").write_text(A.replace("line 30\n", "THIRTY and thirty\n"))
    git(vdir, "add", "a.py")
    git(vdir, "-c", "user.name=u", "-c", "user.email=u@u", "commit", "-qm", "resolved")
    assert cli("--continue") == 0
    assert list(rows_of(report_of(offline)).values()) == [RESOLVED]
    text = series.load()[0].path.read_text()
    assert "Subject: [P] thirty" in text and "+THIRTY and thirty" in text
    assert git(vdir, "rev-list", "--count", f"{FULL}..HEAD") == "1"


def stacked(ws, *patches) -> None:
    """Like series_of, each patch made on top of the ones before it."""
    vdir, names = ws / "vllm", []
    pinned = git(vdir, "rev-parse", "HEAD")
    for i, (change, subject) in enumerate(patches, 1):
        p = make_patch(vdir, ws / "patches", change, subject)
        p = p.rename(ws / "patches" / f"{i:04d}{p.name[4:]}")
        git(vdir, "-c", "user.name=t", "-c", "user.email=t@t", "am", "-q", str(p))
        names.append(p.name)
    git(vdir, "checkout", "-q", "--detach", pinned)
    (ws / "patches" / "series").write_text("".join(n + "\n" for n in names))
    apply.apply()


def test_a_line_brought_back_by_a_later_patch_s_resolution_stops_again(offline, index):
    """Item 3: 0001 adds the line (the pin has it in f, upstream adds one in g), 0002 uses it;
    --drop-repeats makes 0001 upstreamed, 0002 then conflicts, and taking 0002's side brings
    the line back: it used to finish with the line three times. The rebase stops on 0002 with
    the counts, and --continue --drop-repeats finishes with the line twice."""
    pin_with(offline, {"f.py": funcs("f")})
    with_use = funcs("f", "h").replace(
        "limit = 64\n    return 3", "limit = 64\n    use(limit)\n    return 3"
    )
    stacked(
        offline,
        (lambda r: (r / "f.py").write_text(funcs("f", "h")), "[P] limit in h"),
        (lambda r: (r / "f.py").write_text(with_use), "[P] use it"),
    )
    publish(index, "0.99.0", {"a.py": A, "b.py": "x = 1\n", "f.py": funcs("f", "g")})
    with pytest.raises(SeriesError, match="would add lines twice"):
        cli("v0.99.0", "--commit", FULL)
    vdir = offline / "vllm"
    with pytest.raises(SeriesError, match="conflicts"):
        cli("--continue", "--drop-repeats")
    text = (vdir / "f.py").read_text()  # take 0002's side of the conflict
    (vdir / "f.py").write_text(
        re.sub(r"<<<<<<< .*?=======\n(.*?)>>>>>>> [^\n]*\n", r"\1", text, flags=re.S)
    )
    git(vdir, "add", "f.py")
    with pytest.raises(SeriesError) as e:
        cli("--continue")
    msg = str(e.value)
    assert "patch 0002-P-use-it.patch would add lines twice" in msg
    assert (
        "it would be there 3 times, where the old pin with the series up to this patch has it twice"
        in msg
    )
    assert cli("--continue", "--drop-repeats") == 0
    rep = report_of(offline)
    assert list(rows_of(rep).values()) == [UPSTREAMED, RESOLVED]  # not "carried clean"
    assert "conflicted on the 3-way merge in f.py; fixed by hand" in rep
    assert lines_of(offline, "f.py", "limit = 64") == 2


def test_the_finish_refuses_a_count_it_cannot_export_with_a_remedy_that_works(
    offline, index, monkeypatch
):
    """Sibling: if vllm/ still holds more commits than patches carried when the rebase
    finishes (here: the fold is kept from running), it stops before anything moves, and its
    next: line (run as printed) puts everything back; it used to move the pin, then offer
    --continue | --skip | --abort, of which only --abort got out."""
    from vseries.rebase import engine

    stop_on(offline, index, partial=True)
    before = (offline / "upstream.toml").read_bytes()
    vdir = offline / "vllm"
    take_line_out(offline)
    git(vdir, "-c", "user.name=u", "-c", "user.email=u@u", "commit", "-qam", "no repeat")
    monkeypatch.setattr(engine, "fold", lambda vdir, st: False, raising=False)
    with pytest.raises(SeriesError) as e:
        cli("--continue")
    assert "nothing was moved" in str(e.value)
    assert (offline / "upstream.toml").read_bytes() == before
    r = run_next(offline, str(e.value))
    assert r.returncode == 0, r.stdout + r.stderr
    assert (offline / "upstream.toml").read_bytes() == before
    assert not (offline / ".vseries" / "rebase" / "state.json").exists()


def test_a_wrong_option_during_a_rebase_offers_what_works_from_there(offline, index, monkeypatch):
    """Sibling: --skip, --port or a new rebase while a rebase is under way print a next: line
    that runs as printed. It used to be `--continue | --skip | --abort` (no command), also
    where --skip fails: after a run killed between two patches, nothing waits for a person."""
    from vseries.rebase import engine

    series_of(offline, (edit("a.py", "line 30\n", "thirty\n"), "[P] thirty"))
    publish(index, "0.99.0", {"a.py": A.replace("line 5\n", "five\n"), "b.py": "x = 1\n"})

    def killed(*a, **k):
        raise KeyboardInterrupt

    real = engine.carried
    monkeypatch.setattr(engine, "carried", killed)
    with pytest.raises(KeyboardInterrupt):
        cli("v0.99.0", "--commit", FULL)
    monkeypatch.setattr(engine, "carried", real)
    for args in (["--skip"], ["v0.99.0"], ["--continue", "--drop-repeats"]):
        with pytest.raises(SeriesError) as e:
            cli(*args)
        said = str(e.value).split("\n  next: ", 1)[1]
        assert said.startswith("scripts/rebase.sh --continue   # ") and "--skip" not in said
    r = run_next(offline, str(e.value))
    assert r.returncode == 0, r.stdout + r.stderr
    assert pinmod.load().tag == "v0.99.0"
    assert list(rows_of(report_of(offline)).values()) == ["carried clean"]


def test_a_run_killed_after_the_last_decision_says_where_it_resumes(
    offline, index, monkeypatch, capsys
):
    """Sibling (counts the rebase says): killed after the last patch was decided, --continue
    said "resuming at patch 2 of 1"; it says it resumes at the finish, and finishes."""
    from vseries.rebase import finish

    series_of(offline, (edit("a.py", "line 30\n", "thirty\n"), "[P] thirty"))
    publish(index, "0.99.0", {"a.py": A, "b.py": "x = 1\n"})
    real = finish.finish

    def killed(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(finish, "finish", killed)
    with pytest.raises(KeyboardInterrupt):
        cli("v0.99.0", "--commit", FULL)
    monkeypatch.setattr(finish, "finish", real)
    capsys.readouterr()
    assert cli("--continue") == 0
    out = capsys.readouterr().out
    assert "resuming at the finish (all 1 patches decided)" in out and "patch 2 of 1" not in out
    assert pinmod.load().tag == "v0.99.0"
