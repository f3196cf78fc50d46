"""The next: lines lead somewhere: each scenario runs the printed commands as a user would
(conftest.follow_hints) until the verb succeeds, and checks that nothing was lost on the way."""

import pytest
from conftest import follow_hints, git, make_patch

from vseries import apply, patchfile, refresh, series
from vseries import git as vgit


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
