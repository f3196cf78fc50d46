"""apply on the real v0.21.0 tree with the real series, and on synthetic repos for the edges:
idempotent, atomic, refuses to drop work unless --force (then keeps a backup), and says which
patch, file and hunk failed."""

import pytest
from conftest import git, make_patch

from vseries import apply, patchfile, refresh, series
from vseries.errors import SeriesError


def state(repo):
    return git(repo, "rev-parse", "HEAD"), git(repo, "status", "--porcelain")


def test_real_series_applies_one_commit_per_patch(ws, pin):
    entries = series.load()
    commits = apply.apply()
    vdir = ws / "vllm"
    assert len(commits) == len(entries)
    assert git(vdir, "rev-list", "--count", f"{pin.commit}..HEAD") == str(len(entries))
    assert git(vdir, "symbolic-ref", "--short", "HEAD") == apply.BRANCH
    subjects = git(vdir, "log", "--reverse", "--format=%s", f"{pin.commit}..HEAD").splitlines()
    assert subjects == [patchfile.subject(e.path) for e in entries]  # [Perf][Kernel] tags kept
    assert git(vdir, "status", "--porcelain") == ""


def test_second_apply_changes_nothing(ws, capsys):
    apply.apply()
    before = state(ws / "vllm")
    apply.apply()
    assert state(ws / "vllm") == before
    assert "nothing changed" in capsys.readouterr().out


def test_reworded_patch_is_applied_again(ws):
    """A pulled patch whose message changed (same diff) reaches vllm/, so a later refresh
    does not write the old message back."""
    apply.apply()
    entry = series.load()[-1]
    text = entry.path.read_text()
    entry.path.write_text(text.replace("\n\n", "\n\nReworded by upstream review.\n\n", 1))
    apply.apply()
    assert "Reworded by upstream review." in git(ws / "vllm", "log", "-1", "--format=%B")


def test_edited_patch_file_gets_the_force_hint_not_refresh(ws):
    """Editing a patch file makes its vllm/ commit foreign; the hint must not be refresh,
    which would overwrite the edit."""
    apply.apply()
    entry = series.load()[-1]
    lines = entry.path.read_text().splitlines(keepends=True)
    # an added line of the diff (a line of the commit message may start with "+" too)
    diff = next(i for i, ln in enumerate(lines) if ln.startswith("diff --git"))
    i = next(
        i
        for i, ln in enumerate(lines)
        if i > diff and ln.startswith("+") and not ln.startswith("+++")
    )
    lines[i] = lines[i].rstrip("\n") + "  # edited by hand\n"  # same hunk sizes, new content
    edited = "".join(lines)
    entry.path.write_text(edited)
    with pytest.raises(SeriesError) as e:
        apply.apply()
    assert f"patches/{entry.name} changed since vllm/ was applied" in str(e.value)
    assert "apply.sh --force" in str(e.value)
    assert entry.path.read_text() == edited


def test_same_series_gives_same_commit_ids(ws, tmp_path):
    first = apply.apply()
    git(ws / "vllm", "checkout", "-q", "--detach", "HEAD~" + str(len(first)))
    git(ws / "vllm", "branch", "-q", "-D", apply.BRANCH)
    assert apply.apply() == first


def test_dirty_tree_is_refused_and_kept(ws):
    f = ws / "vllm" / "vllm" / "envs.py"
    f.write_text(f.read_text() + "# my local edit\n")
    with pytest.raises(SeriesError, match="uncommitted: .*envs.py") as e:
        apply.apply()
    assert "--force" in str(e.value)
    assert f.read_text().endswith("# my local edit\n")


def test_foreign_commit_is_refused_then_backed_up_with_force(ws):
    apply.apply()
    vdir = ws / "vllm"
    (vdir / "mine.txt").write_text("mine\n")
    git(vdir, "add", "mine.txt")
    git(vdir, "-c", "user.name=u", "-c", "user.email=u@u", "commit", "-qm", "my experiment")
    mine = git(vdir, "rev-parse", "HEAD")
    with pytest.raises(SeriesError, match="commit not in the series: .* my experiment"):
        apply.apply()
    assert git(vdir, "rev-parse", "HEAD") == mine
    apply.apply(force=True)
    backups = git(vdir, "for-each-ref", "--format=%(objectname)", "refs/vseries/backup/")
    assert mine in backups.split()
    assert not (vdir / "mine.txt").exists()


def test_force_stashes_uncommitted_work(ws):
    f = ws / "vllm" / "vllm" / "envs.py"
    f.write_text(f.read_text() + "# keep me\n")
    apply.apply(force=True)
    assert "keep me" in git(ws / "vllm", "stash", "show", "-p", "stash@{0}")


def test_failing_patch_rolls_back_and_names_file_and_hunk(tiny):
    vdir = tiny / "vllm"
    good = make_patch(
        vdir, tiny / "patches", lambda r: (r / "b.py").write_text("x = 2\n"), "[Perf] good"
    )
    # A patch made against a different a.py: its context is not in the pin's a.py.
    git(vdir, "checkout", "-q", "-b", "elsewhere")
    (vdir / "a.py").write_text("other\n" * 40)
    git(vdir, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "elsewhere")
    bad = make_patch(
        vdir,
        tiny / "patches",
        lambda r: (r / "a.py").write_text("other\n" * 20 + "changed\n" + "other\n" * 19),
        "[Perf] stale",
    )
    git(vdir, "checkout", "-q", "--detach", "HEAD~1")
    git(vdir, "branch", "-q", "-D", "elsewhere")
    git(vdir, "reflog", "expire", "--expire=now", "--all")
    git(vdir, "gc", "-q", "--prune=now")  # the stale blob is gone: no 3-way fallback
    bad = bad.rename(tiny / "patches" / "0002-stale.patch")
    (tiny / "patches" / "series").write_text(f"{good.name}\n{bad.name}\n")
    before = state(vdir)
    with pytest.raises(SeriesError) as e:
        apply.apply()
    msg = str(e.value)
    assert "0002-stale.patch" in msg and "a.py" in msg and "@@ -" in msg
    assert "--keep-conflict" in msg
    assert state(vdir) == before
    assert not (vdir / ".git" / "rebase-apply").exists()


def test_keep_conflict_leaves_the_am_open(tiny):
    vdir = tiny / "vllm"
    p = make_patch(vdir, tiny / "patches", lambda r: (r / "b.py").write_text("x = 3\n"), "[P] b")
    (vdir / "b.py").write_text("x = 9\n")  # the pin itself now differs: commit it as the pin
    git(vdir, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "moved pin")
    pin_text = (tiny / "upstream.toml").read_text()
    old = pin_text.split('commit = "')[1].split('"')[0]
    (tiny / "upstream.toml").write_text(pin_text.replace(old, git(vdir, "rev-parse", "HEAD")))
    (tiny / "patches" / "series").write_text(p.name + "\n")
    with pytest.raises(SeriesError, match="am session is left open"):
        apply.apply(keep_conflict=True)
    assert (vdir / ".git" / "rebase-apply").exists()
    with pytest.raises(SeriesError, match="middle of a git am"):
        apply.apply()


def test_keep_conflict_queues_the_rest_and_refresh_keeps_every_patch(tiny):
    """After fixing the conflict, am --continue applies the later patches too, and refresh
    refuses the detached HEAD instead of exporting (and deleting) fewer patches."""
    vdir = tiny / "vllm"
    p1 = make_patch(vdir, tiny / "patches", lambda r: (r / "b.py").write_text("x = 3\n"), "[P] b")
    p2 = make_patch(vdir, tiny / "patches", lambda r: (r / "a.py").write_text("a = 1\n"), "[P] a")
    (vdir / "b.py").write_text("x = 9\n")  # the pin itself now differs: commit it as the pin
    git(vdir, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "moved pin")
    pin_text = (tiny / "upstream.toml").read_text()
    old = pin_text.split('commit = "')[1].split('"')[0]
    new_pin = git(vdir, "rev-parse", "HEAD")
    (tiny / "upstream.toml").write_text(pin_text.replace(old, new_pin))
    (tiny / "patches" / "series").write_text(f"{p1.name}\n{p2.name}\n")
    with pytest.raises(SeriesError, match="and the 1 patches after it") as e:
        apply.apply(keep_conflict=True)
    assert "checkout -B series" in str(e.value)
    (vdir / "b.py").write_text("x = 3\n")
    git(vdir, "add", "b.py")
    git(vdir, "-c", "user.name=t", "-c", "user.email=t@t", "am", "--continue")
    assert git(vdir, "rev-list", "--count", f"{new_pin}..HEAD") == "2"
    with pytest.raises(SeriesError, match="detached"):
        refresh.refresh()
    assert (tiny / "patches" / p2.name).exists()
    git(vdir, "checkout", "-q", "-B", "series")
    refresh.refresh()
    assert [patchfile.subject(e.path) for e in series.load()] == ["[P] b", "[P] a"]


def test_failed_force_apply_leaves_no_backup_refs(tiny):
    """--force backs up before applying; when the series then fails and vllm/ is rolled
    back, those refs are dropped instead of piling up on every retry."""
    vdir = tiny / "vllm"
    p = make_patch(vdir, tiny / "patches", lambda r: (r / "b.py").write_text("x = 3\n"), "[P] b")
    (tiny / "patches" / "series").write_text(p.name + "\n")
    apply.apply()
    (vdir / "mine.txt").write_text("mine\n")
    git(vdir, "add", "mine.txt")
    git(vdir, "-c", "user.name=u", "-c", "user.email=u@u", "commit", "-qm", "mine")
    mine = git(vdir, "rev-parse", "HEAD")
    p.write_text(p.read_text().replace("-x = 1", "-x = 7"))  # no longer applies
    with pytest.raises(SeriesError, match="does not apply"):
        apply.apply(force=True)
    assert git(vdir, "rev-parse", "HEAD") == mine
    assert git(vdir, "for-each-ref", "refs/vseries/backup/") == ""


def test_missing_file_and_not_a_patch_are_refused(tiny):
    (tiny / "patches" / "series").write_text("0001-gone.patch\n")
    with pytest.raises(SeriesError, match="does not exist"):
        apply.apply()
    (tiny / "patches" / "0001-gone.patch").write_text("just some notes\n")
    with pytest.raises(SeriesError, match="not a patch email"):
        apply.apply()
    (tiny / "patches" / "0001-gone.patch").write_text("From: a\nSubject: x\n\nno diff here\n")
    with pytest.raises(SeriesError, match="holds no diff"):
        apply.apply()


def test_unlisted_patch_file_is_refused(tiny):
    (tiny / "patches" / "0009-stray.patch").write_text("x")
    with pytest.raises(SeriesError, match="does not list"):
        apply.apply()


def test_crlf_patch_applies(tiny):
    vdir = tiny / "vllm"
    p = make_patch(vdir, tiny / "patches", lambda r: (r / "b.py").write_text("x = 5\n"), "[P] b")
    p.write_bytes(p.read_bytes().replace(b"\n", b"\r\n"))
    (tiny / "patches" / "series").write_text(p.name + "\n")
    apply.apply()
    assert (vdir / "b.py").read_bytes() == b"x = 5\n"


def test_patch_follows_a_renamed_file(tiny, capsys):
    vdir = tiny / "vllm"
    p = make_patch(
        vdir,
        tiny / "patches",
        lambda r: (r / "a.py").write_text(
            (r / "a.py").read_text().replace("line 20\n", "line twenty\n")
        ),
        "[P] a",
    )
    git(vdir, "mv", "a.py", "moved.py")
    git(vdir, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "upstream rename")
    pin_text = (tiny / "upstream.toml").read_text()
    old = pin_text.split('commit = "')[1].split('"')[0]
    (tiny / "upstream.toml").write_text(pin_text.replace(old, git(vdir, "rev-parse", "HEAD")))
    (tiny / "patches" / "series").write_text(p.name + "\n")
    apply.apply()
    assert "line twenty" in (vdir / "moved.py").read_text()
    assert "git am -3 changed moved.py" in capsys.readouterr().out  # followed, and said


def test_patch_naming_a_missing_file_is_refused_not_merged_elsewhere(tiny):
    """A patch whose diff names a file vllm/ does not have, with the real file's blob ids:
    ``git am -3`` would fall back to a 3-way merge and change the real file (b.py) without a
    word. apply compares the files the commit touched with the files the patch names and
    refuses, with vllm/ back as it was (issue 33, item 4)."""
    vdir, pdir = tiny / "vllm", tiny / "patches"
    p = make_patch(vdir, pdir, lambda r: (r / "b.py").write_text("x = 2\n"), "[P] b two")
    p.write_text(p.read_text().replace("a/b.py", "a/nowhere.py").replace("b/b.py", "b/nowhere.py"))
    (pdir / "series").write_text(p.name + "\n")
    head = git(vdir, "rev-parse", "HEAD")
    with pytest.raises(SeriesError) as e:
        apply.apply(force=True)
    msg = str(e.value)
    assert p.name in msg and "b.py" in msg and "nowhere.py" in msg and "\n  next: " in msg
    assert (vdir / "b.py").read_text() == "x = 1\n"
    assert git(vdir, "rev-parse", "HEAD") == head


def test_apply_and_rebase_share_the_work_at_risk_check(tiny):
    """One check (am.reset_would_lose) of what a reset of vllm/ to the pin would lose: apply
    without --force and rebase's preflight both refuse a commit outside the series and name
    it; a HEAD that does not descend from the pin is named as such."""
    from vseries import am
    from vseries import pin as pinmod
    from vseries.rebase import engine
    from vseries.workspace import Workspace

    vdir = tiny / "vllm"
    ws = Workspace.current()
    pin, entries = pinmod.load(ws.pin_file), series.load(ws)
    assert am.reset_would_lose(vdir, pin.commit, []) == []
    (vdir / "mine.txt").write_text("mine\n")
    git(vdir, "add", "mine.txt")
    git(vdir, "-c", "user.name=u", "-c", "user.email=u@u", "commit", "-qm", "my experiment")
    lost = am.reset_would_lose(vdir, pin.commit, [])
    assert len(lost) == 1 and lost[0].endswith(" my experiment")
    with pytest.raises(SeriesError, match="commit not in the series: .* my experiment"):
        apply.apply()
    with pytest.raises(SeriesError, match="(?s)holds commits that patches/ does not.*experiment"):
        engine.preflight(ws, pin, entries)
    git(vdir, "checkout", "-q", "--orphan", "elsewhere")
    git(vdir, "-c", "user.name=u", "-c", "user.email=u@u", "commit", "-qm", "unrelated")
    head = git(vdir, "rev-parse", "HEAD")
    assert f"{head[:12]} (not on the pin {pin.commit[:12]})" in am.reset_would_lose(
        vdir, pin.commit, []
    )


@pytest.mark.parametrize("force", [False, True])
def test_interrupted_apply_puts_vllm_back(tiny, monkeypatch, force):
    """Ctrl-C while a patch is being applied: the am is aborted and vllm/ is back on its HEAD
    with its uncommitted work (--force: popped from the stash), not half-applied."""
    vdir = tiny / "vllm"
    p1 = make_patch(vdir, tiny / "patches", lambda r: (r / "b.py").write_text("x = 3\n"), "[P] b")
    p2 = make_patch(vdir, tiny / "patches", lambda r: (r / "a.py").write_text("a = 1\n"), "[P] a")
    (tiny / "patches" / "series").write_text(f"{p1.name}\n{p2.name}\n")
    if force:
        (vdir / "b.py").write_text("x = 9  # mine\n")
    before = state(vdir)
    calls = []

    def am_then_interrupt(*args, **kwargs):
        calls.append(args)
        out = apply_am(*args, **kwargs)
        if len(calls) == 2:  # the second patch is in: the user presses Ctrl-C
            raise KeyboardInterrupt
        return out

    apply_am = apply.am
    monkeypatch.setattr(apply, "am", am_then_interrupt)
    with pytest.raises(SeriesError, match="apply interrupted; vllm/ is back as it was") as e:
        apply.apply(force=force)
    assert str(e.value).endswith("next: scripts/apply.sh" + (" --force" if force else ""))
    assert state(vdir) == before
    assert not (vdir / ".git" / "rebase-apply").exists()
    monkeypatch.setattr(apply, "am", apply_am)
    if not force:
        assert len(apply.apply()) == 2
