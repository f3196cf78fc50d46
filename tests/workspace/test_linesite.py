"""A kept line's own packages: scripts/setup.sh's step for a kept line (``VSERIES_LINE=<tag>
python -m vseries build --line-requirements``) puts what the line's tree needs and the main
venv lacks into ``.vseries/lines/<tag>/site``, with the dependencies the venv lacks, never into
the venv (before, it pip-installed them into the main line's venv, which then held packages the
main pin does not ask for); the line's contract runs import them from there. A venv set up
before keeps what it has, and set-up says how to get a clean one.

Real pip on real wheels, offline: two small wheels made here (vseries-fixture-a, which needs
vseries-fixture-b and packaging) on a --find-links folder, the host's pip configuration
ignored. The step runs in a scratch venv that sees this venv's packages through a .pth file
(what a main venv has), so that an install into "the venv" lands in the scratch one, never in
the venv these tests run from."""

import base64
import hashlib
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from conftest import git, tiny_workspace

from vseries import contract
from vseries.rebase import contracts as rebase_contracts
from vseries.workspace import Workspace

TAG = "v0.1.0"
CONTRACT = """import pytest, mod, vseries_fixture_a
pytestmark = pytest.mark.contract

def test_value():
    assert vseries_fixture_a.NAME == "a" and vseries_fixture_a.B == "b"
    assert mod.VALUE == 2
"""


def wheel(folder: Path, name: str, code: str, requires: list[str] = ()) -> Path:
    """A pure-Python wheel of distribution ``name`` 1.0: one module (``name`` with "_"),
    its METADATA (Requires-Dist ``requires``), WHEEL and RECORD."""
    mod = name.replace("-", "_")
    info = f"{mod}-1.0.dist-info"
    files = {
        f"{mod}.py": code,
        f"{info}/METADATA": "Metadata-Version: 2.1\n"
        f"Name: {name}\nVersion: 1.0\n" + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    out = folder / f"{mod}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(out, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
    return out


def kept_line(root: Path) -> Workspace:
    """A tiny workspace at root with a kept line TAG: its tree (mod.VALUE 1 at the pin, 2 with
    its one patch, applied) whose requirements/common.txt asks for vseries-fixture-a and
    packaging, its pin and series (the patch's contract imports vseries_fixture_a)."""
    tiny_workspace(root)
    up = root / ".vseries" / "lines" / TAG / "vllm"
    (up / "requirements").mkdir(parents=True)
    git(up, "init", "-q")
    (up / "mod.py").write_text("VALUE = 1\n")
    (up / "requirements" / "common.txt").write_text(
        "vseries-fixture-a >= 1.0  # the line's own\npackaging  # the main venv has it\n"
    )
    ident = ["-c", "user.name=t", "-c", "user.email=t@t"]
    git(up, "add", ".")
    git(up, *ident, "commit", "-qm", "release")
    pin = git(up, "rev-parse", "HEAD")
    (up / "mod.py").write_text("VALUE = 2\n")
    git(up, *ident, "commit", "-qam", "[P] two")
    line = root / "lines" / TAG
    (line / "patches").mkdir(parents=True)
    main_pin = (root / "upstream.toml").read_text()
    main_commit = git(root / "vllm", "rev-parse", "HEAD")
    (line / "upstream.toml").write_text(main_pin.replace(main_commit, pin))
    name = git(up, "format-patch", "-k", "--zero-commit", "-1", "-o", str(line / "patches"))
    contract_file = "tests/contract/test_line.py"
    (line / "patches" / "series").write_text(f"{Path(name).name} contract={contract_file}\n")
    (root / "tests" / "contract").mkdir(parents=True)
    (root / contract_file).write_text(CONTRACT)
    return Workspace(root, TAG)


def scratch_venv(where: Path) -> Path:
    """A venv without pip of its own that sees this venv's packages (pip, vseries, packaging
    ...) after its own, as a main venv would have them; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    py = where / "bin" / "python"
    own = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = sysconfig.get_paths()["purelib"]
    (Path(own) / "main-venv.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    return py


def offline(wheels: Path, **more: str) -> dict:
    """The environment of pip with ``wheels`` as its only index, the host's configuration
    ignored."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHONPATH"))}
    return {
        **env,
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(wheels),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_CACHE_DIR": "1",
        **more,
    }


def fixture_wheels(folder: Path) -> Path:
    folder.mkdir()
    wheel(folder, "vseries-fixture-b", 'NAME = "b"\n')
    code = 'from vseries_fixture_b import NAME as B\nNAME = "a"\n'
    wheel(folder, "vseries-fixture-a", code, ["vseries-fixture-b", "packaging"])
    return folder


def line_requirements(py: Path, ws: Workspace, wheels: Path) -> subprocess.CompletedProcess:
    """scripts/setup.sh's step for the kept line ws, run by ``py``."""
    env = offline(wheels, VSERIES_ROOT=str(ws.root), VSERIES_LINE=ws.line)
    return subprocess.run(
        [py, "-m", "vseries", "build", "--line-requirements"],
        cwd=ws.root,
        env=env,
        capture_output=True,
        text=True,
    )


def dists(py: Path) -> list[str]:
    """The vseries-fixture distributions installed in py's own venv (its site-packages)."""
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    own = subprocess.run([py, "-c", code], capture_output=True, text=True, check=True).stdout
    return sorted(p.name for p in Path(own.strip()).glob("vseries_fixture*.dist-info"))


@pytest.fixture(scope="module")
def set_up(tmp_path_factory) -> tuple:
    """The kept line's step run once in a scratch main venv: (ws, wheels, its python, the
    run)."""
    tmp = tmp_path_factory.mktemp("linesite")
    ws = kept_line(tmp / "ws")
    wheels = fixture_wheels(tmp / "wheels")
    py = scratch_venv(tmp / "venv")
    return ws, wheels, py, line_requirements(py, ws, wheels)


def test_the_main_venv_gets_none_of_the_lines_packages_its_folder_gets_them(set_up):
    ws, wheels, py, r = set_up
    assert r.returncode == 0, r.stdout + r.stderr
    assert dists(py) == [], f"the main venv got the line's packages: {dists(py)}\n{r.stdout}"
    site = ws.root / ".vseries" / "lines" / TAG / "site"
    held = sorted(p.name for p in site.glob("*.dist-info"))
    # the requirement and the dependency the venv lacks; not packaging, which the venv has
    assert held == ["vseries_fixture_a-1.0.dist-info", "vseries_fixture_b-1.0.dist-info"], held
    assert "installing" in r.stdout and "vseries-fixture-a>=1.0" in r.stdout, r.stdout
    # a second run changes nothing
    before = {p: p.stat().st_mtime_ns for p in site.rglob("*")}
    again = line_requirements(py, ws, wheels)
    assert again.returncode == 0 and "installing" not in again.stdout, again.stdout
    assert {p: p.stat().st_mtime_ns for p in site.rglob("*")} == before
    assert dists(py) == []


def test_the_lines_contract_run_imports_them_from_its_folder(set_up, monkeypatch):
    """From this venv, which lacks them too: patched passes, and the base fails on its
    value, not on an import."""
    ws, _, _, r = set_up
    assert r.returncode == 0, r.stdout + r.stderr
    monkeypatch.setenv("VSERIES_ROOT", str(ws.root))
    monkeypatch.setenv("VSERIES_CONTRACT_JOBS", "1")
    [(_, patched, base)] = contract.check_all(ws, base=True)
    assert patched.outcome == "pass", patched.line
    assert base.outcome == "fail" and "1 failed" in base.line, base.line
    # and so does a rebase of the line (its contract runs on upstream's trees)
    paths = rebase_contracts.Contracts(ws, None, None).paths
    said, why, _ = rebase_contracts.verdict("tests/contract/test_line.py", ws.vllm, ws.root, paths)
    assert said == "pass", why


def test_a_venv_of_the_lines_own_runs_it_without_the_folder(set_up, tmp_path):
    """A venv that holds the line's packages itself (.venv-<tag> of scripts/setup.sh --line)
    leaves the folder off the line's PYTHONPATH; this one, which lacks them, puts it on."""
    ws, wheels, _, r = set_up
    assert r.returncode == 0, r.stdout + r.stderr
    py = scratch_venv(tmp_path / "venv")
    subprocess.run(
        [py, "-m", "pip", "install", "-q", "vseries-fixture-a"], env=offline(wheels), check=True
    )
    code = (
        "from vseries import linesite, workspace as w; "
        "print(linesite.pythonpath(w.Workspace.current()))"
    )
    env = offline(wheels, VSERIES_ROOT=str(ws.root), VSERIES_LINE=TAG)
    p = subprocess.run([py, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert p.stdout.strip() == "[]", p.stdout + p.stderr
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert p.stdout.strip() == repr([ws.root / ".vseries" / "lines" / TAG / "site"]), p.stderr


def test_a_venv_set_up_before_keeps_its_packages_and_is_told_how_to_get_a_clean_one(tmp_path):
    """A main venv that already holds the line's packages (what set-up put there before): the
    step installs nothing, uninstalls nothing, and says once how to get a clean main venv."""
    ws = kept_line(tmp_path / "ws")
    wheels = fixture_wheels(tmp_path / "wheels")
    py = scratch_venv(tmp_path / "venv")
    subprocess.run(
        [py, "-m", "pip", "install", "-q", "vseries-fixture-a"],
        env=offline(wheels),
        check=True,
    )
    assert dists(py) == ["vseries_fixture_a-1.0.dist-info", "vseries_fixture_b-1.0.dist-info"]
    r = line_requirements(py, ws, wheels)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "installing" not in r.stdout, r.stdout
    assert not (ws.root / ".vseries" / "lines" / TAG / "site").exists()
    assert dists(py) == ["vseries_fixture_a-1.0.dist-info", "vseries_fixture_b-1.0.dist-info"]
    told = [x for x in r.stdout.splitlines() if "rm -rf .venv && scripts/setup.sh" in x]
    assert len(told) == 1 and "vseries-fixture-a" in told[0], r.stdout
    # b is needed by a, which the venv holds: only a is named
    assert "vseries-fixture-b" not in told[0], told
