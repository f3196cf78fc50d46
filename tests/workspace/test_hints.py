"""The next: lines lead somewhere: each scenario runs the printed commands as a user would
(conftest.follow_hints) until the verb succeeds, and checks that nothing was lost on the way."""

from pathlib import Path

import pytest
from conftest import follow_hints, git, make_patch

from vseries import apply, patchfile, refresh, series
from vseries import git as vgit
from vseries.errors import SeriesError


@pytest.fixture
def one(tiny):
    """tiny with one patch (b.py x = 1 -> 2) applied and exported by refresh."""
    p = make_patch(
        tiny / "vllm", tiny / "patches", lambda r: (r / "b.py").write_text("x = 2\n"), "[P] b"
    )
    (tiny / "patches" / "series").write_text(p.name + " contract=tests/c.py\n")
    apply.apply()
    refresh.refresh()
    return tiny


def test_dirty_vllm_hint_keeps_untracked_files(one):
    """apply refuses uncommitted work and lists the untracked file; its hint commits all of
    it (not `commit -a`, which leaves untracked files out and refresh then refuses)."""
    vdir = one / "vllm"
    (vdir / "b.py").write_text("x = 3\n")
    (vdir / "new.py").write_text("new = 1\n")
    ran = follow_hints(one, apply.apply)
    assert len(ran) == 1 and "add -A" in ran[0]
    mine = [e for e in series.load() if patchfile.subject(e.path) == "[P] my work"]
    assert len(mine) == 1 and "new.py" in mine[0].path.read_text()
    assert "+x = 3" in mine[0].path.read_text()
    assert git(vdir, "status", "--porcelain") == ""


@pytest.mark.parametrize("tracked", [True, False], ids=["committed", "untracked"])
def test_broken_patch_file_hints_restore_it(one, tracked):
    """A listed patch file turned to junk: restored from the workspace's git when it tracks
    the file, else exported again from vllm/ by refresh; the series is as before."""
    if tracked:
        git(one, "init", "-q")
        git(one, "add", "patches", "upstream.toml")
        git(one, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "workspace")
    [entry] = series.load()
    good = entry.path.read_bytes()
    entry.path.write_bytes(b"junk\n")
    ran = follow_hints(one, apply.apply)
    assert ran and ("git checkout --" in ran[0]) == tracked
    assert entry.path.read_bytes() == good
    assert (one / "patches" / "series").read_text() == entry.name + " contract=tests/c.py\n"


def test_junk_patch_added_to_the_series_hints_its_way_out(one):
    """A new series line naming a junk file vllm/ never had: apply's hint must not send the
    user to a refresh whose hint is to check out the branch HEAD is already on."""
    [entry] = series.load()
    good = entry.path.read_bytes()
    (one / "patches" / "0002-junk.patch").write_bytes(b"From: a\nSubject: x\n\nno diff\n")
    with (one / "patches" / "series").open("a") as f:
        f.write("0002-junk.patch\n")
    ran = follow_hints(one, apply.apply)
    assert not any("checkout series" in r for r in ran), ran
    assert [e.name for e in series.load()] == [entry.name] and entry.path.read_bytes() == good


def test_refresh_before_apply_hints_apply_not_a_checkout(one):
    """A teammate's new patch is in patches/ but not yet in vllm/ (on `series`): refresh's
    hint is to apply it, not to check out `series` again."""
    vdir = one / "vllm"
    pin = git(vdir, "rev-parse", "HEAD~1")
    git(vdir, "checkout", "-q", "--detach", pin)
    new = make_patch(
        vdir, one / "patches", lambda r: (r / "a.py").write_text("a = 1\n"), "[P] theirs"
    )
    new = new.rename(one / "patches" / ("0002" + new.name[4:]))
    git(vdir, "checkout", "-q", "series")
    with (one / "patches" / "series").open("a") as f:
        f.write(new.name + "\n")
    theirs = vgit.patch_id(vdir, new.read_text())
    ran = follow_hints(one, refresh.refresh)
    assert ran and ran[0].startswith("scripts/apply.sh")
    assert [e.name for e in series.load()][1] == new.name
    assert vgit.patch_id(vdir, new.read_text()) == theirs  # their change, as refresh writes it


@pytest.mark.parametrize("typo", ["0001-P-c.patch", "0001-P-bee.patch", "0001-P.patch"])
@pytest.mark.parametrize("verb", ["apply", "refresh"])
def test_series_line_with_a_typo_offers_the_file_it_meant(one, typo, verb):
    """A series line naming a missing patch one edit (or one word) from an unlisted file in
    patches/: the message names both, and its one hint renames the line; nothing else moves."""
    [entry] = series.load()
    assert entry.name == "0001-P-b.patch"
    good = (one / "patches" / "series").read_text()
    (one / "patches" / "series").write_text(good.replace(entry.name, typo))
    try:
        series.load()
    except Exception as e:
        message = str(e)
    assert f"names {typo}, which is missing; patches/ holds {entry.name}" in message
    assert "did you mean it?" in message
    ran = follow_hints(one, {"apply": apply.apply, "refresh": refresh.refresh}[verb])
    assert len(ran) == 1 and ran[0].startswith("sed -i "), ran
    assert (one / "patches" / "series").read_text() == good


def test_series_typo_offers_only_a_near_name():
    assert series.near_miss("0002-foo-bar.patch", ["0002-foo-baz.patch"]) == "0002-foo-baz.patch"
    assert series.near_miss("0002-rope.patch", ["0002-rotary.patch"]) == "0002-rotary.patch"
    assert series.near_miss("0002-foo.patch", ["0003-bar.patch"]) is None
    assert series.near_miss("0002-foo.patch", []) is None
    assert series.near_miss("0002-foo-bar.patch", ["0002-foo.patch"]) == "0002-foo.patch"


@pytest.mark.parametrize("where", ["pin", "elsewhere"])
def test_detached_head_hint_keeps_the_commit_on_series(one, where):
    """An unexported commit on `series`, then HEAD detached (at the pin, or on a commit of its
    own): apply and refresh send the user back to `series` and export the commit; neither
    offers `checkout -B series`, which would move the branch off it."""
    vdir = one / "vllm"
    (vdir / "a.py").write_text("wip = 1\n")
    git(vdir, "-c", "user.name=u", "-c", "user.email=u@u", "commit", "-qam", "[P] wip")
    git(vdir, "checkout", "-q", "--detach", "HEAD~2")
    if where == "elsewhere":
        (vdir / "c.py").write_text("c = 1\n")
        git(vdir, "add", "c.py")
        git(vdir, "-c", "user.name=u", "-c", "user.email=u@u", "commit", "-qm", "[P] aside")
    aside = git(vdir, "rev-parse", "HEAD")
    ran = follow_hints(one, apply.apply)
    assert not any("checkout -B" in r for r in ran), ran
    assert "[P] wip" in [patchfile.subject(e.path) for e in series.load()]
    if where == "elsewhere":  # HEAD's own commit kept under a branch of its own
        assert git(vdir, "rev-parse", f"detached-{aside[:12]}") == aside


@pytest.mark.parametrize("op", ["cherry-pick", "merge"])
def test_busy_vllm_hint_names_the_operation_in_progress(one, op):
    """A conflicted cherry-pick or merge in vllm/: apply and refresh name it and its own
    --continue / --abort (git am --abort would fail there); after that abort apply runs."""
    vdir = one / "vllm"
    git(vdir, "checkout", "-q", "-b", "other", "HEAD~1")
    (vdir / "b.py").write_text("x = 5\n")
    git(vdir, "-c", "user.name=u", "-c", "user.email=u@u", "commit", "-qam", "other b")
    git(vdir, "checkout", "-q", "series")
    r = vgit.call(vdir, "-c", "user.name=u", "-c", "user.email=u@u", op, "other")
    assert r.code != 0  # a conflict on b.py
    for verb in (apply.apply, refresh.refresh):
        with pytest.raises(SeriesError, match=f"middle of a git {op}") as e:
            verb()
        assert f"git -C vllm {op} --continue" in e.value.fix
        assert f"git -C vllm {op} --abort" in e.value.fix and " am " not in e.value.fix
    git(vdir, op, "--abort")
    apply.apply()


def test_stopped_rebase_script_owns_vllm(one, capsys):
    """While a scripts/rebase.sh run is stopped (its state file), apply, refresh and build
    send the user to its --continue / --abort, which also put upstream.toml and patches/
    back; a bare git am --abort would not."""
    from vseries import cli
    from vseries.workspace import Workspace

    state = Workspace.current().rebase_state
    state.parent.mkdir(parents=True)
    state.write_text("{}")
    for verb in ("apply", "refresh", "build"):
        assert cli.main([verb]) == 2
        err = capsys.readouterr().err
        assert "scripts/rebase.sh run is stopped" in err, err
        assert "next: scripts/rebase.sh --continue" in err and "rebase.sh --abort" in err


def test_unknown_kept_line_in_the_environment_is_named(one, monkeypatch):
    """VSERIES_LINE set to a line that does not exist: said as such, not as a missing pin."""
    from vseries.workspace import Workspace

    monkeypatch.setenv("VSERIES_LINE", "v9.9.9")
    with pytest.raises(SeriesError, match="no kept line 'v9.9.9'") as e:
        Workspace.current()
    assert e.value.fix.startswith("unset VSERIES_LINE")


def test_conflict_leftovers_are_not_exported(one):
    """A .rej file committed by mistake after a hand-resolved conflict: refresh refuses to
    export it into a patch, and its hint folds the removal into the commit that added it."""
    vdir = one / "vllm"
    (vdir / "a.py").write_text("a = 2\n")
    (vdir / "a.py.rej").write_text("@@ -1 +1 @@\n-a\n+a = 2\n")
    git(vdir, "add", "-A")
    git(vdir, "-c", "user.name=u", "-c", "user.email=u@u", "commit", "-qm", "[P] a")
    ran = follow_hints(one, refresh.refresh)
    assert len(ran) == 1 and "--fixup=" in ran[0]
    texts = [e.path.read_text() for e in series.load()]
    assert len(texts) == 2 and not any(".rej" in t for t in texts)
    assert "+a = 2" in texts[1]


def test_a_stale_git_lock_gets_its_removal_as_the_next_step(one):
    """A git killed mid-command leaves index.lock; apply then fails in git, and the next:
    line removes the lock, after which apply runs."""
    vdir = one / "vllm"
    git(vdir, "checkout", "-q", "--detach", "HEAD~1")
    lock = Path(git(vdir, "rev-parse", "--absolute-git-dir")) / "index.lock"
    lock.write_text("")
    ran = follow_hints(one, apply.apply)
    assert ran == [f"rm -f {lock}   # when no other git command runs in vllm/"]


@pytest.mark.parametrize("edit", ["deleted", "misspelt"])
def test_a_hand_edited_list_hints_the_committed_list_not_deleting_patches(one, edit):
    """A series line deleted or misspelt by hand: the hint was "add them to patches/series in
    order, or delete them" (and a misspelt line sent the user to a refresh that stopped on the
    same). The committed list is the way back; the patch file is never deleted."""
    git(one, "init", "-q")
    git(one, "add", "patches", "upstream.toml")
    git(one, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "workspace")
    [entry] = series.load()
    good, listed = entry.path.read_bytes(), (one / "patches" / "series").read_text()
    line = "" if edit == "deleted" else "0001-something-else-entirely.patch\n"
    (one / "patches" / "series").write_text(line)
    with pytest.raises(SeriesError) as e:
        apply.apply()
    assert "delete them" not in str(e.value) and "Drop a patch" in str(e.value)
    ran = follow_hints(one, apply.apply)
    assert len(ran) == 1 and ran[0].startswith("git checkout -- patches/series   #")
    assert (one / "patches" / "series").read_text() == listed
    assert entry.path.read_bytes() == good
