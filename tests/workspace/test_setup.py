"""scripts/setup.sh's output (issue 40, item 4): pip's warnings about index folders of the
host's pip configuration that do not exist (204 lines in a fresh set-up here) stand as one
line, every other line of pip kept; and a run ends with its summary (before, a second run
ended on the kept line's apply, and a first on pip's warnings)."""

import subprocess
import sys

import pytest
from conftest import ROOT, script_env

from vseries import am, git, host, series
from vseries import pin as pinmod
from vseries.apply import holds_series
from vseries.workspace import Workspace

LOCATION = "is ignored: it is neither a file nor a directory."


def filtered(said: str, note) -> list[str]:
    """What set-up prints of ``said`` (pip's and setuptools' output): the filter, then its
    closing lines (scripts/_pip_locations.sh)."""
    return subprocess.run(
        ["bash", "-c", '. scripts/_pip_locations.sh && pip_locations "$1"; '
         'pip_locations_said "$1"', "-", str(note)],
        cwd=ROOT,
        input=said,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()  # fmt: skip


def test_pip_location_warnings_stand_as_one_line_and_errors_stay(tmp_path):
    # real pip, its configuration ignored, with two index folders that do not exist
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--isolated", "--no-deps", "-d", tmp_path,
         "--index-url", "file:///nonexistent/a/simple",
         "--extra-index-url", "file:///nonexistent/b/simple", "tqdm"],
        capture_output=True,
        text=True,
    )  # fmt: skip
    said = pip.stderr.splitlines()
    warned = [x for x in said if x.startswith("WARNING: Location ") and x.endswith(LOCATION)]
    assert pip.returncode == 1 and len(warned) >= 2, pip.stderr
    out = filtered(pip.stderr, tmp_path / "note")
    assert out[:-1] == [x for x in said if x not in warned]  # the errors among them
    assert any(x.startswith("ERROR: ") for x in out[:-1]), out
    assert out[-1].startswith(f"setup: {len(warned)} pip warnings left out: index locations")
    assert "'file:///nonexistent/a/simple/" in out[-1], out[-1]


def test_setuptools_warnings_pass_and_are_named_expected(tmp_path):
    """The editable installs' BuildBackendWarning lines come on stderr, so a newcomer saw them
    under a later step and could not tell them from a fault: they pass as they came, and one
    line at the end counts them and says they are expected."""
    lines = [
        "  /x/setuptools_scm/version_inference.py:236: BuildBackendWarning: version of None"
        " already set",
        '    warnings.warn(f"version of {self.dist_name} already set")',
        "  /x/setuptools/command/editable_wheel.py:352: BuildBackendWarning: Editable"
        " installation.",
    ]
    out = filtered("\n".join(lines) + "\n", tmp_path / "note")
    assert out[:-1] == lines
    assert out[-1].startswith("setup: the 2 setuptools BuildBackendWarning(s) above"), out[-1]
    assert "expected" in out[-1] and "CONTRIBUTING.md" in out[-1], out[-1]


def set_up(ws: Workspace) -> bool:
    """True when ws's tree holds its series, clean, on branch series: what setup.sh leaves."""
    if not git.is_repo(ws.vllm) or git.head_branch(ws.vllm) != am.BRANCH or git.dirty(ws.vllm):
        return False
    entries = series.load(ws)
    pinned = pinmod.load(ws.pin_file).commit
    return holds_series(ws.vllm, pinned, am.wanted_ids(ws.vllm, entries), entries)


@pytest.mark.slow
def test_a_second_run_changes_nothing_and_ends_with_the_summary(tmp_path):
    """scripts/setup.sh once more in this workspace, where it has run (CI: just before the
    tests), with this interpreter's venv (its requirements stamp matched, so nothing is
    installed): every step does nothing, and the output ends with the summary. Skipped
    where the workspace is not as setup.sh leaves it (work in progress in a tree): the run
    would change it."""
    ws = Workspace(ROOT)
    trees = [ws, *ws.lines()]
    if not all(set_up(w) for w in trees):
        pytest.skip("a tree of this workspace is not as scripts/setup.sh leaves it")
    ok, where = host.probe("import importlib.util as u; print(u.find_spec('vllm').origin)")
    if not ok or not where.startswith(str(ws.vllm)):
        pytest.skip(f"this venv's vllm is not installed from {ws.vllm} ({where})")
    heads = [git.rev(w.vllm, "HEAD") for w in trees]
    p = subprocess.run(
        ["bash", "scripts/setup.sh"],
        cwd=ROOT,
        env=script_env(ROOT, tmp_path / "venv"),
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert [git.rev(w.vllm, "HEAD") for w in trees] == heads
    assert all(set_up(w) for w in trees)
    assert "nothing to do" in p.stdout and "installing" not in p.stdout, p.stdout
    tail = p.stdout.rstrip("\n").split("\nsummary\n")[-1].splitlines()
    n = len(series.load(ws))
    assert [x.split()[0] for x in tail[:7]] == [
        "pin", "source", "branch", "vllm", "kernels", "python", "patches"
    ], p.stdout[-3000:]  # fmt: skip
    assert tail[6] == f"  patches  {n} applied", p.stdout[-3000:]
    # then a row per kept line (each set up: checked by set_up above)
    kept = [x.split()[:2] for x in tail[7 + n :]]
    assert kept == [["line", w.line] for w in ws.lines()], p.stdout[-3000:]


@pytest.mark.parametrize(("free_mib", "says"), [(10, "little disk left"), (100_000, "network")])
def test_a_failed_pip_names_a_nearly_full_disk_before_the_network(monkeypatch, free_mib, says):
    """Set-up on a full disk failed with "No space left on device" and was told to check the
    network: where pip writes has less than 1 GiB free, the hint names the disk instead."""
    import collections
    import shutil

    from vseries import linesite
    from vseries.errors import SeriesError

    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(0, 0, free_mib << 20))
    # real pip, failing at once: no index, a package that does not exist
    with pytest.raises(SeriesError) as e:
        linesite.pip("install", "-q", "--isolated", "--no-index", "vseries-no-such-package")
    assert e.value.what.startswith("pip failed: pip install") and says in e.value.fix
    assert ("MiB free" in e.value.fix) == (free_mib < 1024)


@pytest.mark.parametrize(("free_mib", "noted"), [(900, True), (7000, False)])
def test_a_test_run_says_first_when_the_temporary_folder_is_nearly_full(
    monkeypatch, free_mib, noted
):
    """A newcomer's first run failed with 132 'No space left on device' errors and a FAILED
    line that did not say so: below what a run writes, scripts/test.sh says it first."""
    import collections
    import shutil
    import tempfile

    from vseries import testrun

    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(0, 0, free_mib << 20))
    note = testrun.disk_note(testrun.TMP_NEED)
    assert (note is not None) == noted
    if noted:
        assert tempfile.gettempdir() in note and f"{free_mib} MiB free" in note
        assert "No space left on device" in note and "TMPDIR" in note
