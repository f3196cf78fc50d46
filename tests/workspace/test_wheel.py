"""scripts/wheel.sh (issue 34): the line's release wheel with the series in it, as a wheel of
its own, and deploy/Dockerfile, which installs it into vLLM's release image.

Fast tests build small synthetic release wheels (a tree, its wheel, a series applied with
the real apply): the wheel's members, RECORD, METADATA and dist-info; the refusals. The slow
ones take the real release wheels: one build per line (a session fixture), installed with
``pip install --no-deps --no-index`` into fresh virtual environments.

Those environments get vLLM's dependencies from this test run's own environment: a folder of
links to each entry of its site-packages, except vLLM and vseries (its editable install of
vllm/ and the tool), named in a .pth file of the new environment. That is
``--system-site-packages`` with this environment as the "system" one: nothing is downloaded
or copied, and ``import vllm`` can only find the installed wheel. ``pip check`` then holds
the wheel's requirements (the release's, unchanged) against what is installed: on a CPU host
everything but the release's CUDA stack (its requirements/cuda.txt: torch's CUDA build,
FlashInfer, ...), which a CPU host cannot hold; the test asserts that this is all it finds.
"""

import argparse
import base64
import csv
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from datetime import datetime
from pathlib import Path

import pytest
from conftest import ROOT, git, line_site, make_patch
from hypothesis import given
from hypothesis import strategies as st
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from vseries import apply, contract, fetch, image, pytestrun, series
from vseries import git as gitmod
from vseries import pin as pinmod
from vseries.errors import SeriesError
from vseries.wheel import changes, command, label
from vseries.workspace import Workspace

PIN = pinmod.load(ROOT / "upstream.toml")
KEPT = sorted(p.parent.name for p in (ROOT / "lines").glob("*/upstream.toml"))
DOCKERFILE = ROOT / image.DOCKERFILE

# ---- a synthetic release: its tree, its wheel ------------------------------------------------

TREE = {
    "vllm/__init__.py": b"VERSION = 1\n",
    "vllm/a.py": b"a = 1\n",
    "vllm/gone.py": b"gone = True\n",
    "vllm/_C.abi3.so": bytes(range(256)) * 64,
    "vllm/configs/E=1,N=2.json": b'{"1": {}}\n',
    "csrc/k.cu": b"// a kernel\n",
    "tests/test_a.py": b"def test_a():\n    pass\n",
}


def record_hash(data: bytes) -> str:
    """RECORD's hash, computed here independently of vseries."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")


def release_wheel(path: Path, tree: dict[str, bytes], version: str) -> None:
    """A release wheel of ``tree``'s package (the .so stored, the rest deflated)."""
    info = f"vllm-{version}.dist-info"
    files = {n: d for n, d in tree.items() if n.startswith("vllm/")}
    files[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\nRequires-Dist: numpy\n\nBody.\n"
    ).encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp38-abi3-any\n"
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    for n, d in files.items():
        w.writerow([n, record_hash(d), len(d)])
    w.writerow([f"{info}/RECORD", "", ""])
    files[f"{info}/RECORD"] = out.getvalue().encode()
    with zipfile.ZipFile(path, "w") as z:
        for n, d in files.items():
            kind = zipfile.ZIP_STORED if n.endswith(".so") else zipfile.ZIP_DEFLATED
            z.writestr(zipfile.ZipInfo(n, (2026, 1, 2, 3, 4, 6)), d, compress_type=kind)


def set_release(root: Path, tree: dict[str, bytes]) -> Path:
    """(Re)write the synthetic release wheel into the cache and its sha256 into the pin."""
    pin = pinmod.load(root / "upstream.toml")
    wheel = Path(os.environ["VSERIES_CACHE"]) / pin.wheel.filename
    release_wheel(wheel, tree, pin.version)
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    text = (root / "upstream.toml").read_text().replace(pin.wheel.sha256, sha)
    (root / "upstream.toml").write_text(text)
    return wheel


@pytest.fixture
def synth(tmp_path, monkeypatch) -> Path:
    """A workspace whose pin is a synthetic release (tree and wheel), with an empty series."""
    root = tmp_path / "ws"
    up = root / "vllm"
    for name, data in TREE.items():
        (up / name).parent.mkdir(parents=True, exist_ok=True)
        (up / name).write_bytes(data)
    git(up, "init", "-q")
    git(up, "add", ".")
    git(up, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "release")
    commit = git(up, "rev-parse", "HEAD")
    git(up, "checkout", "-q", "--detach")
    git(up, "config", "vseries.source", "synthetic")
    (root / "upstream.toml").write_text(
        (ROOT / "upstream.toml").read_text().replace(PIN.commit, commit)
    )
    (root / "patches").mkdir()
    (root / "patches" / "series").write_text("")
    (tmp_path / "cache").mkdir()
    monkeypatch.setenv("VSERIES_ROOT", str(root))
    monkeypatch.setenv("VSERIES_CACHE", str(tmp_path / "cache"))
    set_release(root, TREE)
    git(root, "init", "-q")
    commit_series(root, "2026-12-01T00:00:00Z", "upstream.toml")
    return root


def commit_series(root: Path, when: str, *paths: str) -> None:
    """Commit ``paths`` (default patches/) of the workspace root at ``when`` (its committer
    time, the time the wheel's version carries)."""
    subprocess.run(["git", "-C", str(root), "add", "-A", *(paths or ["patches"])], check=True)
    env = {**os.environ, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}
    ident = ["-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(
        ["git", "-C", str(root), *ident, "commit", "-q", "--allow-empty", "-m", "series"],
        check=True,
        env=env,
    )


def expected_version(root: Path, release: str, wheel: Path, files: list[Path]) -> Version:
    """The version a series wheel must carry, worked out here: the release, ``+series.``, the
    UTC time of the workspace's last commit of the series' files (git log), the number of
    patches, ``h`` and the sha256 of the wheel's series list."""
    stamp = subprocess.run(
        ["git", "-C", str(root), "log", "-1", "--format=%cd", "--date=format-local:%Y%m%d%H%M%S",
         "--", *(str(f.relative_to(root)) for f in files)],
        capture_output=True, text=True, check=True, env={**os.environ, "TZ": "UTC"},
    ).stdout.strip()  # fmt: skip
    with zipfile.ZipFile(wheel) as z:
        listing = z.read(next(n for n in z.namelist() if n.endswith(command.SERIES_FILE)))
    n = sum(1 for line in listing.decode().splitlines() if not line.startswith("#"))
    sha = hashlib.sha256(listing).hexdigest()[:8]
    return Version(f"{release}+series.{stamp}.{n}.h{sha}")


def with_series(root: Path, *edits, when: str | None = "2026-12-02T00:00:00Z") -> list[str]:
    """Make one patch per (subject, edit) on the pin, list them, commit them in the workspace
    at ``when`` (None: leave them uncommitted), apply; their names."""
    pin = pinmod.load(root / "upstream.toml")
    git(root / "vllm", "checkout", "-q", "--detach", pin.commit)
    for old in (root / "patches").glob("*.patch"):
        old.unlink()
    names = []
    for subject, edit in edits:
        p = make_patch(root / "vllm", root / "patches", edit, subject)
        names.append(p.name)
    (root / "patches" / "series").write_text("".join(f"{n}\n" for n in names))
    if when:
        commit_series(root, when)
    apply.apply(force=True, ws=Workspace(root))  # the series replaced, as a checkout would
    return names


def edit_many(r: Path) -> None:
    (r / "vllm" / "a.py").write_text("a = 2  # the series\n")
    (r / "vllm" / "new.py").write_text("new = 1\n")
    (r / "vllm" / "gone.py").unlink()
    (r / "vllm" / "configs" / "E=8,N=16,device_name=NVIDIA_H200.json").write_text("{}\n")
    (r / "tests" / "test_a.py").write_text("def test_a():\n    assert True\n")


def edit_init(r: Path) -> None:
    (r / "vllm" / "__init__.py").write_text("VERSION = 2\n")


def members(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as z:
        return {n: z.read(n) for n in z.namelist()}


def check_record(wheel: Path) -> int:
    """Every member listed once in RECORD with its sha256 and size; RECORD's own line empty.
    Returns how many lines were checked."""
    files = members(wheel)
    rec = next(n for n in files if n.endswith(".dist-info/RECORD"))
    rows = list(csv.reader(io.StringIO(files[rec].decode())))
    assert sorted(r[0] for r in rows) == sorted(files)
    for name, h, size in rows:
        if name == rec:
            assert (h, size) == ("", "")
        else:
            assert (h, int(size)) == (record_hash(files[name]), len(files[name])), name
    return len(rows)


# ---- fast: the synthetic release ---------------------------------------------------------------


def test_the_wheel_is_the_release_with_the_series_files(synth):
    names = with_series(synth, ("[Perf] many", edit_many), ("[Perf] init", edit_init))
    pin = pinmod.load(synth / "upstream.toml")
    release = Path(os.environ["VSERIES_CACHE"]) / pin.wheel.filename
    built = command.build(Workspace(synth))

    files = [synth / "patches" / n for n in ["series", *names]]
    version = expected_version(synth, pin.version, built.path, files)
    assert built.version == str(version) and str(version.local).startswith("series.2026120200")
    _, v, _, tags = parse_wheel_filename(built.path.name)
    assert v == version and tags == parse_wheel_filename(pin.wheel.filename)[3]
    assert built.path.parent == synth / "out" / "wheel" / pin.tag
    old, new = members(release), members(built.path)
    info_old, info_new = f"vllm-{pin.version}.dist-info", f"vllm-{version}.dist-info"
    # the series' files: changed, added, removed; its test file is not shipped
    assert new["vllm/a.py"] == b"a = 2  # the series\n"
    assert new["vllm/__init__.py"] == b"VERSION = 2\n"
    assert new["vllm/new.py"] == b"new = 1\n"
    assert new["vllm/configs/E=8,N=16,device_name=NVIDIA_H200.json"] == b"{}\n"
    assert "vllm/gone.py" not in new and not any(n.startswith("tests/") for n in new)
    # the kernel and the untouched files are the release's, stored as it stored them
    assert new["vllm/_C.abi3.so"] == old["vllm/_C.abi3.so"]
    assert new["vllm/configs/E=1,N=2.json"] == old["vllm/configs/E=1,N=2.json"]
    with zipfile.ZipFile(built.path) as z:
        assert z.getinfo("vllm/_C.abi3.so").compress_type == zipfile.ZIP_STORED
        assert z.getinfo("vllm/a.py").compress_type == zipfile.ZIP_DEFLATED
    assert built.checked.kernels == ["vllm/_C.abi3.so"]
    # the dist-info: renamed, METADATA's version and nothing else changed, the patches named
    assert not any(n.startswith(info_old) for n in new)
    assert new[f"{info_new}/WHEEL"] == old[f"{info_old}/WHEEL"]
    assert new[f"{info_new}/METADATA"] == old[f"{info_old}/METADATA"].replace(
        f"Version: {pin.version}\n".encode(), f"Version: {version}\n".encode()
    )
    listed = new[f"{info_new}/{command.SERIES_FILE}"].decode().splitlines()
    assert [line.split()[0] for line in listed if not line.startswith("#")] == names
    assert check_record(built.path) == len(new)
    assert built.sha256 == hashlib.sha256(built.path.read_bytes()).hexdigest()


def test_the_wheel_package_s_reader_verifies_its_record(synth):
    wheelfile = pytest.importorskip("wheel.wheelfile")
    with_series(synth, ("[Perf] many", edit_many))
    built = command.build(Workspace(synth))
    with wheelfile.WheelFile(built.path) as wf:  # raises on a hash or size RECORD disagrees with
        for n in wf.namelist():
            wf.read(n)


def test_an_older_series_wheel_of_the_release_is_replaced(synth, tmp_path):
    with_series(synth, ("[Perf] init", edit_init))
    first = command.build(Workspace(synth), tmp_path / "o")
    (tmp_path / "o" / "keep.whl").write_bytes(b"not ours")
    with_series(synth, ("[Perf] init", edit_init), ("[Perf] many", edit_many))
    second = command.build(Workspace(synth), tmp_path / "o")
    assert first.path.name != second.path.name
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == sorted(
        [second.path.name, "keep.whl"]
    )


@pytest.mark.parametrize(
    "path, data",
    [("csrc/k.cu", "// changed\n"), ("vllm/ops/k.cuh", "// new\n"), ("setup.py", "x = 1\n")],
)
def test_a_series_that_changes_a_kernel_or_the_build_is_refused(synth, path, data):
    def edit(r):
        (r / path).parent.mkdir(parents=True, exist_ok=True)
        (r / path).write_text(data)

    with_series(synth, ("[Kernel] k", edit))
    with pytest.raises(SeriesError) as e:
        command.build(Workspace(synth))
    assert path in str(e.value) and "cannot carry" in str(e.value)
    assert not list((synth / "out").rglob("*.whl*"))


def test_a_kernel_binary_is_refused():
    found = [
        changes.Change("M", "vllm/_C.abi3.so"),
        changes.Change("M", "vllm/a.py"),
        changes.Change("A", "tests/t.py"),
    ]
    with pytest.raises(SeriesError) as e:
        changes.plan(found, "vllm", "the series")
    assert "vllm/_C.abi3.so" in str(e.value) and "vllm/a.py" not in str(e.value)
    p = changes.plan(found[1:], "vllm", "the series")
    assert (p.put, p.drop, p.not_shipped) == ([found[1]], [], [found[2]])


def test_ci_configuration_is_not_shipped():
    """A patch that adds vLLM's CI step for its tests (.buildkite/) still makes a wheel: the
    step is left out, as tests and benchmarks are."""
    found = [changes.Change("M", ".buildkite/test_areas/kernels.yaml")]
    p = changes.plan([changes.Change("M", "vllm/a.py"), *found], "vllm", "the series")
    assert p.not_shipped == found


def test_a_release_wheel_that_is_not_the_tag_s_source_is_refused(synth):
    with_series(synth, ("[Perf] many", edit_many))
    set_release(synth, {**TREE, "vllm/a.py": b"a = 1  # not the tag's\n"})
    with pytest.raises(SeriesError) as e:
        command.build(Workspace(synth))
    msg = str(e.value)
    assert "vllm/a.py: the release wheel's file differs" in msg and "gone.py" not in msg
    assert "next: diff <(unzip -p" in msg
    # an added file that the wheel already has
    set_release(synth, {**TREE, "vllm/new.py": b"new = 0\n"})
    with pytest.raises(SeriesError, match="vllm/new.py: the series adds it"):
        command.build(Workspace(synth))


def test_a_tree_that_does_not_hold_the_series_is_refused(synth):
    with_series(synth, ("[Perf] init", edit_init))
    pin = pinmod.load(synth / "upstream.toml")
    git(synth / "vllm", "update-ref", "refs/heads/series", pin.commit)
    with pytest.raises(SeriesError, match="does not hold patches/series") as e:
        command.build(Workspace(synth))
    assert str(e.value).endswith("next: scripts/apply.sh")


def versions_in(folder: Path) -> list[Version]:
    return [parse_wheel_filename(p.name)[1] for p in folder.glob("*.whl")]


def test_an_output_that_cannot_be_written_is_named_and_leaves_nothing(synth, tmp_path, monkeypatch):
    """-o naming a file, and a disk that fills up while the wheel is written: an error with the
    way on, not a traceback, and no half-written wheel left behind."""
    with_series(synth, ("[Perf] init", edit_init))
    (tmp_path / "afile").write_text("")
    with pytest.raises(SeriesError, match="cannot make the output folder") as e:
        command.build(Workspace(synth), tmp_path / "afile")
    assert e.value.fix.startswith("scripts/wheel.sh -o ")

    def disk_full(path, members):
        Path(path).write_bytes(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(command.archive, "write", disk_full)
    with pytest.raises(SeriesError, match="No space left on device; nothing was left") as e:
        command.build(Workspace(synth), tmp_path / "full")
    assert e.value.fix.startswith("df -h ") and list((tmp_path / "full").iterdir()) == []


def test_a_newer_shorter_series_sorts_above_an_older_longer_one(synth, tmp_path):
    """What pip and a deployment that takes "the newest wheel" compare: PEP 440 versions.
    The older series has 2 patches, the newer 1 (a patch dropped the next day)."""
    with_series(synth, ("[Perf] many", edit_many), ("[Perf] init", edit_init),
                when="2026-12-03T18:45:45Z")  # fmt: skip
    older = command.build(Workspace(synth), tmp_path / "older")
    with_series(synth, ("[Perf] init", edit_init), when="2026-12-04T09:00:00Z")
    newer = command.build(Workspace(synth), tmp_path / "newer")
    assert Version(newer.version) > Version(older.version)
    shutil.copy(older.path, tmp_path / "newer")
    assert max(versions_in(tmp_path / "newer")) == Version(newer.version)
    # the same day, a later commit of a series of the same length: sorts higher, tells apart
    with_series(synth, ("[Perf] many", edit_many), when="2026-12-04T09:00:01Z")
    later = command.build(Workspace(synth), tmp_path / "later")
    assert Version(later.version) > Version(newer.version)
    assert later.path.name.split("-")[1] != newer.path.name.split("-")[1]
    # a wheel of the old label (series.<n>) sorts below every wheel of this one
    assert Version(f"{PIN.version}+series.7") < Version(newer.version)


def test_the_same_series_gives_the_same_wheel(synth, tmp_path):
    with_series(synth, ("[Perf] many", edit_many), ("[Perf] init", edit_init))
    first = command.build(Workspace(synth), tmp_path / "a")
    apply.apply(ws=Workspace(synth))  # the series applied again: the same commits
    second = command.build(Workspace(synth), tmp_path / "b")
    assert first.path.name == second.path.name and first.sha256 == second.sha256


def test_two_series_of_one_length_and_one_time_are_told_apart(synth, tmp_path):
    with_series(synth, ("[Perf] init", edit_init), when="2026-12-04T09:00:00Z")
    a = command.build(Workspace(synth), tmp_path / "a")
    with_series(synth, ("[Perf] many", edit_many), when="2026-12-04T09:00:00Z")
    b = command.build(Workspace(synth), tmp_path / "b")
    assert Version(a.version) != Version(b.version) and a.label.digest != b.label.digest


def test_an_uncommitted_series_carries_its_last_commit_s_time_and_is_said(synth, capsys):
    with_series(synth, ("[Perf] init", edit_init), when="2026-12-04T09:00:00Z")
    committed = command.build(Workspace(synth))
    names = with_series(synth, ("[Perf] many", edit_many), when=None)
    built = command.build(Workspace(synth))
    assert built.label.changed == committed.label.changed == "20261204090000"
    assert built.label.digest != committed.label.digest
    assert {x[3:] for x in built.label.uncommitted} >= {"patches/series", f"patches/{names[0]}"}
    command.main(argparse.Namespace(line=None, out=None))
    assert "changes no commit holds" in capsys.readouterr().out


def test_a_shallow_checkout_is_said_and_one_without_git_refused(synth, tmp_path):
    with_series(synth, ("[Perf] init", edit_init))
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{synth}", str(shallow))
    files = [shallow / "patches" / "series"]
    changed, _, cut = label.changed_at(shallow, files)
    assert cut  # said (the wheel's output notes it), not refused: a CI clone may be shallow
    git(shallow, "fetch", "-q", "--unshallow")
    assert label.changed_at(shallow, files) == ("20261202000000", (), False)
    shutil.rmtree(synth / ".git")
    with pytest.raises(SeriesError, match="not a git checkout"):
        command.build(Workspace(synth))
    assert not list((synth / "out").rglob("*.whl*"))


def test_ci_checks_out_the_history_the_version_needs():
    """In a shallow checkout cut at the series' last commit the version may sort a little
    late (the test above), so the workflow that runs the tests fetches the whole history."""
    yaml = pytest.importorskip("yaml")
    flow = yaml.safe_load((ROOT / ".ci" / "github-actions.yml").read_text())
    runs_ci = [
        j for j in flow["jobs"].values() if any(".ci/run" in s.get("run", "") for s in j["steps"])
    ]
    assert runs_ci
    for job in runs_ci:
        checkout = [s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout")]
        assert [s.get("with", {}).get("fetch-depth") for s in checkout] == [0]


def test_series_version_is_a_local_version_of_the_release():
    lab = label.Label("20261204090000", 5, "h0123abcd")
    v = Version(command.series_version(PIN.version, lab))
    assert v.public == PIN.version and v.local == "series.20261204090000.5.h0123abcd"
    assert command.series_version(f"{PIN.version}+cu130", lab) == f"{PIN.version}+cu130.{lab}"


stamps = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2999, 12, 31))
label_of = st.builds(
    lambda when, n, data: label.Label(when.strftime("%Y%m%d%H%M%S"), n, label.digest(data)),
    stamps,
    st.integers(0, 300),
    st.binary(max_size=64),
)


@given(label_of, label_of, st.sampled_from(["0.34.0", "0.21.0", "0.34.0+cu130", "1.0rc1"]))
def test_series_versions_sort_by_the_series_last_change(a, b, release):
    """Any two labels (times, lengths, digests, all-digit digests among them): the version is
    PEP 440's normal form of itself (pip and packaging keep the name), and a later change
    sorts higher whatever the number of patches."""
    va, vb = (Version(command.series_version(release, x)) for x in (a, b))
    assert str(va) == command.series_version(release, a)
    assert va.public == Version(release).public and "cpu" not in str(va)
    if a.changed != b.changed:
        assert (va < vb) == (a.changed < b.changed)
    elif a.digest != b.digest:
        assert va != vb


def test_no_such_line_names_the_kept_ones():
    with pytest.raises(SeriesError, match="no kept line 'v0.0.1'") as e:
        command.line_workspace("v0.0.1")
    assert all(t in str(e.value) for t in KEPT)


# ---- fast: the container recipe ----------------------------------------------------------------


def recipe(path: Path) -> list[tuple[str, str]]:
    """A Dockerfile's instructions, (KEYWORD, rest), continuation lines joined."""
    text = re.sub(r"\\\n", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def expand(text: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], text)


def build_args(steps, **given) -> dict[str, str]:
    args = {}
    for op, rest in steps:
        if op == "ARG" and "=" in rest:
            k, v = rest.split("=", 1)
            args.setdefault(k, v.strip('"'))
    return {**args, **given}


def test_the_recipe_starts_from_the_release_image_of_the_pin():
    steps = recipe(DOCKERFILE)
    froms = [expand(rest, build_args(steps)) for op, rest in steps if op == "FROM"]
    assert froms == [f"vllm/vllm-openai:{PIN.tag}"]  # the default follows upstream.toml
    assert image.default_tag(ROOT) == PIN.tag  # what the rebase verb reads and moves
    for tag in KEPT:
        line_pin = pinmod.load(ROOT / "lines" / tag / "upstream.toml")
        args = build_args(steps, VLLM_TAG=line_pin.tag)
        assert [expand(r, args) for o, r in steps if o == "FROM"] == [f"vllm/vllm-openai:{tag}"]
    copies = [rest.split() for op, rest in steps if op == "COPY"]  # the verb's output folder
    assert [expand(src, build_args(steps)) for src, _ in copies] == [f"{command.OUT}/{PIN.tag}/"]
    # the build context (the root) is sent without all but that folder
    ignore = DOCKERFILE.with_name(DOCKERFILE.name + ".dockerignore").read_text().split("\n")
    assert [x for x in ignore if x and not x.startswith("#")] == ["*", f"!{command.OUT}/"]
    run = " ".join(rest for op, rest in steps if op == "RUN")
    assert "pip install --no-deps" in run and "vllm --version" in run


# ---- slow: the real release wheels, installed ---------------------------------------------------


def line_ws(tag: str | None) -> Workspace:
    return Workspace(ROOT, tag) if tag else Workspace(ROOT)


@pytest.fixture(scope="session")
def context(tmp_path_factory):
    """A build context for the recipe: the wheels land in its out/wheel/<tag>/ (removed
    after the session: 0.5 GB)."""
    where = tmp_path_factory.mktemp("context")
    yield where
    shutil.rmtree(where, ignore_errors=True)


@pytest.fixture(scope="session")
def real_wheel(context):
    """real_wheel(tag): the patched wheel of the line (None: the main line), built once."""
    made = {}

    def get(tag: str | None) -> command.Built:
        if tag not in made:
            ws = line_ws(tag)
            out = context / "out" / "wheel" / pinmod.load(ws.pin_file).tag
            made[tag] = command.build(ws, out)
        return made[tag]

    return get


@pytest.fixture(scope="session")
def deps(tmp_path_factory) -> Path:
    """Links to this environment's site-packages entries, vLLM and vseries left out."""
    site = Path(sysconfig.get_paths()["purelib"])
    out = tmp_path_factory.mktemp("deps")
    for entry in site.iterdir():
        name = entry.name.lower()
        if name.startswith(("vllm", "vseries", "__editable__", "__pycache__")):
            continue
        if name.endswith(".pth"):
            continue
        (out / entry.name).symlink_to(entry)
    return out


def venv_with(where: Path, deps: Path, wheel: Path, more: list[str] = ()) -> Path:
    """A fresh virtual environment, vLLM's dependencies from ``deps`` (and the folders
    ``more``: a kept line's own packages, line_site), ``wheel`` installed with ``pip install
    --no-deps --no-index`` (no bytecode: the install is what is tested)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    site = subprocess.run(
        [
            where / "bin" / "python",
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "vseries-deps.pth").write_text("".join(f"{d}\n" for d in [deps, *more]))
    p = pip(where, "install", "--no-deps", "--no-index", "--no-compile", "-q", str(wheel))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return where


def clean_env(venv: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VSERIES_ROOT")}
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    return env


def pip(venv: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [venv / "bin" / "python", "-m", "pip", *args],
        capture_output=True,
        text=True,
        env=clean_env(venv),
    )


def contracts(venv: Path, tag: str | None, marks: str, tmp: Path) -> tuple[dict, str]:
    """The line's contracts (tests/contract/, CPU parts) against the vLLM installed in venv:
    {file: [outcomes]} and the vllm module the run imported."""
    files = [e.contract for e in series.load(line_ws(tag))]
    xml = tmp / f"junit-{venv.name}.xml"
    args = ["-q", "-p", "no:cacheprovider", "-o", "junit_family=xunit1", f"--junitxml={xml}"]
    code = (
        "import sys, pytest\n"
        f"code = pytest.main({[*args, '-m', marks, *files]!r})\n"
        "m = sys.modules.get('vllm')\n"
        "print('VLLM UNDER TEST', m.__file__ if m else None)\n"
    )
    env = {**clean_env(venv), "CUDA_VISIBLE_DEVICES": ""}
    p = subprocess.run(
        [venv / "bin" / "python", "-P", "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    found = {}
    for case in pytestrun.junit(xml):
        found.setdefault(case.file, []).append(case.outcome)
    assert set(found) == set(files), p.stdout[-3000:] + p.stderr[-3000:]
    return found, p.stdout.split("VLLM UNDER TEST ")[-1].strip(), p.stdout[-6000:]


@pytest.fixture(scope="session")
def patched_env(tmp_path_factory, real_wheel, deps):
    """The main line's patched wheel installed (removed after the session, as each of these
    environments is: 0.5 GB each)."""
    venv = venv_with(tmp_path_factory.mktemp("venv") / "patched", deps, real_wheel(None).path)
    yield venv
    shutil.rmtree(venv, ignore_errors=True)


@pytest.fixture(scope="session")
def release_env(tmp_path_factory, deps):
    """The main line's plain release wheel installed."""
    wheel = fetch.fetch(PIN.package, PIN.wheel)
    venv = venv_with(tmp_path_factory.mktemp("venv") / "release", deps, wheel)
    yield venv
    shutil.rmtree(venv, ignore_errors=True)


@pytest.fixture
def scratch_venv(tmp_path, deps):
    """scratch_venv(wheel, tag): a venv with ``wheel`` installed for one test, removed after
    it; for a kept line ``tag``, its own packages beside vLLM's dependencies."""
    made = []

    def make(wheel: Path, tag: str | None = None) -> Path:
        more = line_site(tag) if tag else []
        made.append(venv_with(tmp_path / f"venv{len(made)}", deps, wheel, more))
        return made[-1]

    yield make
    for venv in made:
        shutil.rmtree(venv, ignore_errors=True)


def site_of(venv: Path) -> str:
    return str(next((venv / "lib").glob("python3*/site-packages")))


@pytest.mark.slow
@pytest.mark.parametrize("tag", [None, *KEPT], ids=["main", *KEPT])
def test_the_real_wheel_builds_with_the_release_kernels_compressed_once(real_wheel, tag):
    """The verb takes seconds (under a minute on a busy 2-core host, printed here) because
    nothing is compressed again: every member the series leaves alone is copied as the release
    stored it. That is checked, not the time (a threshold on time fails by chance)."""
    built = real_wheel(tag)
    print(f"{tag or 'main'}: the wheel built in {built.seconds:.1f} s")
    pin = pinmod.load(line_ws(tag).pin_file)
    ws = line_ws(tag)
    files = [ws.series_file, *(e.path for e in series.load(ws))]
    assert built.version == str(expected_version(ROOT, pin.version, built.path, files))
    assert check_record(built.path) == len(built.checked.names)
    release = fetch.fetch(pin.package, pin.wheel)
    old, new = members(release), members(built.path)
    kernels = sorted(n for n in old if n.endswith(".so"))
    assert kernels and sorted(built.checked.kernels) == kernels
    assert all(new[n] == old[n] for n in kernels)
    # every member the series does not touch is the release's
    touched = {c.path for c in [*built.plan.put, *built.plan.drop]}
    same = [n for n in old if n in new and n not in touched]
    assert all(new[n] == old[n] for n in same) and len(same) > 1000
    stored = {}
    for wheel in (release, built.path):
        with zipfile.ZipFile(wheel) as z:
            stored[wheel] = {i.filename: (i.compress_type, i.compress_size) for i in z.infolist()}
    assert [n for n in same if stored[built.path][n] != stored[release][n]] == []


@pytest.mark.slow
def test_the_installed_wheel_passes_the_contracts_and_the_release_fails_them(
    patched_env, release_env, tmp_path
):
    found, where, out = contracts(patched_env, None, contract.WITH_GUARDS, tmp_path)
    assert where.startswith(site_of(patched_env)), where  # the installed wheel, not vllm/
    for f, outcomes in found.items():
        ok = "passed" in outcomes and not {"failed", "error"} & set(outcomes)
        assert ok, f"{f}: {outcomes}\n{out}"
    found, where, _ = contracts(release_env, None, contract.CONTRACT, tmp_path)
    assert where.startswith(site_of(release_env)), where
    for f, outcomes in found.items():
        assert "failed" in outcomes, f"{f} passes on the plain release wheel: {outcomes}"


@pytest.mark.slow
@pytest.mark.parametrize("tag", KEPT)
def test_a_kept_line_s_installed_wheel_passes_its_contracts(
    real_wheel, scratch_venv, tmp_path, tag
):
    """The kept line's contracts on its installed wheel (that they fail on its plain release
    is its contract tier's check, on its tree)."""
    venv = scratch_venv(real_wheel(tag).path, tag)
    found, where, _ = contracts(venv, tag, contract.WITH_GUARDS, tmp_path)
    assert where.startswith(site_of(venv)), where
    for f, outcomes in found.items():
        assert "passed" in outcomes and not {"failed", "error"} & set(outcomes), (f, outcomes)


def cuda_stack(ws: Workspace) -> set[str]:
    """Distributions the release's requirements/cuda.txt adds to its common.txt."""
    pin = pinmod.load(ws.pin_file)

    def names(path: str) -> set[str]:
        out = set()
        text = gitmod.blob(ws.vllm, pin.commit, path).decode()
        for raw in text.splitlines():
            line = raw.split("#", 1)[0].strip()
            if line and not line.startswith("-"):  # -r common.txt
                out.add(canonicalize_name(Requirement(line).name))
        return out

    return names("requirements/cuda.txt") - names("requirements/common.txt")


def pip_check(venv: Path) -> list[tuple[str, str]]:
    """(distribution, requirement name) of each problem ``pip check`` reports."""
    said = re.compile(
        r"(\S+) \S+ (?:requires (\S+), which is not installed|has requirement (.+), but you have)"
    )
    out = []
    for line in pip(venv, "check").stdout.splitlines():
        m = said.match(line)
        assert m, line
        req = Requirement(m.group(2) or m.group(3))
        out.append((canonicalize_name(m.group(1)), canonicalize_name(req.name)))
    return out


@pytest.mark.slow
def test_pip_check_finds_only_the_cuda_stack_a_cpu_host_lacks(patched_env, release_env):
    problems = pip_check(patched_env)
    assert problems, "pip check found nothing: it did not see the release's requirements"
    assert {d for d, _ in problems} == {"vllm"}  # no other distribution broken
    assert {r for _, r in problems} <= cuda_stack(Workspace(ROOT))
    assert problems == pip_check(release_env)  # the series changes no requirement
    probe = "import importlib.metadata as m; print(m.metadata('vllm').get_all('Requires-Dist'))"
    meta = [
        subprocess.run(
            [v / "bin" / "python", "-c", probe],
            capture_output=True,
            text=True,
            env=clean_env(v),
            check=True,
        ).stdout
        for v in (patched_env, release_env)
    ]
    assert meta[0] == meta[1] and "Requires-Dist" not in meta[0] and len(meta[0]) > 100


@pytest.mark.slow
@pytest.mark.parametrize("tag", [None, *KEPT], ids=["main", *KEPT])
def test_the_recipe_installs_the_wheel_over_the_release(
    real_wheel, scratch_venv, context, tmp_path, tag
):
    """The recipe's commands, run in a virtual environment that matches the release image
    (the release wheel installed, vLLM's dependencies present): the image registry is not
    reachable here, so the image itself is not built."""
    built = real_wheel(tag)
    pin = pinmod.load(line_ws(tag).pin_file)
    venv = scratch_venv(fetch.fetch(pin.package, pin.wheel), tag)
    steps = recipe(DOCKERFILE)
    args = build_args(steps, VLLM_TAG=pin.tag)
    fs = tmp_path / "fs"  # the image's file system, for the paths the recipe names
    log = []
    for op, rest in steps:
        rest = expand(rest, args)
        if op == "COPY":
            src, dst = rest.split()
            shutil.copytree(context / src, fs / dst.lstrip("/"))
        elif op == "RUN":
            cmd = re.sub(r"(?<![\w.])/tmp/", f"{fs}/tmp/", rest)
            p = subprocess.run(
                ["/bin/sh", "-c", cmd],
                capture_output=True,
                text=True,
                env={**clean_env(venv), **args},
            )
            assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
            log.append(p.stdout)
    said = "".join(log)
    if tag is None:  # the main line's CLI answers on the CPU
        assert f"vllm --version: {built.version}\n" in said, said
    else:
        assert re.search(rf"(vllm --version|pip show vllm): {re.escape(built.version)}\b", said), (
            said
        )
    probe = "import importlib.metadata as m, vllm; print(m.version('vllm'), vllm.__file__)"
    out = subprocess.run(
        [venv / "bin" / "python", "-P", "-c", probe],
        capture_output=True,
        text=True,
        env=clean_env(venv),
    ).stdout.split()
    assert out[0] == built.version and out[1].startswith(site_of(venv)), out
