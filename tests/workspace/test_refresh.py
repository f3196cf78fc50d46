"""refresh: byte-stable export of vllm/'s commits, and options that follow their patch."""

import pytest
from conftest import git, make_patch

from vseries import apply, refresh, series
from vseries.errors import SeriesError


def snapshot(root):
    """Every file under patches/ (patches/retired/ too), its bytes and mtime."""
    folder = root / "patches"
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in folder.rglob("*")
        if p.is_file()
    }


def test_refresh_of_unchanged_real_series_changes_no_file(ws):
    apply.apply()
    before = snapshot(ws)
    report = refresh.refresh()
    assert report["changed"] == [] and report["removed"] == []
    assert snapshot(ws) == before


def test_refresh_exports_an_edit_and_keeps_options(tiny):
    vdir = tiny / "vllm"
    p = make_patch(vdir, tiny / "patches", lambda r: (r / "b.py").write_text("x = 2\n"), "[P] b")
    (tiny / "patches" / "series").write_text(f"# my header\n{p.name} contract=tests/c.py\n")
    apply.apply()
    (vdir / "b.py").write_text("x = 3\n")
    git(
        vdir,
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-q",
        "--amend",
        "-a",
        "--no-edit",
    )
    report = refresh.refresh()
    assert report["changed"] == [p.name]
    assert "+x = 3" in p.read_text()
    assert (
        tiny / "patches" / "series"
    ).read_text() == f"# my header\n{p.name} contract=tests/c.py\n"
    apply.apply()  # the refreshed series is what vllm/ holds: nothing to do
    assert series.load()[0].contract == "tests/c.py"


def test_refresh_keeps_the_users_comments_in_the_series(tiny):
    """refresh wrote patches/series from its entries alone, so a comment between entries, a
    line's own comment and the lines after the last entry were lost; they now stay where they
    were, also on a patch whose file name changes with its subject."""
    vdir, folder = tiny / "vllm", tiny / "patches"
    a = make_patch(vdir, folder, lambda r: (r / "b.py").write_text("x = 2\n"), "[P] b")
    git(vdir, "-c", "user.name=t", "-c", "user.email=t@t", "am", "-q", str(a))
    b = make_patch(vdir, folder, lambda r: (r / "a.py").write_text("y\n"), "[P] a")
    git(vdir, "reset", "-q", "--hard", "HEAD~1")
    text = (
        "# my header\n"
        f"{a.name} contract=tests/c.py  # carried until upstream takes it\n"
        "\n"
        "# the next one waits for review\n"
        f"{b.name}\n"
        "# end of the series\n"
    )
    (folder / "series").write_text(text)
    apply.apply()
    git(vdir, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--amend", "-m",
        "[P] a renamed")  # fmt: skip
    report = refresh.refresh()
    renamed = report["added"][0]
    assert renamed != b.name and report["removed"] == [b.name]
    assert (folder / "series").read_text() == text.replace(b.name, renamed)
    assert [e.name for e in series.load()] == [a.name, renamed]


def test_refresh_refuses_uncommitted_work(tiny):
    (tiny / "vllm" / "b.py").write_text("dirty\n")
    with pytest.raises(SeriesError, match="uncommitted changes"):
        refresh.refresh()
    assert (tiny / "vllm" / "b.py").read_text() == "dirty\n"


def test_refresh_refuses_to_drop_a_patch_missing_on_the_branch(tiny):
    """On a branch that lacks a series commit, refresh would delete that patch and its
    options: refused (nothing written) unless --prune."""
    vdir = tiny / "vllm"
    a = make_patch(vdir, tiny / "patches", lambda r: (r / "b.py").write_text("x = 2\n"), "[P] b")
    b = make_patch(vdir, tiny / "patches", lambda r: (r / "a.py").write_text("a\n"), "[P] a")
    b = b.rename(tiny / "patches" / "0002-P-a.patch")
    (tiny / "patches" / "series").write_text(f"{a.name}\n{b.name} contract=tests/c.py\n")
    apply.apply()
    git(vdir, "checkout", "-q", "-B", "other", "HEAD~1")
    before = snapshot(tiny)
    with pytest.raises(SeriesError, match="no commit for 0002-P-a.patch"):
        refresh.refresh()
    assert snapshot(tiny) == before
    report = refresh.refresh(prune=True)
    assert report["removed"] == [b.name] and not b.exists()


def test_refresh_names_the_uncommitted_files(tiny):
    (tiny / "vllm" / "new.py").write_text("new\n")
    with pytest.raises(SeriesError, match="new.py") as e:
        refresh.refresh()
    assert "git -C vllm add -A" in str(e.value)


def test_refresh_refuses_to_overwrite_a_broken_patch_file(tiny):
    """A listed patch file that is not a readable patch may be a hand edit gone wrong:
    refused and kept, with the way to restore or re-export it."""
    vdir = tiny / "vllm"
    p = make_patch(vdir, tiny / "patches", lambda r: (r / "b.py").write_text("x = 2\n"), "[P] b")
    (tiny / "patches" / "series").write_text(p.name + "\n")
    apply.apply()
    refresh.refresh()
    broken = p.read_bytes()[: p.read_bytes().index(b"\n+x = 2")]  # the hunk cut short
    p.write_bytes(broken)
    with pytest.raises(SeriesError, match=f"patches/{p.name} holds no diff") as e:
        refresh.refresh()
    assert p.read_bytes() == broken
    assert f"rm patches/{p.name} && scripts/refresh.sh" in str(e.value)
    p.unlink()  # the hint's second way: refresh exports the listed, missing patch again
    assert refresh.refresh()["added"] == [p.name]


def test_refresh_refuses_a_lost_series(tiny):
    vdir = tiny / "vllm"
    p = make_patch(vdir, tiny / "patches", lambda r: (r / "b.py").write_text("x = 2\n"), "[P] b")
    (tiny / "patches" / "series").write_text(p.name + " contract=tests/c.py\n")
    apply.apply()
    (tiny / "patches" / "series").unlink()
    with pytest.raises(SeriesError, match="patches/series is missing"):
        refresh.refresh()
    assert not (tiny / "patches" / "series").exists()


def test_a_kept_line_s_patch_is_refreshed_with_line(tiny, capsys):
    """A change to a kept line's patch (issue 43, item 5): edit its commit in the line's own
    tree and ``scripts/refresh.sh --line <tag>`` writes lines/<tag>/patches/ (the main line's
    patches/ untouched); the line's hints name its tree and --line."""
    import shutil

    from vseries import cli

    vdir = tiny / "vllm"
    p = make_patch(vdir, tiny / "patches", lambda r: (r / "b.py").write_text("x = 2\n"), "[P] b")
    (tiny / "patches" / "series").write_text(f"{p.name}\n")
    line = tiny / "lines" / "v0.1.0"
    line.mkdir(parents=True)
    shutil.copy(tiny / "upstream.toml", line / "upstream.toml")
    shutil.copytree(tiny / "patches", line / "patches")
    tree = tiny / ".vseries" / "lines" / "v0.1.0" / "vllm"
    git(tiny, "clone", "-q", str(vdir), str(tree))
    main_before = {f.name: f.read_bytes() for f in (tiny / "patches").iterdir()}
    assert cli.main(["apply", "--line", "v0.1.0"]) == 0
    (tree / "b.py").write_text("x = 3\n")
    git(tree, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qa", "--amend", "--no-edit")
    assert cli.main(["refresh", "--line", "v0.1.0"]) == 0
    assert "+x = 3" in (line / "patches" / p.name).read_text()
    assert {f.name: f.read_bytes() for f in (tiny / "patches").iterdir()} == main_before
    (tree / "b.py").write_text("x = 4\n")  # uncommitted: refresh refuses, and says how
    assert cli.main(["refresh", "--line", "v0.1.0"]) == 2
    err = capsys.readouterr().err
    assert "git -C .vseries/lines/v0.1.0/vllm add -A" in err
    assert "scripts/refresh.sh --line v0.1.0" in err and "git -C vllm " not in err
    assert cli.main(["refresh", "--line", "v9.9.9"]) == 2
    assert "no kept line 'v9.9.9' (lines/ holds ['v0.1.0'])" in capsys.readouterr().err
