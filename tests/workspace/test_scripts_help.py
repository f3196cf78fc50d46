"""``scripts/<each>.sh --help`` prints its usage without creating or installing anything
(issue 33, item 5): in a fresh copy of the workspace tool without .venv, each script exits 0,
prints a usage, and the copy holds the same files as before (no .venv, no __pycache__). And a
bad option is refused the same way, before anything is created or installed (issue 40)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

SCRIPTS = sorted(p.name for p in (ROOT / "scripts").glob("*.sh") if not p.name.startswith("_"))


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fresh") / "ws"
    root.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for d in ("scripts", "vseries", "requirements"):
        shutil.copytree(ROOT / d, root / d, ignore=skip)
    shutil.copy(ROOT / "pyproject.toml", root)
    return root


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def run_fresh(fresh: Path, script: str, *args: str) -> subprocess.CompletedProcess:
    """scripts/<script> in the fresh copy as a user without an active venv runs it."""
    venv_bin = str(Path(os.environ.get("VIRTUAL_ENV", "/nonexistent")) / "bin")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "VSERIES_VENV")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != venv_bin)
    return subprocess.run(
        ["bash", f"scripts/{script}", *args], cwd=fresh, env=env, capture_output=True, text=True
    )


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_creates_and_installs_nothing(fresh, script):
    before = files(fresh)
    r = run_fresh(fresh, script, "--help")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "usage" in r.stdout.lower(), r.stdout
    assert f"scripts/{script}" in r.stdout, r.stdout  # the verb's own usage (issue 35)
    assert not (fresh / ".venv").exists()
    assert files(fresh) == before


def test_every_verb_s_help_needs_only_the_standard_library(tmp_path):
    """``python -m vseries <verb> --help`` on a Python with nothing but its standard library
    (``-S``: no site-packages, so no tqdm, requests or packaging; issue 43, item 6): each
    verb prints its own help, not a ModuleNotFoundError."""
    from vseries import cli

    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    verbs = [name for name in cli.parser()._subparsers._group_actions[0].choices]
    assert len(verbs) == len(cli.VERBS)
    for verb in verbs:
        r = subprocess.run(
            [sys.executable, "-S", "-m", "vseries", verb, "--help"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0 and r.stderr == "", f"{verb}:\n{r.stdout}{r.stderr}"
        assert r.stdout.startswith(f"usage: python -m vseries {verb}") and "options:" in r.stdout


@pytest.mark.parametrize("script", [s for s in SCRIPTS if s != "setup.sh"])
def test_help_on_a_host_python_without_the_workspace_requirements(fresh, tmp_path, script):
    """A script's --help without a venv, where the host's python3 (3.11 or newer) lacks the
    workspace's requirements (here: its standard library alone): the verb's own help, with
    its options, and neither a traceback nor the line that blames the Python version."""
    wrapper = tmp_path / "python3"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    wrapper.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "VSERIES_VENV")}
    env["PYTHON"] = str(wrapper)
    r = subprocess.run(
        ["bash", f"scripts/{script}", "--help"],
        cwd=fresh,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    said = r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "needs Python >= 3.11" not in r.stdout, said
    assert r.stdout.startswith(f"usage: scripts/{script}") and "options:" in r.stdout, r.stdout


def test_help_that_fails_on_a_recent_python_does_not_blame_its_version(fresh, tmp_path):
    """Where a Python 3.11 or newer is found but the verb's --help fails there, the fallback
    usage says so, not that Python >= 3.11 is needed."""
    wrapper = tmp_path / "python3"  # passes the version check, fails everything else
    wrapper.write_text(
        f'#!/bin/sh\n[ "$1" = -c ] || [ "$1" = --version ] && exec {sys.executable} "$@"\n'
        'echo "ModuleNotFoundError: No module named tqdm" >&2; exit 1\n'
    )
    wrapper.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "VSERIES_VENV")}
    env["PYTHON"] = str(wrapper)
    r = subprocess.run(
        ["bash", "scripts/apply.sh", "--help"], cwd=fresh, env=env, capture_output=True, text=True
    )
    assert r.returncode == 0 and r.stdout.startswith("usage: scripts/apply.sh"), r.stdout
    assert "needs Python >= 3.11" not in r.stdout and "failed with Python 3." in r.stdout


def test_the_front_s_help_is_written_for_its_user():
    """``python -m vseries --help`` lists the verbs with a sentence for users, not the
    module's docstring (it printed "``python -m vseries <verb>``: a thin front that
    dispatches to one module per verb")."""
    from vseries import cli

    text = cli.parser().format_help()
    assert "``" not in text and "dispatches to one module" not in text
    assert "python -m vseries <verb> --help" in text


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_bad_option_is_refused_before_anything_is_installed(fresh, script):
    before = files(fresh)
    r = run_fresh(fresh, script, "--no-such-option")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "--no-such-option" in r.stderr and f"scripts/{script} --help" in r.stderr, r.stderr
    assert "setup:" not in r.stdout, r.stdout  # neither "creating .venv" nor "installing"
    assert files(fresh) == before  # no .venv, no build/, no __pycache__


def test_options_that_conflict_are_refused_before_anything_is_installed(fresh):
    before = files(fresh)
    r = run_fresh(fresh, "test.sh", "--line", "v0.1.0", "--fast")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "test.sh: error: the workspace tier tests the tool, not a line" in r.stderr, r.stderr
    assert files(fresh) == before


def test_the_command_line_needs_only_the_standard_library(fresh):
    """What the two tests above stand on where the host's python3 has no package of
    requirements/: vseries' command line imports, prints each script's verb's help and parses
    its options with the standard library alone (python -S: no site-packages at all)."""
    verbs = [s.removesuffix(".sh") for s in SCRIPTS if s != "setup.sh"]
    code = f"""
import contextlib, io, os, sys
sys.path.insert(0, os.getcwd())
os.environ["VSERIES_ARGS_ONLY"] = "1"
from vseries import cli
for verb in {verbs!r}:
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):
        cli.main([verb, "--help"])
    assert out.getvalue().startswith("usage: python -m vseries " + verb), out.getvalue()
assert cli.main(["test", "--fast"]) == 0
print(sorted({{m.split(".")[0] for m in sys.modules}} - sys.stdlib_module_names - {{"__main__"}}))
"""
    r = subprocess.run(
        [sys.executable, "-S", "-P", "-B", "-c", code], cwd=fresh, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == "['vseries']\n", r.stdout


def test_a_venv_copied_from_another_workspace_is_refused(fresh, tmp_path):
    """A workspace copied with its .venv: that venv's activate points at the workspace it was
    made in, whose vseries would then act on the other workspace's vllm/. The scripts stop
    before running anything and say how to make this workspace's own venv."""
    copy = tmp_path / "copy"
    shutil.copytree(fresh, copy)
    venv = copy / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / "bin" / "activate").write_text(
        f'VIRTUAL_ENV="{fresh / ".venv"}"\nexport VIRTUAL_ENV\n'
        f'PATH="{Path(sys.executable).parent}:$PATH"\n'
    )
    before = files(copy)
    r = run_fresh(copy, "apply.sh")
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"belongs to {fresh / '.venv'}" in r.stderr, r.stderr
    assert "next: rm -rf .venv && scripts/setup.sh" in r.stderr
    assert files(copy) == before


@pytest.mark.parametrize(
    "argv",
    [["test", "--line", ""], ["wheel", "-o", ""], ["prs", "--base="], ["rebase", ""]],
    ids=["line", "out", "base=", "tag"],
)
def test_an_empty_value_is_refused_not_read_as_absent(argv, capsys):
    """`--line ''` ran every tier, `-o ''` wrote the wheel into the workspace root, `--base=`
    took the pin: an empty value is refused before anything runs."""
    from vseries import cli

    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "error: an empty value: " in err and "next: python -m vseries" in err, err


def test_setup_refuses_an_empty_line(fresh):
    for args in (["--line", ""], ["--line="]):
        r = run_fresh(fresh, "setup.sh", *args)
        assert r.returncode == 2 and "not an empty value" in r.stderr, r.stderr
        assert not (fresh / ".venv").exists()


def test_an_interrupted_verb_says_how_to_go_on(monkeypatch, capsys):
    """Ctrl-C: the verb's own command line as the next step (every verb starts from what an
    interrupted run left), as the script that ran it."""
    from vseries import cli
    from vseries.prs import command

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(command, "main", interrupted)
    monkeypatch.setenv("VSERIES_PROG", "scripts/prs.sh")
    assert cli.main(["prs", "--no-tests"]) == 130
    err = capsys.readouterr().err
    assert err.startswith("prs.sh: interrupted\n  next: scripts/prs.sh --no-tests   #"), err


def test_a_host_script_sourcing_the_venv_is_not_taken_for_a_verb(fresh, tmp_path):
    """benchmarks/h200/stage.sh sources scripts/_venv.sh, which checked the options of a stale
    venv's reinstall as ``python -m vseries stage ...``: 'invalid choice: stage' stopped the
    staging after any pull that added a module. Its options are its own: with a stale stamp
    the reinstall is reached (pip here is a stand-in that records and fails, so nothing is
    installed)."""
    copy = tmp_path / "copy"
    shutil.copytree(fresh, copy)
    (copy / "benchmarks" / "h200").mkdir(parents=True)
    shutil.copy(ROOT / "benchmarks" / "h200" / "stage.sh", copy / "benchmarks" / "h200")
    venv, shims = tmp_path / "venv", tmp_path / "bin"
    venv.mkdir()
    (venv / ".vseries-requirements").write_text("stale\n")
    shims.mkdir()
    (shims / "python").write_text(
        '#!/bin/sh\nif [ "$1 $2" = "-m pip" ]; then echo "pip $*" >> "$PIP_LOG"; exit 1; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    (shims / "python").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("VSERIES_VENV", "VSERIES_ROOT")}
    env.update(VIRTUAL_ENV=str(venv), PATH=f"{shims}{os.pathsep}{env['PATH']}",
               PIP_LOG=str(tmp_path / "pip.log"))  # fmt: skip
    r = subprocess.run(
        ["bash", "benchmarks/h200/stage.sh", "--download", "--attention"],
        cwd=copy, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert "invalid choice" not in r.stderr, r.stderr
    assert r.returncode != 0 and "installing the workspace requirements" in r.stdout, r.stdout
    assert (tmp_path / "pip.log").read_text().startswith("pip -m pip install")
