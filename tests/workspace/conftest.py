"""Fixtures: the real pinned tree (built once from the verified source release), throw-away
workspace copies that point VSERIES_ROOT at it, small synthetic repos, and a local package
index served on 127.0.0.1 for the download tests. And the tier check: the tests not marked
``slow`` that went past the fast tier's budget, named in a report at the end of the run (see the
end of this file)."""

import dataclasses
import hashlib
import http.server
import json
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from vseries import fetch, linesite, release
from vseries import pin as pinmod
from vseries.errors import SeriesError
from vseries.workspace import Workspace

ROOT = Path(__file__).resolve().parents[2]

# Generated bad input (hypothesis) never decides a run by chance or by the host's speed: the
# examples follow from each test's name, and no health check times their generation (CI on a
# busy 2-core host once failed test_series_versions_sort_by_the_series_last_change with
# "Input generation is slow": 2 inputs in 1.98 s).
settings.register_profile(
    "workspace", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("workspace")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture(scope="session")
def pin() -> pinmod.Pin:
    return pinmod.load(ROOT / "upstream.toml")


def materialised(p: pinmod.Pin) -> Path | None:
    """The workspace's own tree of pin ``p`` (vllm/, or a kept line's
    .vseries/lines/<tag>/vllm) when scripts/setup.sh made it from p's verified source release:
    it holds the very commit release.repo_from_sdist makes of that release (the same files,
    identity and date give the same id), so a clone that borrows its objects stands in for
    building the tree again (20-40 s on 2 cores). None when there is no such tree (set-up not
    run, the git route, another pin)."""
    note = f"sdist {p.source.filename} sha256={p.source.sha256}"
    for tree in (ROOT / "vllm", ROOT / ".vseries" / "lines" / p.tag / "vllm"):
        probe = ["git", "-C", str(tree)]
        if not (tree / ".git").exists():
            continue
        said = subprocess.run([*probe, "config", "--get", "vseries.source"], capture_output=True)
        has = subprocess.run(
            [*probe, "rev-parse", "-q", "--verify", f"{p.commit}^{{commit}}"], capture_output=True
        )
        if said.stdout.decode().strip() == note and has.returncode == 0:
            return tree
    return None


def clone_pinned(src: Path, dest: Path, commit: str, checkout: bool = True) -> None:
    """A cheap clone of a materialised tree, replace refs and tags included; checkout=False:
    HEAD at ``commit`` and no files written (enough to clone, archive or add worktrees)."""
    dest.mkdir(parents=True)
    git(dest, "init", "-q")
    # borrow the objects (like clone --shared); a plain clone would fail on the detached HEAD
    # that only resolves through the replace ref it has not fetched yet
    objects = git(src, "rev-parse", "--path-format=absolute", "--git-path", "objects")
    (dest / ".git" / "objects" / "info" / "alternates").write_text(f"{objects}\n")
    git(dest, "fetch", "-q", str(src), "refs/replace/*:refs/replace/*", "refs/tags/*:refs/tags/*")
    if checkout:
        git(dest, "checkout", "-q", "--detach", commit)
    else:  # what checkout --detach writes, without the 5,000 files (1-7 s on a slow disk)
        (dest / ".git" / "HEAD").write_text(commit + "\n")
    git(dest, "config", "vseries.source", "clone of the test tree")


@pytest.fixture(scope="session")
def pristine_of(tmp_path_factory):
    """pristine_of(pin): the real vLLM tree of any pin (a kept line's too) as a git repo at
    the pinned id, made once per session: a clone of the workspace's own tree of that pin
    where set-up made one from the same source release (materialised; no files checked out),
    else built from the cached source release. Read-only: tests clone it (clone_pinned),
    archive it or add worktrees."""
    made: dict[str, Path] = {}

    def get(p: pinmod.Pin) -> Path:
        if p.commit not in made:
            dest = tmp_path_factory.mktemp(f"pristine-{p.tag}") / "vllm"
            own = materialised(p)
            if own is not None:
                clone_pinned(own, dest, p.commit, checkout=False)
            else:
                tarball = fetch.fetch(p.package, p.source)
                release.repo_from_sdist(tarball, dest, p.commit, p.tag, "sdist (test)")
            made[p.commit] = dest
        return made[p.commit]

    return get


@pytest.fixture(scope="session")
def pristine(pristine_of, pin) -> Path:
    """The real vLLM tree of the pin as a git repo at the pinned id (pristine_of)."""
    return pristine_of(pin)


def line_dirs() -> list[Path]:
    """Where the series' lines keep their pin and patches: the root (main line) and each
    lines/<tag>/ (kept lines)."""
    return [ROOT, *sorted(p.parent for p in (ROOT / "lines").glob("*/upstream.toml"))]


def line_site(tag: str) -> list[str]:
    """The kept line ``tag``'s own packages as PYTHONPATH entries: its folder
    ``.vseries/lines/<tag>/site`` (scripts/setup.sh), when this venv lacks what it holds. A
    test that imports that line's tree (or a release near it) from this venv needs it, as the
    line's contract runs have it (the main venv holds only what the main line needs)."""
    return [str(p) for p in linesite.pythonpath(Workspace(ROOT, tag))]


@pytest.fixture
def ws_before(tmp_path, pristine_of, monkeypatch):
    """ws_before(tag): a workspace copy of the newest line (main or kept) whose pin is older
    than release ``tag``, with its pin and series and vllm/ at its pin; None when no line is
    older (the series has moved past ``tag``). Tests of real rebases use it, so that moving the
    main pin keeps them running from a kept line; then that line's own packages are on
    PYTHONPATH (line_site), for the copy's contract runs on its trees and on the releases
    after it."""
    from packaging.version import Version

    def make(tag: str) -> Path | None:
        older = [
            (pinmod.load(d / "upstream.toml"), d)
            for d in line_dirs()
            if Version(pinmod.load(d / "upstream.toml").version) < Version(tag[1:])
        ]
        if not older:
            return None
        p, d = max(older, key=lambda x: Version(x[0].version))
        root = tmp_path / "ws"
        root.mkdir()
        shutil.copy(d / "upstream.toml", root)
        shutil.copytree(d / "patches", root / "patches")
        clone_pinned(pristine_of(p), root / "vllm", p.commit)
        monkeypatch.setenv("VSERIES_ROOT", str(root))
        if d != ROOT:
            path = [*line_site(d.name), os.environ.get("PYTHONPATH", "")]
            monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, path)))
        return root

    return make


class Trees:
    """Clones of the pinned tree that the ws fixture lends and takes back, reset. Checking
    one out writes 5,000 files (1-5 s, most of it the disk); putting one back at the pin
    after a test rewrites only what the test changed. A tree that does not come back exactly
    as it was lent (HEAD at the pin, nothing changed, untracked or ignored, the same refs and
    config, no other worktree, no am in progress) is thrown away."""

    def __init__(self, base: Path, pristine: Path, commit: str):
        self.base, self.pristine, self.commit = base, pristine, commit
        self.free: list[Path] = []
        self.made = 0
        self.free.append(self._new())  # made with the session fixture, not by the first test

    def _new(self) -> Path:
        self.made += 1
        tree = self.base / f"tree-{self.made}"
        clone_pinned(self.pristine, tree, self.commit)
        shutil.copy(tree / ".git" / "config", tree / ".git" / "vseries-lent-config")
        (tree / ".git" / "vseries-lent-refs").write_text(git(tree, "for-each-ref"))
        return tree

    def lend(self, dest: Path) -> None:
        """A clean clone at the pin, moved to ``dest``."""
        (self.free.pop() if self.free else self._new()).rename(dest)

    def take_back(self, tree: Path) -> None:
        """Reset ``tree`` to the pin and keep it for the next test, or throw it away."""
        home = self.base / f"free-{len(self.free)}-{self.made}-{tree.parent.parent.name}"
        try:
            self._reset(tree)
            tree.rename(home)
            self.free.append(home)
        except (subprocess.CalledProcessError, AssertionError, OSError):
            shutil.rmtree(tree, ignore_errors=True)

    def _reset(self, tree: Path) -> None:
        gitdir = tree / ".git"
        for line in git(tree, "worktree", "list", "--porcelain").splitlines()[1:]:
            if line.startswith("worktree "):
                git(tree, "worktree", "remove", "--force", line.split(" ", 1)[1])
        git(tree, "worktree", "prune")
        for busy in ("rebase-apply", "rebase-merge"):
            shutil.rmtree(gitdir / busy, ignore_errors=True)
        for name in ("MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD", "MERGE_MSG", "AUTO_MERGE"):
            (gitdir / name).unlink(missing_ok=True)
        shutil.copy(gitdir / "vseries-lent-config", gitdir / "config")
        refs = (gitdir / "vseries-lent-refs").read_text()
        git(tree, "checkout", "-f", "-q", "--detach", self.commit)
        git(tree, "clean", "-ffdxq")
        lent = set(refs.splitlines())
        for line in git(tree, "for-each-ref").splitlines():
            if line not in lent:
                git(tree, "update-ref", "-d", line.split("\t", 1)[1])
        assert git(tree, "for-each-ref") == refs
        assert git(tree, "rev-parse", "HEAD") == git(tree, "rev-parse", f"{self.commit}^{{commit}}")
        assert git(tree, "status", "--porcelain", "--ignored") == ""


@pytest.fixture(scope="session")
def trees(tmp_path_factory, pristine, pin) -> Trees:
    return Trees(tmp_path_factory.mktemp("real-trees"), pristine, pin.commit)


@pytest.fixture
def ws(tmp_path, trees, monkeypatch) -> Path:
    """A workspace copy with the real pin and series, and vllm/ at the pin (a tree of
    ``trees``, given back reset after the test)."""
    root = tmp_path / "ws"
    root.mkdir()
    shutil.copy(ROOT / "upstream.toml", root)
    shutil.copytree(ROOT / "patches", root / "patches")
    trees.lend(root / "vllm")
    monkeypatch.setenv("VSERIES_ROOT", str(root))
    yield root
    if (root / "vllm" / ".git").is_dir():
        trees.take_back(root / "vllm")


def tiny_workspace(root: Path) -> Path:
    """Make a synthetic workspace at root: a small upstream repo whose 'release' commit is
    the pin, and an empty series."""
    up = root / "vllm"
    up.mkdir(parents=True)
    git(up, "init", "-q")
    (up / "a.py").write_text("".join(f"line {i}\n" for i in range(1, 41)))
    (up / "b.py").write_text("x = 1\n")
    git(up, "add", ".")
    git(up, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "release")
    commit = git(up, "rev-parse", "HEAD")
    git(up, "checkout", "-q", "--detach")
    git(up, "config", "vseries.source", "synthetic")
    text = (
        (ROOT / "upstream.toml")
        .read_text()
        .replace(pinmod.load(ROOT / "upstream.toml").commit, commit)
    )
    (root / "upstream.toml").write_text(text)
    (root / "patches").mkdir()
    (root / "patches" / "series").write_text("")
    return root


def pin_with(ws, files: dict[str, str]) -> None:
    """Add ``files`` to the tiny workspace's release commit (the pin moves with it)."""
    vdir = ws / "vllm"
    for name, text in files.items():
        (vdir / name).write_text(text)
    git(vdir, "add", "-A")
    git(vdir, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--amend", "-m", "r")
    commit = git(vdir, "rev-parse", "HEAD")
    git(vdir, "checkout", "-q", "--detach")
    pin_file = ws / "upstream.toml"
    pinmod.dump(dataclasses.replace(pinmod.load(pin_file), commit=commit), pin_file)


@pytest.fixture
def tiny(tmp_path, monkeypatch) -> Path:
    """A synthetic workspace (tiny_workspace) that VSERIES_ROOT points at."""
    root = tiny_workspace(tmp_path / "tiny")
    monkeypatch.setenv("VSERIES_ROOT", str(root))
    return root


def script_env(clone: Path, venv: Path) -> dict:
    """The environment of a user whose virtual environment is active: this interpreter's, with
    its requirements stamp already matching the clone's files (so _venv.sh installs nothing
    into the shared venv: an install there would point this interpreter's vseries at the
    clone, which a later pytest run deletes). The stamp is what _venv.sh's own ``wanted``
    prints in the clone."""
    venv.mkdir()
    stamp = subprocess.run(
        ["bash", "-c", ". scripts/_venv_wanted.sh && wanted"],
        cwd=clone,
        capture_output=True,
        check=True,
    ).stdout
    (venv / ".vseries-requirements").write_bytes(stamp)
    env = {k: v for k, v in os.environ.items() if k != "VSERIES_ROOT"}
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return env


def make_patch(repo: Path, out: Path, edit, subject: str) -> Path:
    """Commit ``edit(repo)`` on a scratch branch at HEAD, export it, and go back."""
    start = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "scratch")
    edit(repo)
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qs", "-m", subject)
    name = git(repo, "format-patch", "-k", "--zero-commit", "--no-signature", "-1", "-o", str(out))
    git(repo, "checkout", "-q", "--detach", start)
    git(repo, "branch", "-q", "-D", "scratch")
    return Path(name)


def run_next(root: Path, message: str) -> subprocess.CompletedProcess:
    """Run the command of an error's ``next:`` line in root as a user would: the part before
    its ``#`` comment, each ``scripts/<verb>.sh`` as the ``python -m vseries <verb>`` it
    execs (with VSERIES_ROOT from the environment); ``git commit`` gets an identity and an
    editor that writes a subject."""
    line = message.split("\n  next: ", 1)[1].splitlines()[0]
    cmd = line.split("   #", 1)[0].strip()
    cmd = re.sub(r"scripts/(\w+)\.sh", f"{shlex.quote(sys.executable)} -m vseries \\1", cmd)
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "u",
        "GIT_AUTHOR_EMAIL": "u@u",
        "GIT_COMMITTER_NAME": "u",
        "GIT_COMMITTER_EMAIL": "u@u",
        "GIT_EDITOR": "sed -i '1s/^/[P] my work/'",
    }
    return subprocess.run(["bash", "-c", cmd], cwd=root, env=env, capture_output=True, text=True)


def follow_hints(root: Path, verb, steps: int = 4) -> list[str]:
    """Call verb() and, while it raises SeriesError, run its next: command (and, when that
    command fails, the next: command of its error), at most ``steps`` commands. Returns the
    commands run; fails the test when verb() still raises after them."""
    done: list[str] = []
    while True:
        try:
            verb()
            return done
        except SeriesError as e:
            message = str(e)
        while True:  # until a command succeeds; a failing one's error has its own next:
            if len(done) == steps:
                raise AssertionError(f"the next: commands led nowhere: {done}")
            done.append(message.split("\n  next: ", 1)[1].splitlines()[0])
            r = run_next(root, message)
            if r.returncode == 0:
                break
            assert "\n  next: " in r.stderr, f"{done[-1]} failed: {r.stdout}{r.stderr}"
            message = r.stderr


class _Index(http.server.BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}

    def log_message(self, *a):
        pass

    def do_GET(self):
        if self.path.startswith("/simple/"):
            body = json.dumps(
                {
                    "files": [
                        {
                            "filename": n,
                            "url": f"http://{self.headers['Host']}/files/{n}",
                            "hashes": {"sha256": hashlib.sha256(d).hexdigest()},
                        }
                        for n, d in self.files.items()
                    ]
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        name = self.path.rsplit("/", 1)[-1]
        data = self.files.get(name)
        if data is None:
            self.send_error(404)
            return
        start = 0
        rng = self.headers.get("Range")
        # recorded before answering: the client may assert as soon as it has the bytes
        type(self).ranges.append(rng)
        if rng:
            start = int(rng.split("=")[1].split("-")[0])
            if start >= len(data):
                self.send_response(416)
                self.end_headers()
                return
            self.send_response(206)
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        self.wfile.write(data[start:])


@pytest.fixture
def index(monkeypatch):
    """A package index on 127.0.0.1 serving the bytes put in ``index.files[name]``; records
    the Range headers it was sent in ``index.ranges``."""
    handler = type("Index", (_Index,), {"files": {}, "ranges": []})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    monkeypatch.setattr(fetch, "INDEX", f"http://127.0.0.1:{srv.server_address[1]}/simple")
    yield handler
    srv.shutdown()


# ---- the tier check ----------------------------------------------------------------------------
# A test's tier is chosen by what it costs: one not marked slow should use at most SLOW_AFTER_S
# seconds of CPU (its process and the processes it ran, waited for: what a 2-core host pays)
# and WALL_FACTOR times that in wall time (a test that sleeps or waits on a time-out). Setup,
# call and teardown count, less the session- and module-scoped fixtures it happened to set up
# first (paid once per worker, whichever test comes first). A test past that budget is named in
# a report at the end of the run, which does not change the run's verdict: a test near the
# budget crosses it on a busy host by chance. The run fails only on a test not marked slow that
# used FAIL_FACTOR times the CPU budget (a slow test without its marker: a real rebase, a
# build): CPU time hardly grows on a busy host, so no healthy run comes near that; wall time,
# which a busy host stretches without bound, never fails the run. VSERIES_SLOW_AFTER_S changes
# the budget; 0 turns the check off.
SLOW_AFTER_S = float(os.environ.get("VSERIES_SLOW_AFTER_S", "5"))
WALL_FACTOR = 6
FAIL_FACTOR = 10
# Tests measured past the limit in files this branch leaves to another: the marker belongs on
# the test itself; move it there with the file's next change and drop the line here.
MEASURED_SLOW = {
    "tests/workspace/test_benchmarks.py::test_warmup_enumeration_measures_the_series_walk_on_cpu",
}


@pytest.hookimpl(tryfirst=True)  # before -m "not slow" deselects
def pytest_collection_modifyitems(items):
    """The slow tests first (stable otherwise): spread over workers, the longest start first
    and the short ones fill the gaps (scripts/test.sh runs the full tier on two workers)."""
    for item in items:
        if item.nodeid in MEASURED_SLOW:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_configure(config):
    # a plugin of its own, not conftest hooks: a session-scoped fixture is set up under the
    # session's node, where the hooks of this folder's conftest are not called
    if SLOW_AFTER_S > 0:
        config.pluginmanager.register(TierCheck(), "vseries-tier-check")


def clock() -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process and its waited-for children)."""
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return time.perf_counter(), me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


class TierCheck:
    """Measures each test where it runs (a worker), judges on the controller (or the one
    process without xdist); the measure travels in the teardown report's user_properties."""

    def __init__(self):
        self.start = (0.0, 0.0)  # (wall, CPU) when the current test's setup began
        self.shared = [0.0, 0.0]  # (wall, CPU) of shared fixtures set up during it
        self.took: dict[str, tuple[float, float]] = {}  # node id -> (wall, CPU), not slow

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef):
        before = clock()
        yield
        if fixturedef.scope != "function":
            after = clock()
            self.shared[0] += after[0] - before[0]
            self.shared[1] += after[1] - before[1]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self):
        self.start, self.shared = clock(), [0.0, 0.0]
        yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item):
        yield
        end = clock()  # before the teardown report is made, which carries the properties
        item.user_properties.append(("tier_wall_s", end[0] - self.start[0] - self.shared[0]))
        item.user_properties.append(("tier_cpu_s", end[1] - self.start[1] - self.shared[1]))

    def pytest_runtest_logreport(self, report):
        if report.when != "teardown" or "slow" in report.keywords:
            return
        props = dict(report.user_properties)
        if "tier_cpu_s" in props:
            self.took[report.nodeid] = (props["tier_wall_s"], props["tier_cpu_s"])

    def pytest_sessionfinish(self, session):
        """Name the tests not marked slow that went past the budget; fail the run on those
        past FAIL_FACTOR times the CPU budget."""
        if hasattr(session.config, "workerinput"):
            return
        over = sorted(
            (cpu, wall, n)
            for n, (wall, cpu) in self.took.items()
            if cpu > SLOW_AFTER_S or wall > WALL_FACTOR * SLOW_AFTER_S
        )[::-1]
        if not over:
            return
        failing = [n for cpu, _, n in over if cpu > FAIL_FACTOR * SLOW_AFTER_S]
        text = (
            f"{len(over)} test(s) not marked slow went past the fast tier's budget of "
            f"{SLOW_AFTER_S:g} s of CPU ({WALL_FACTOR * SLOW_AFTER_S:g} s of wall time) each:\n"
            + "\n".join(
                f"{cpu:6.1f} s CPU {wall:6.1f} s wall  {n}"
                + ("   <- fails the run" if n in failing else "")
                for cpu, wall, n in over
            )
            + "\nmake them cheaper or mark them @pytest.mark.slow. "
            + (
                f"{len(failing)} used more than {FAIL_FACTOR}x the CPU budget "
                f"({FAIL_FACTOR * SLOW_AFTER_S:g} s): that fails the run."
                if failing
                else f"A report, not a failure: only more than {FAIL_FACTOR}x the CPU budget "
                f"({FAIL_FACTOR * SLOW_AFTER_S:g} s) fails the run."
            )
            + " (VSERIES_SLOW_AFTER_S=<seconds> sets the budget, 0 turns this check off)"
        )
        tr = session.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.write("\n")  # the progress line ends without one
            tr.write_sep("=", "tier check", red=bool(failing), yellow=not failing)
            tr.write_line(text)
        else:
            print(text, file=sys.stderr)
        if failing and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
