"""No verb is fooled by a renamed pre-image (issue 43, item 4, and its siblings).

``git am -3`` builds a fake ancestor from the blob ids a patch names; when the path it names
is missing, its merge-ort detects a rename to any file holding that blob and puts the change
there. apply refuses a patch that names a file vllm/ never had; the rebase (on the old pin
and on the new release), a port (``--continue --port``) and prs (one patch alone on the base)
must not carry such a change into another file either, nor call it "renamed upstream" where
upstream's own diff between the releases shows no such rename.
"""

import pytest
from conftest import git, make_patch, pin_with
from test_rebase import FULL, A, cli, publish, report_of, rows_of, snapshot
from test_rebase_content import offline

from vseries import apply, prs, series
from vseries import pin as pinmod
from vseries.errors import SeriesError

__all__ = ["offline"]  # the fixture, used by name


def ghost_patch(ws, name: str = "ghost.py") -> str:
    """A patch that modifies ``name``, a file the pin lacks, whose pre-image blob is b.py's
    (``x = 1``); listed in the series, not applied. Returns its file name."""
    vdir = ws / "vllm"
    pinned = git(vdir, "rev-parse", "HEAD")
    (vdir / name).write_text((vdir / "b.py").read_text())
    git(vdir, "add", name)
    git(vdir, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "scratch")
    p = make_patch(
        vdir, ws / "patches", lambda r: (r / name).write_text("x = 2\n"), f"[P] {name} two"
    )
    git(vdir, "checkout", "-q", "--detach", pinned)
    (ws / "patches" / "series").write_text(p.name + "\n")
    return p.name


def old_three(ws):
    """A one-patch series, applied, that changes the pin's old.py (y = 1 -> y = 3)."""
    p = make_patch(
        ws / "vllm",
        ws / "patches",
        lambda r: (r / "old.py").write_text("y = 3\nz = 2\n"),
        "[P] old",
    )
    (ws / "patches" / "series").write_text(p.name + "\n")
    apply.apply()
    return p


def test_apply_refuses_a_patch_naming_a_file_vllm_never_had(offline):
    name = ghost_patch(offline)
    with pytest.raises(SeriesError, match="names files that vllm/ never had"):
        apply.apply()
    assert (offline / "vllm" / "b.py").read_text() == "x = 1\n" and name


@pytest.mark.parametrize("check", [False, True], ids=["rebase", "--check"])
def test_rebase_refuses_what_apply_refuses(offline, index, check):
    """Item 4: neither release has ghost.py; the rebase used to carry the patch "with 3-way
    merge (ghost.py -> b.py (file renamed upstream))" and rewrite b.py, exit 0. Now it stops
    before anything moves, as apply does, and says why."""
    name = ghost_patch(offline)
    publish(index, "0.99.0", {"a.py": A, "b.py": "x = 1\n"})
    before = snapshot(offline)
    args = ["--check"] if check else []
    with pytest.raises(SeriesError) as e:
        cli(*args, "v0.99.0", "--commit", FULL)
    msg = str(e.value)
    assert f"{name} does not apply on the current pin" in msg
    assert "names ghost.py but git am -3 changed b.py" in msg and "next: " in msg
    assert snapshot(offline) == before
    assert not (offline / ".vseries" / "rebase" / "state.json").exists()


def test_replay_into_a_file_upstream_did_not_rename_stops_as_a_conflict(offline, index):
    """Sibling on the new release: the pin has old.py and c.py with the same text; the patch
    changes old.py; upstream deleted old.py (no rename). git am -3 would put the change into
    c.py and call it renamed; the rebase stops on a conflict instead (the am session open on
    the patch, applied without the 3-way merge), and --skip goes on."""
    same = "y = 1\nz = 2\n"
    pin_with(offline, {"old.py": same, "c.py": same})
    p = old_three(offline)
    publish(index, "0.99.0", {"a.py": A, "b.py": "x = 1\n", "c.py": same})
    with pytest.raises(SeriesError) as e:
        cli("v0.99.0", "--commit", FULL)
    msg = str(e.value)
    assert f"patch {p.name} conflicts on v0.99.0" in msg
    assert "old.py" in msg and "c.py" in msg and "upstream did not rename old.py" in msg
    assert (offline / "vllm" / "c.py").read_text() == same
    assert cli("--skip") == 0
    assert list(rows_of(report_of(offline)).values()) == ["dropped by --skip"]
    assert (offline / "vllm" / "c.py").read_text() == same


def test_a_hand_fix_into_another_file_is_not_called_an_upstream_rename(offline, index):
    """From that stop, the person puts the change into c.py by hand and continues: carried,
    and the report says where the change went without claiming upstream renamed old.py."""
    same = "y = 1\nz = 2\n"
    pin_with(offline, {"old.py": same, "c.py": same})
    old_three(offline)
    publish(index, "0.99.0", {"a.py": A, "b.py": "x = 1\n", "c.py": same})
    with pytest.raises(SeriesError, match="conflicts"):
        cli("v0.99.0", "--commit", FULL)
    vdir = offline / "vllm"
    (vdir / "c.py").write_text("y = 3\nz = 2\n")
    git(vdir, "add", "c.py")
    assert cli("--continue") == 0
    rep = report_of(offline)
    assert list(rows_of(rep).values()) == ["carried, resolved by hand"]
    assert "renamed upstream" not in rep
    assert "old.py -> c.py (the change is there now; upstream did not rename old.py" in rep


def test_a_file_upstream_did_rename_is_still_followed(offline, index):
    """The same shape where upstream did rename old.py to c.py: carried into c.py, said."""
    pin_with(offline, {"old.py": "y = 1\nz = 2\n"})
    old_three(offline)
    publish(index, "0.99.0", {"a.py": A, "b.py": "x = 1\n", "c.py": "y = 1\nz = 2\n"})
    assert cli("v0.99.0", "--commit", FULL) == 0
    assert "old.py -> c.py (file renamed upstream)" in report_of(offline)
    assert (offline / "vllm" / "c.py").read_text() == "y = 3\nz = 2\n"


def test_a_port_naming_a_file_the_new_release_lacks_is_refused(offline, index, tmp_path):
    """Sibling: --continue --port FILE, where FILE names ghost.py (whose pre-image is b.py's):
    refused, the rebase still stopped at the conflict, b.py untouched."""
    series_text = make_patch(
        offline / "vllm",
        offline / "patches",
        lambda r: (r / "a.py").write_text(A.replace("line 30\n", "thirty\n")),
        "[P] thirty",
    ).name
    (offline / "patches" / "series").write_text(series_text + "\n")
    apply.apply()
    publish(index, "0.99.0", {"a.py": A.replace("line 30\n", "THIRTY\n"), "b.py": "x = 1\n"})
    with pytest.raises(SeriesError, match="conflicts"):
        cli("v0.99.0", "--commit", FULL)
    vdir = offline / "vllm"
    head = git(vdir, "rev-parse", "HEAD")
    port_dir = tmp_path / "port"
    port_dir.mkdir()
    git(port_dir, "init", "-q")
    (port_dir / "ghost.py").write_text("x = 1\n")
    git(port_dir, "add", ".")
    git(port_dir, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    port = make_patch(
        port_dir, tmp_path / "out", lambda r: (r / "ghost.py").write_text("x = 9\n"), "[P] port"
    )
    with pytest.raises(SeriesError, match="names files that v0.99.0 does not have"):
        cli("--continue", "--port", str(port))
    assert (vdir / "b.py").read_text() == "x = 1\n"
    assert git(vdir, "rev-parse", "HEAD") == head
    assert pinmod.load().tag != "v0.99.0"
    assert cli("--abort") == 0


def test_prs_does_not_carry_a_patch_into_another_file(offline):
    """Sibling: prs applies each patch alone on the base with git am -3; a patch naming a file
    the base never had is a problem of that PR, not a branch that changes b.py."""
    name = ghost_patch(offline)
    [pr] = prs.prs(hooks=False, tests=False)
    assert not pr.ok and any("names ghost.py but git am -3 changed b.py" in p for p in pr.problems)
    assert git(offline / "vllm", "branch", "--list", pr.branch) == ""
    assert [e.name for e in series.load()] == [name]
