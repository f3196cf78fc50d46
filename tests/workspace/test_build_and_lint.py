"""build refuses the precompiled path for a series that changes csrc/; the series lint."""

import argparse
import shutil

import pytest
from conftest import git, make_patch

from vseries import build, lint_series, series
from vseries.errors import SeriesError


def test_series_touching_csrc_is_refused_with_the_source_recipe(tiny, monkeypatch):
    vdir = tiny / "vllm"

    def edit(r):
        (r / "csrc").mkdir()
        (r / "csrc" / "k.cu").write_text("// kernel\n")

    p = make_patch(vdir, tiny / "patches", edit, "[Kernel] cuda")
    (tiny / "patches" / "series").write_text(p.name + "\n")
    assert build.compiled_paths(series.load()) == [f"{p.name}: csrc/k.cu"]
    monkeypatch.setattr(build.fetch, "fetch", lambda *a: pytest.fail("must not download"))
    with pytest.raises(SeriesError, match="changes compiled code") as e:
        build.build()
    assert "TORCH_CUDA_ARCH_LIST=9.0a" in str(e.value)


def test_python_only_series_is_not_compiled(tiny):
    p = make_patch(
        tiny / "vllm", tiny / "patches", lambda r: (r / "b.py").write_text("x=2\n"), "[P] b"
    )
    (tiny / "patches" / "series").write_text(p.name + "\n")
    assert build.compiled_paths(series.load()) == []


def test_lint_flags_missing_signoff_and_contract(tiny):
    vdir = tiny / "vllm"
    p = make_patch(vdir, tiny / "patches", lambda r: (r / "b.py").write_text("x=2\n"), "[P] b")
    p.write_text(p.read_text().replace("Signed-off-by: t <t@t>\n", ""))
    (tiny / "patches" / "series").write_text(p.name + "\n")
    found = lint_series.problems()
    assert any("no Signed-off-by" in f for f in found)
    assert any("no contract=" in f for f in found)
    (tiny / "tests").mkdir()
    (tiny / "tests" / "c.py").write_text("")
    (tiny / "patches" / "series").write_text(p.name + " contract=tests/c.py\n")
    assert [f for f in lint_series.problems() if "contract" in f] == []


def test_lint_flags_a_conflict_leftover_in_a_patch(tiny):
    """A patch file that adds a .rej (committed by hand, or refreshed before refresh refused
    it) is named by the series check that pre-commit and CI run."""

    def edit(r):
        (r / "b.py").write_text("x=2\n")
        (r / "b.py.rej").write_text("@@ -1 +1 @@\n")

    p = make_patch(tiny / "vllm", tiny / "patches", edit, "[P] b")
    (tiny / "patches" / "series").write_text(p.name + "\n")
    assert [f for f in lint_series.problems() if "leftover" in f] == [
        f"{p.name}: adds b.py.rej, a resolved conflict's leftover: remove it from the commit "
        "in vllm/, then scripts/refresh.sh (refresh names the commands)"
    ]


def test_lint_refuses_a_gitlink_off_the_pin(tiny):
    """``git commit -a`` at the workspace's root records vllm/ at the series' HEAD; the series
    check (a pre-commit hook CI runs) names it and the command that puts the pin back."""
    from vseries import pin

    want = pin.load(tiny / "upstream.toml").commit
    git(tiny, "init", "-q")
    git(tiny, "update-index", "--add", "--cacheinfo", f"160000,{want},vllm")
    assert lint_series.problems() == []
    other = "1" * 40
    git(tiny, "update-index", "--cacheinfo", f"160000,{other},vllm")
    [found] = lint_series.problems()
    assert "111111111111" in found and want[:12] in found
    assert f"next: git update-index --cacheinfo 160000,{want},vllm" in found
    git(tiny, "update-index", "--cacheinfo", f"160000,{want},vllm")
    assert lint_series.problems() == []


def test_summary_fails_when_vllm_does_not_import(tiny, tmp_path, monkeypatch, capsys):
    """`scripts/build.sh --summary-only` exited 0 with "import failed" in its vllm row; a
    vllm that does not import (here: a broken package first on the path) now fails the
    verb, with the command that shows the whole traceback."""
    broken = tmp_path / "site" / "vllm"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('half-installed vllm')\n")
    monkeypatch.setenv("PYTHONPATH", str(broken.parent))
    args = argparse.Namespace(line_requirements=False, summary_only=True)
    with pytest.raises(SeriesError, match="vllm does not import") as e:
        build.main(args)
    out = capsys.readouterr().out
    assert "import failed: ImportError: half-installed vllm" in out
    assert "-c 'import vllm'" in str(e.value) and "build.sh --reinstall" in str(e.value)


def test_the_summary_ends_with_each_kept_lines_tree(tiny, capsys):
    """scripts/setup.sh sets up every kept line but its summary named the main line alone (a
    newcomer's trial); each kept line now gets a row: its pin, its tree and the patches on it,
    or the command that sets it up."""
    from vseries.workspace import Workspace

    line = tiny / "lines" / "v0.9.0"
    (line / "patches").mkdir(parents=True)
    shutil.copy(tiny / "upstream.toml", line / "upstream.toml")
    build.kept_lines(Workspace.current())
    assert "line     v0.9.0 (kept; pin " in (out := capsys.readouterr().out)
    assert out.rstrip().endswith("not set up: scripts/setup.sh")
    tree = tiny / ".vseries" / "lines" / "v0.9.0" / "vllm"
    git(tiny, "clone", "-q", str(tiny / "vllm"), str(tree))
    (tree / "b.py").write_text("x = 2\n")
    git(tree, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "a patch")
    build.kept_lines(Workspace.current())
    assert (
        capsys.readouterr().out.rstrip().endswith(".vseries/lines/v0.9.0/vllm, 1 patches applied")
    )
