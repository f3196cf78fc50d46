"""rebase: move the series onto a newer upstream release and say what upstream has taken.

    scripts/rebase.sh v0.22.0 [--commit <40-hex id>] [--report PATH] [--no-contracts]
    scripts/rebase.sh --continue | --skip | --abort
    scripts/rebase.sh --check v0.33.0      # classify only; changes nothing

The new release is materialised into the same vllm/ repository as the pin, by git when the
upstream is reachable, else from its verified PyPI source release (a second root commit that
stands in for the tag's commit through refs/replace/, as materialise does for the pin). Each
patch is replayed with ``git am -3`` (merge-ort: 3-way, with rename detection) and classified
(vseries.classify). A conflict stops with the files and hunks and a state file under
``.vseries/rebase/``; ``--continue`` (also after a killed run), ``--skip`` and ``--abort``
(everything back as before: pin, patches/, vllm/ HEAD and branch, gitlink) take it from there.
On success the pin, patches/ and series, and the superproject's gitlink move to the new
release, and a Markdown report is written.
"""

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import requests
from packaging.utils import parse_wheel_filename

from vseries import apply, classify, fetch, git, materialise, paths, refresh, series
from vseries import pin as pinmod
from vseries.classify import Row
from vseries.errors import SeriesError

REFS = "refs/vseries/rebase/"
SHA1 = re.compile(r"^[0-9a-f]{40}$")
NOTE = "# rebase-note: "  # the pin line that says how the commit id was obtained
NEXT = "scripts/rebase.sh --continue | --skip | --abort"


def state_dir() -> Path:
    """``.vseries/rebase`` in the workspace root: state file, backups, reports."""
    return paths.state_dir() / "rebase"


def _state_file() -> Path:
    return state_dir() / "state.json"


def _save(st: dict) -> None:
    """Write the state file atomically (a kill leaves the old or the new one, never half),
    adding the time spent since the last save to ``elapsed_s`` (wall time over all runs)."""
    now = time.monotonic()
    st["elapsed_s"] = st.get("elapsed_s", 0.0) + now - st.get("_t0", now)
    st["_t0"] = now
    tmp = _state_file().with_suffix(".tmp")
    tmp.write_text(json.dumps(st, indent=1))
    tmp.replace(_state_file())


def _load() -> dict | None:
    f = _state_file()
    if not f.exists():
        return None
    st = json.loads(f.read_text())
    st["_t0"] = time.monotonic()  # time between runs (a fix by hand) is not counted
    return st


# ---- the new release: index look-ups and materialising into vllm/ ----------------------------


def lookup(project: str, version: str) -> tuple[pinmod.Artefact, pinmod.Artefact | None]:
    """The source release and the manylinux x86_64 wheel of ``version`` with their sha256,
    from PyPI's simple JSON index. Among several such wheels the highest build tag wins.

    Raises:
        SeriesError: the index is unreachable or lists no source release of that version.
    """
    try:
        r = requests.get(
            f"{fetch.INDEX}/{project}/",
            timeout=fetch.TIMEOUT_S,
            headers={"Accept": "application/vnd.pypi.simple.v1+json"},
        )
        r.raise_for_status()
        files = r.json().get("files", [])
    except (requests.RequestException, ValueError) as e:
        raise SeriesError(
            f"cannot read the package index {fetch.INDEX}/{project}/: {e}",
            "check the network or proxy, then run the same command again",
        ) from None
    sdist = next((f for f in files if f["filename"] == f"{project}-{version}.tar.gz"), None)
    if sdist is None:
        raise SeriesError(
            f"{fetch.INDEX}/{project}/ has no source release {project}-{version}"
            ".tar.gz; is the tag right?",
            f"pip index versions {project}",
        )
    wheels = []
    for f in files:
        if not f["filename"].endswith(".whl"):
            continue
        name, ver, build, tags = parse_wheel_filename(f["filename"])
        if str(ver) == version and any(
            t.platform.startswith("manylinux") and t.platform.endswith("x86_64") for t in tags
        ):
            wheels.append((build, f))
    art = lambda f: pinmod.Artefact(f["filename"], f["hashes"]["sha256"])  # noqa: E731
    return art(sdist), art(max(wheels, key=lambda w: w[0])[1]) if wheels else None


def _triton_of(torch_version: str) -> str | None:
    """The Triton version a torch release requires on Linux x86_64 (from the core metadata
    of its wheel on the index), or None when that cannot be read."""
    try:
        r = requests.get(
            f"{fetch.INDEX}/torch/",
            timeout=fetch.TIMEOUT_S,
            headers={"Accept": "application/vnd.pypi.simple.v1+json"},
        )
        f = next(
            f
            for f in r.json()["files"]
            if f["filename"].startswith(f"torch-{torch_version}-")
            and "manylinux" in f["filename"]
            and "x86_64" in f["filename"]
        )
        meta = requests.get(f["url"] + ".metadata", timeout=fetch.TIMEOUT_S).text
    except (requests.RequestException, ValueError, KeyError, StopIteration):
        return None
    m = re.search(r"^Requires-Dist: triton\s*(?:==|~=|>=)\s*([\w.]+)", meta, re.M)
    return m.group(1) if m else None


def add_release(repo: Path, tarball: Path, tag: str, commit: str | None, note: str) -> dict:
    """Add a source release to an existing repository as one more root commit, leaving the
    work tree, index, HEAD and branches alone.

    The commit is made exactly as materialise.repo_from_sdist makes it (same tree, identity,
    date and message), so a release gives the same commit id in both. A full 40-hex
    ``commit`` is made to resolve to it through ``refs/replace/<commit>``; a short id (what the
    source release's vllm/_version.py holds) cannot be a replace target, so then the release
    is known by the synthetic commit's own id.

    Args:
        repo: a git work tree (vllm/).
        tarball: the verified source release.
        tag: the release tag, e.g. "v0.22.0"; an annotated tag of that name is made.
        commit: the tag's upstream commit id (40 hex), or None to use the short id from the
            source release.
        note: where the release came from (recorded in the returned dict).

    Returns:
        {"base": id that resolves to the release in repo, "synthetic": the made commit,
         "upstream": full or short upstream id, "full": bool, "short_in_sdist": str | None,
         "refs": refs this call created}.

    Raises:
        SeriesError: the archive is not a source release; ``commit`` contradicts the short id
            the release names; the tag or replace ref exists and names another tree.
    """
    gitdir = Path(git.run(repo, "rev-parse", "--absolute-git-dir"))
    with tempfile.TemporaryDirectory(prefix="vseries-release-") as tmp:
        tree = Path(tmp, "tree")
        tree.mkdir()
        date = materialise._extract(tarball, tree)
        ver = tree / "vllm" / "_version.py"
        m = re.search(
            r"__commit_id__\s*=.*?['\"]g?([0-9a-f]{7,40})['\"]",
            ver.read_text() if ver.exists() else "",
        )
        short = m.group(1) if m else None
        if commit and short and not commit.startswith(short):
            raise SeriesError(
                f"--commit {commit} does not match the id {short} that "
                f"{tarball.name} names in vllm/_version.py"
            )
        upstream = commit or short
        if not upstream:
            raise SeriesError(
                f"{tarball.name} names no commit id (vllm/_version.py), and none was given",
                f"scripts/rebase.sh {tag} --commit <40-hex id>",
            )
        full = bool(SHA1.match(upstream))
        for rel in materialise.SDIST_ONLY:
            (tree / rel).unlink(missing_ok=True)
        for info in tree.glob("*.egg-info"):
            shutil.rmtree(info)
        env = {
            **materialise.IDENT,
            "GIT_AUTHOR_DATE": f"{date} +0000",
            "GIT_COMMITTER_DATE": f"{date} +0000",
            "GIT_INDEX_FILE": str(Path(tmp, "index")),
        }
        side = ["--git-dir", str(gitdir), "--work-tree", str(tree)]
        git.run(repo, *side, "add", "-A", "-f", env=env)
        tree_id = git.run(repo, *side, "write-tree", env=env)
    msg = f"vLLM {tag} from source release {tarball.name}\n\n" + (
        f"Stands in for upstream commit {upstream} through refs/replace/{upstream}.\n"
        if full
        else f"Stands in for upstream commit {upstream} (short id from "
        "vllm/_version.py; a short id cannot be a refs/replace/ target).\n"
    )
    synthetic = git.run(repo, "commit-tree", tree_id, "-m", msg.rstrip("\n"), env=env)
    base, made = (upstream if full else synthetic), []
    if full:
        have = git.rev(repo, upstream)
        if have is None:
            git.run(repo, "update-ref", f"refs/replace/{upstream}", synthetic)
            made.append(f"refs/replace/{upstream}")
        elif git.run(repo, "rev-parse", f"{have}^{{tree}}") != tree_id:
            raise SeriesError(
                f"{upstream[:12]} already resolves in {repo} to a different tree "
                f"than {tarball.name}",
                f"git -C vllm replace -l {upstream}",
            )
    have_tag = git.rev(repo, f"refs/tags/{tag}")
    if have_tag is None:
        git.run(repo, "tag", "-a", "-m", f"vLLM {tag}", tag, base, env=env)
        made.append(f"refs/tags/{tag}")
    elif git.run(repo, "rev-parse", f"{have_tag}^{{tree}}") != tree_id:
        raise SeriesError(
            f"vllm/ already has a tag {tag} on another tree than {tarball.name}",
            f"git -C vllm tag -d {tag}   # if it is stale; then run it again",
        )
    return {
        "base": base,
        "synthetic": synthetic,
        "upstream": upstream,
        "full": full,
        "short_in_sdist": short,
        "refs": made,
        "note": note,
    }


def _try_git(vdir: Path, repo_url: str, tag: str) -> dict | None:
    """Fetch the tag from upstream into vdir (bounded in time); None when unreachable."""
    if os.environ.get("VSERIES_OFFLINE") == "1":
        return None
    had = git.rev(vdir, f"refs/tags/{tag}")
    try:
        p = subprocess.run(
            [
                "git",
                "-C",
                str(vdir),
                "fetch",
                "-q",
                "--depth",
                "1",
                repo_url,
                f"refs/tags/{tag}:refs/tags/{tag}",
            ],
            capture_output=True,
            text=True,
            timeout=materialise.GIT_TIMEOUT_S,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
        )
    except subprocess.TimeoutExpired:
        print(f"rebase: git gave no answer in {materialise.GIT_TIMEOUT_S} s")
        return None
    if p.returncode != 0:
        print(f"rebase: git route failed ({(p.stderr.strip().splitlines() or ['?'])[-1]})")
        return None
    commit = git.rev(vdir, f"refs/tags/{tag}")
    return {
        "base": commit,
        "synthetic": None,
        "upstream": commit,
        "full": True,
        "short_in_sdist": None,
        "refs": [] if had else [f"refs/tags/{tag}"],
        "note": f"git {repo_url} tag {tag}",
    }


def new_release(vdir: Path, old: pinmod.Pin, tag: str, commit: str | None, route: str) -> dict:
    """Materialise ``tag`` into vdir and look up its release files; returns the release as a
    dict (keys of add_release plus tag, source, wheel, torch, triton, how)."""
    if not re.match(r"^v\d+(\.\d+)*\S*$", tag):
        raise SeriesError(
            f"{tag!r} is not a release tag (vX.Y.Z): PyPI knows releases by "
            "version, so the offline route needs the tag",
            "scripts/rebase.sh v0.22.0 [--commit <40-hex id of the tag>]",
        )
    version = tag.removeprefix("v")
    sdist, wheel = lookup(old.package, version)
    if wheel is None:
        raise SeriesError(
            f"the index lists no manylinux x86_64 wheel of {old.package} "
            f"{version}; the pin needs one for its prebuilt kernels"
        )
    rel = _try_git(vdir, old.repo, tag) if route in ("auto", "git") else None
    if rel is None and route == "git":
        raise SeriesError(
            "the git route failed and --source git was asked for",
            f"scripts/rebase.sh {tag}   # without --source, falls back to PyPI",
        )
    tarball = fetch.fetch(old.package, sdist)
    if rel is None:
        rel = add_release(
            vdir, tarball, tag, commit, f"sdist {sdist.filename} sha256={sdist.sha256}"
        )
        rel["how"] = f"verified source release {sdist.filename} (no git route); commit id " + (
            f"{rel['upstream']} given with --commit, checked against the id "
            f"{rel['short_in_sdist']} in its vllm/_version.py"
            if commit
            else f"taken from its vllm/_version.py: only the short id "
            f"{rel['upstream']} is known, so the pin records the synthetic "
            f"commit {rel['base'][:12]} and the gitlink is not moved (pass "
            "--commit <the tag's full 40-hex id> to record the real one)"
        )
    else:
        rel["how"] = rel["note"]
    reqs = ""
    with tempfile.TemporaryDirectory() as tmp:
        p = subprocess.run(
            [
                "tar",
                "-xzf",
                str(tarball),
                "-C",
                tmp,
                "--no-same-owner",
                f"{old.package}-{version}/requirements/cuda.txt",
            ],
            capture_output=True,
        )
        if p.returncode == 0:
            reqs = Path(tmp, f"{old.package}-{version}/requirements/cuda.txt").read_text()
    m = re.search(r"^torch==([\w.]+)", reqs, re.M)
    torch = m.group(1) if m else old.torch
    triton = old.triton if torch == old.torch else (_triton_of(torch) or old.triton)
    rel.update(
        tag=tag,
        source=[sdist.filename, sdist.sha256],
        wheel=[wheel.filename, wheel.sha256],
        torch=torch,
        triton=triton,
        triton_known=torch == old.torch or triton != old.triton,
    )
    return rel


# ---- starting, replaying, finishing ----------------------------------------------------------


def _preflight(vdir: Path, pin: pinmod.Pin, entries: list[series.Entry]) -> None:
    git.require_checkout(vdir)
    git.require_clean(
        vdir, "a rebase could lose", "git -C vllm stash   # or commit them and scripts/refresh.sh"
    )
    want = apply.wanted_ids(vdir, entries)
    tips = {git.rev(vdir, "HEAD"), git.rev(vdir, apply.BRANCH)} - {None}
    foreign = [
        c
        for t in sorted(tips)
        if git.ok(vdir, "merge-base", "--is-ancestor", pin.commit, t)
        for c in apply._foreign_commits(vdir, pin.commit, t, want)
    ]
    if foreign:
        raise SeriesError(
            "vllm/ holds commits that patches/ does not (the rebase replays "
            "patches/):\n" + "\n".join(f"  {c}" for c in dict.fromkeys(foreign)),
            "scripts/refresh.sh   # export them first",
        )


def _gitlink(root: Path) -> str | None:
    """The superproject's gitlink of vllm/ (its index entry), or None when root is no repo."""
    if not (root / ".git").exists():
        return None
    out = git.run(root, "ls-files", "-s", "vllm", check=False)
    return out.split()[1] if out.startswith("160000 ") else None


def start(
    target: str,
    commit: str | None = None,
    route: str = "auto",
    contracts: bool = True,
    check: bool = False,
    report: Path | None = None,
) -> int:
    """Begin a rebase of the series onto ``target`` (or, with check, only classify).

    Returns:
        0 when every patch was decided; 1 when --check found a conflict.

    Raises:
        SeriesError: a rebase is already in progress; vllm/ is missing, busy, dirty or holds
            commits outside the series; the tag is unknown; a conflict stopped the replay
            (the state is kept; the message names the files, hunks and next commands).
    """
    st = _load()
    if st is not None:
        raise SeriesError(
            f"a rebase onto {st['target']} is already in progress (state in {_state_file()})", NEXT
        )
    pin = pinmod.load()
    entries = series.load()
    vdir = paths.vllm_dir()
    if not check:
        _preflight(vdir, pin, entries)
    else:
        git.require_checkout(vdir, idle=False)
    if target == pin.tag:
        if check:  # the weekly CI check when no newer release is out: nothing to report
            print(f"rebase --check: the series is already on {target}; nothing to check")
            return 0
        raise SeriesError(f"the series is already on {target}")
    sd = state_dir()
    shutil.rmtree(sd / "backup", ignore_errors=True)  # a leftover of a start that failed early
    (sd / "backup").mkdir(parents=True)
    shutil.copy2(paths.root() / "upstream.toml", sd / "backup" / "upstream.toml")
    shutil.copytree(paths.patches_dir(), sd / "backup" / "patches")
    head, branch = git.rev(vdir, "HEAD"), git.head_branch(vdir)
    git.run(vdir, "update-ref", REFS + "orig-head", head)
    if git.rev(vdir, apply.BRANCH):
        git.run(vdir, "update-ref", REFS + "orig-series", git.rev(vdir, apply.BRANCH))
    # The refs that materialising the release may add (removed again by --abort); saved
    # before anything is made, so that a run killed in the middle can still be aborted.
    made = [
        r
        for r in (f"refs/tags/{target}", commit and f"refs/replace/{commit}")
        if r and git.rev(vdir, r) is None
    ]
    st = {
        "version": 1,
        "status": "starting",
        "target": target,
        "commit": commit,
        "route": route,
        "check": check,
        "contracts": contracts,
        "report": str(report) if report else None,
        "old": {"tag": pin.tag, "commit": pin.commit, "source": pin.source.filename},
        "orig_head": head,
        "orig_branch": branch,
        "gitlink": _gitlink(paths.root()),
        "refs": made,
        "_t0": time.monotonic(),
        "elapsed_s": 0.0,
    }
    _save(st)
    try:
        rel = new_release(vdir, pin, target, commit, route)
    except SeriesError:  # an unknown tag, no network ...: leave no rebase behind
        abort(quiet=True)
        raise
    # The series on the old pin, made afresh from patches/ (the same ids apply gives): the
    # left side of every range-diff, and proof that the series applies where it claims to.
    git.run(vdir, "checkout", "-q", "--detach", pin.commit)
    old = []
    for e in entries:
        out = apply.am(vdir, e.path)
        if git.in_progress(vdir):
            why = apply.explain(vdir, e.path, out)
            abort(quiet=True)
            raise SeriesError(
                f"{e.name} does not apply on the current pin {pin.tag}; nothing "
                f"was changed; fix the series first:\n{why}",
                "scripts/apply.sh --keep-conflict",
            )
        old.append(git.rev(vdir, "HEAD"))
    if old:
        git.run(vdir, "update-ref", REFS + "old-tip", old[-1])
    git.run(vdir, "checkout", "-q", "--detach", rel["base"])
    st.update(
        status="replaying",
        new=rel,
        next=0,
        head=rel["base"],
        rows=[
            Row(e.name, series.subject(e.path), old=c, options=e.options).to_dict()
            for e, c in zip(entries, old, strict=True)
        ],
    )
    _save(st)
    print(f"rebase: {pin.tag} -> {target} ({rel['how']}); replaying {len(entries)} patches")
    return _run(st)


def _run(st: dict) -> int:
    """Replay from st["next"] on, then finish; the shared tail of start and --continue."""
    _replay(st)
    return _finish(st)


def _upstream_tree(vdir: Path, base: str, name: str = "upstream") -> Path:
    """A detached worktree of plain upstream at ``base`` (new upstream by default, or the old
    pin with name="old-pin"), for the contract runs."""
    dest = state_dir() / name
    if not git.is_repo(dest) or git.rev(dest, "HEAD") != git.rev(vdir, base):
        if dest.exists():
            git.run(vdir, "worktree", "remove", "--force", str(dest), check=False)
            shutil.rmtree(dest, ignore_errors=True)
        git.run(vdir, "worktree", "prune")
        git.run(vdir, "worktree", "add", "-q", "--detach", str(dest), base)
    return dest


def _contract(st: dict, row: Row) -> tuple[str, str] | None:
    test = row.options.get("contract")
    if not test or not st["contracts"]:
        return None
    if not (paths.root() / test).exists():
        return "undecided", f"contract {test} does not exist in this workspace"
    known = st.setdefault("verdicts", {})  # plain upstream does not change during a rebase
    if test not in known:
        known[test] = classify.contract_verdict(
            test, _upstream_tree(paths.vllm_dir(), st["new"]["base"])
        )
        _save(st)
    return tuple(known[test])


def _kept_part(st: dict, row: Row) -> list[str]:
    """Contract tests of the patch that fail on the old pin but pass on plain new upstream:
    the part of the patch's promise upstream now keeps by itself (cached like verdicts)."""
    test = row.options.get("contract")
    if not test or not st["contracts"] or not (paths.root() / test).exists():
        return []
    known = st.setdefault("kept", {})
    if test not in known:
        vdir = paths.vllm_dir()
        known[test] = classify.contract_kept(
            test,
            _upstream_tree(vdir, st["old"]["commit"], "old-pin"),
            _upstream_tree(vdir, st["new"]["base"]),
        )
        _save(st)
    return list(known[test])


def _conflict_text(vdir: Path, patch: Path, out: str) -> str:
    unmerged = list(dict.fromkeys(git.run(vdir, "diff", "--name-only", "--diff-filter=U").split()))
    files = f"  unmerged files: {', '.join(unmerged)}\n" if unmerged else ""
    hunks = "".join(
        f"  {h}\n"
        for h in classify.conflict_hunks(vdir, unmerged, patch.read_text(errors="replace"))
    )
    if not hunks:  # no 3-way merge happened (e.g. a blob is missing): where apply stops
        return files + apply.explain(vdir, patch, out)
    said = re.findall(r"CONFLICT \([^)]*\): .*", out)
    return files + hunks + "".join(f"  {c}\n" for c in dict.fromkeys(said))


def _replay(st: dict) -> None:
    """Decide every patch from st["next"] on, saving the state after each decision."""
    vdir, tag = paths.vllm_dir(), st["new"]["tag"]
    pdir = state_dir() / "backup" / "patches"
    while st["next"] < len(st["rows"]):
        row = Row(**st["rows"][st["next"]])
        patch = pdir / row.name
        text = patch.read_text(errors="replace")
        row.cls, row.evidence, row.new = "", [], ""  # a redo after a kill starts afresh
        if classify.reverse_applies(vdir, patch):
            row.cls = classify.UPSTREAMED
            row.evidence.append(
                f"applies in reverse on {tag} (git apply -R --check): the change is already there"
            )
        if classify.same_patch_id(vdir, text, st["old"]["commit"], st["new"]["base"]):
            row.cls = classify.UPSTREAMED
            row.evidence.append(
                f"upstream's own diff {st['old']['tag']}..{tag} of the same "
                "files has the patch's patch-id (git patch-id --stable)"
            )
        if row.cls:
            _decided(st, row)
            continue
        before = git.rev(vdir, "HEAD")
        # diff3: conflict regions also show the base, i.e. what upstream changed
        out = apply.am(vdir, patch, "-c", "merge.conflictStyle=diff3")
        if git.in_progress(vdir):
            why = _conflict_text(vdir, patch, out)
            verdict = _contract(st, row)
            if verdict and verdict[0] == "pass":
                git.run(vdir, "am", "--abort")
                row.cls = classify.UPSTREAMED
                row.evidence += [
                    f"contract {row.options['contract']} passes on plain {tag} ({verdict[1]})",
                    "the patch itself conflicts there:\n" + why,
                ]
                _decided(st, row)
                continue
            row.cls = classify.CONFLICT
            row.evidence.append(f"conflicts on {tag}:\n" + why)
            if verdict:
                row.evidence.append(
                    f"not fully upstream: contract {row.options['contract']} "
                    f"{verdict[0]}s on plain {tag} ({verdict[1]})"
                    if verdict[0] == "fail"
                    else f"contract could not decide: {verdict[1]}"
                )
            kept = _kept_part(st, row) if verdict and verdict[0] == "fail" else []
            if kept:
                row.evidence.append(
                    f"partly upstream by the contract: {', '.join(kept)} fail on "
                    f"{st['old']['tag']} and pass on plain {tag}"
                )
            if st["check"]:  # record it and go on without this patch, as --skip would
                git.run(vdir, "am", "--abort")
                _decided(st, row)
                continue
            st["rows"][st["next"]] = row.to_dict()
            st["status"] = "conflict"
            _save(st)
            raise SeriesError(
                f"patch {row.name} conflicts on {tag} + the patches before it; the git am "
                f"session is open in vllm/:\n{why}\n" + "\n".join(row.evidence[1:]),
                "fix the files in vllm/ and git -C vllm add them, then "
                "scripts/rebase.sh --continue   # or --skip (drop it) or --abort",
            )
        if git.rev(vdir, "HEAD") == before:
            row.cls = classify.UPSTREAMED
            row.evidence.append(
                f"git am -3 on {tag}: the 3-way merge leaves nothing to change "
                '("No changes -- Patch already applied")'
            )
            _decided(st, row)
            continue
        _carried(st, row, text, threeway="3-way merge" in out)


def _carried(st: dict, row: Row, text: str, threeway: bool, resolved: bool = False) -> None:
    """Classify a patch that is now a commit on HEAD (clean, 3-way, partly upstreamed, by
    hand), or drop it again when its contract shows plain upstream already keeps it."""
    vdir, tag = paths.vllm_dir(), st["new"]["tag"]
    row.new = git.rev(vdir, "HEAD")
    replayed = git.run(vdir, "show", "--format=", "--full-index", "-M", row.new)
    moved, dropped, added = classify.compare(text, replayed)
    verdict = _contract(st, row)
    if verdict and verdict[0] == "pass":
        git.run(vdir, "checkout", "-q", "--detach", "HEAD~1")
        row.cls, row.new = classify.UPSTREAMED, ""
        row.evidence.append(
            f"contract {row.options['contract']} passes on plain {tag} "
            f"({verdict[1]}); the patch still applied textually and is dropped"
        )
        _decided(st, row)
        return
    made = classify.upstream_made(
        vdir,
        st["old"]["commit"],
        st["new"]["base"],
        classify.touched(text) + classify.touched(replayed),
    )
    taken = classify.part_of_the_way(text, replayed, made)
    if taken:  # the replay starts from lines upstream wrote on the way to the patch's
        row.cls = classify.PARTLY
        row.evidence += [
            f"{tag} already went part of the way: it has `{ln.strip()}`" for ln in taken
        ]
        row.evidence.append(
            "the rest is carried (the refreshed patch changes only that)"
            + ("; the conflict was resolved by hand" if resolved else "")
        )
    elif resolved or added:
        row.cls = classify.RESOLVED
        row.evidence.append(
            "the conflict was resolved by hand; see the range-diff"
            + (
                ""
                if added or dropped
                else "; the patch's own changed lines "
                "are unchanged, only the code around them differs"
            )
        )
    elif dropped:
        row.cls = classify.PARTLY
        row.evidence += [f"already on {tag}, so dropped by the 3-way merge: {d}" for d in dropped]
        row.evidence.append(
            "the rest is carried (the refreshed patch holds only what is still missing)"
        )
    else:
        row.cls = classify.THREE_WAY if threeway else classify.CLEAN
    row.evidence += moved
    if verdict:
        row.evidence.append(
            f"still needed: contract {row.options['contract']} fails on plain {tag} ({verdict[1]})"
            if verdict[0] == "fail"
            else f"contract could not decide: {verdict[1]}"
        )
    kept = _kept_part(st, row) if verdict and verdict[0] == "fail" else []
    if kept:  # upstream keeps part of the contract: partly upstreamed, the rest carried
        row.cls = classify.PARTLY
        row.evidence.append(
            f"partly upstream by the contract: {', '.join(kept)} fail on "
            f"{st['old']['tag']} and pass on plain {tag}"
        )
    _decided(st, row)


def _decided(st: dict, row: Row) -> None:
    vdir = paths.vllm_dir()
    print(
        f"  {row.name}: {row.cls}"
        + (f" ({row.evidence[0].splitlines()[0]})" if row.evidence else "")
    )
    st["rows"][st["next"]] = row.to_dict()
    st["next"] += 1
    st["head"] = git.rev(vdir, "HEAD")
    st["status"] = "replaying"
    _save(st)


def _write_pin(rel: dict) -> None:
    old = pinmod.load()
    pinmod.dump(
        pinmod.Pin(
            repo=old.repo,
            package=old.package,
            tag=rel["tag"],
            commit=rel["base"],
            source=pinmod.Artefact(*rel["source"]),
            wheel=pinmod.Artefact(*rel["wheel"]),
            torch=rel["torch"],
            triton=rel["triton"],
        )
    )
    path = paths.root() / "upstream.toml"
    lines = [
        ln.replace(f"torch {old.torch}", f"torch {rel['torch']}") if ln.startswith("#") else ln
        for ln in path.read_text().splitlines(keepends=True)
        if not ln.startswith(NOTE)
    ]  # comments that name the torch version follow it
    if not rel["full"]:
        i = next(i for i, ln in enumerate(lines) if ln.startswith("commit = "))
        lines.insert(
            i,
            f"{NOTE}commit is the synthetic commit made from {rel['source'][0]}; "
            f"upstream's id is known only as {rel['upstream']} (vllm/_version.py). "
            "With the full id: git -C vllm replace <full id> <this commit>, put "
            "the full id here, git update-index --cacheinfo 160000,<full id>,vllm\n",
        )
    path.write_text("".join(lines))


def _finish(st: dict) -> int:
    """Everything after the last patch: report; and unless --check, move the series branch,
    pin, patches/, series and gitlink to the new release."""
    vdir, root, rel = paths.vllm_dir(), paths.root(), st["new"]
    rows = [Row(**r) for r in st["rows"]]
    conflicts = [r for r in rows if r.cls == classify.CONFLICT]
    st["status"] = "finishing"
    _save(st)  # also counts the time up to here into elapsed_s
    notes = []
    if not st["check"]:
        stamp = st.setdefault("stamp", time.strftime("%Y%m%d-%H%M%S"))
        if git.rev(vdir, REFS + "orig-series"):
            git.run(
                vdir,
                "update-ref",
                f"refs/vseries/backup/rebase-{stamp}",
                git.rev(vdir, REFS + "orig-series"),
            )
            notes.append(
                f"the old branch {apply.BRANCH} is kept as refs/vseries/backup/rebase-{stamp}"
            )
        git.run(vdir, "checkout", "-q", "-B", apply.BRANCH)
        _write_pin(rel)
        refresh.refresh(prune=True)  # upstreamed and skipped patches leave the series
        header, _ = series.read()
        carried = [r for r in rows if r.new]
        new_entries = series.load(validate=False)
        if len(new_entries) != len(carried):
            raise SeriesError(
                f"refresh exported {len(new_entries)} patches but {len(carried)} "
                "were carried; the state is kept",
                NEXT,
            )
        series.write(
            header,
            [series.Entry(e.name, c.options) for e, c in zip(new_entries, carried, strict=True)],
        )
        link = _gitlink(root)
        if link and rel["full"]:
            git.run(root, "update-index", "--cacheinfo", f"160000,{rel['base']},vllm")
            notes.append(f"gitlink vllm moved to {rel['base'][:12]} (staged in the superproject)")
        elif link:
            notes.append(
                f"gitlink NOT moved: the upstream id of {rel['tag']} is known only as "
                f"{rel['upstream']}"
            )
        keep = state_dir() / f"backup-{st['old']['tag']}-{stamp}"
        if (state_dir() / "backup").exists():  # not yet moved by an earlier, killed finish
            (state_dir() / "backup").rename(keep)
        notes.append(f"the old pin and patches/ are kept in {keep.relative_to(root)}")
    head = {
        "title": f"Rebase of the series: {st['old']['tag']} -> {rel['tag']}"
        + (" (--check: nothing changed)" if st["check"] else ""),
        "lines": [
            f"old pin: {st['old']['tag']} {st['old']['commit']} ({st['old']['source']})",
            f"new upstream: {rel['tag']} {rel['upstream']}; {rel['how']}",
            f"pin: wheel {rel['wheel'][0]}, torch {rel['torch']}, triton "
            f"{rel['triton']}"
            + ("" if rel["triton_known"] else " (kept: torch's Triton could not be read)"),
            f"result: {len([r for r in rows if r.new])} carried, "
            f"{len([r for r in rows if r.cls == classify.UPSTREAMED])} upstreamed, "
            f"{len(conflicts)} conflicts, "
            f"{len([r for r in rows if r.cls == classify.SKIPPED])} skipped",
            f"wall time: {st['elapsed_s']:.1f} s",
            *notes,
        ],
    }
    text = classify.report(vdir, head, rows)
    out = (
        Path(st["report"])
        if st["report"]
        else (None if st["check"] else state_dir() / f"report-{rel['tag']}.md")
    )
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    print(text + (f"\nrebase: report written to {out}" if out else ""))
    for name in ("upstream", "old-pin"):  # the contract runs' worktrees
        if (state_dir() / name).exists():
            git.run(vdir, "worktree", "remove", "--force", str(state_dir() / name), check=False)
            shutil.rmtree(state_dir() / name, ignore_errors=True)
    git.run(vdir, "worktree", "prune")
    _drop_refs(vdir, [REFS + n for n in ("orig-head", "orig-series", "old-tip")])
    st["status"] = "done"
    _state_file().unlink()
    if conflicts and st["check"]:
        print(
            f"rebase: {len(conflicts)} patch(es) would conflict on {rel['tag']}; to rebase for "
            f"real and fix them by hand: scripts/rebase.sh {rel['tag']} (then --continue each)"
        )
    return 1 if conflicts else 0


# ---- --continue, --skip, --abort -------------------------------------------------------------


def _need_state() -> dict:
    st = _load()
    if st is None:
        raise SeriesError("no rebase is in progress", "scripts/rebase.sh <tag>")
    return st


def resume() -> int:
    """--continue: after a hand fix of a conflict, or after a run that was killed midway.

    Raises:
        SeriesError: unmerged files remain; the fix changes nothing (use --skip).
    """
    st = _need_state()
    vdir = paths.vllm_dir()
    if st["status"] == "starting":  # killed before the replay began: begin once more
        abort(quiet=True)
        print(f"rebase: the last run stopped before replaying; starting again on {st['target']}")
        return start(
            st["target"],
            st["commit"],
            st["route"],
            st["contracts"],
            st["check"],
            Path(st["report"]) if st["report"] else None,
        )
    row = Row(**st["rows"][st["next"]]) if st["next"] < len(st["rows"]) else None
    if st["status"] == "conflict" and git.in_progress(vdir):
        unmerged = git.run(vdir, "diff", "--name-only", "--diff-filter=U").split()
        if unmerged:
            raise SeriesError(
                f"still unmerged in vllm/: {', '.join(unmerged)}",
                "fix them, git -C vllm add <files>, scripts/rebase.sh --continue",
            )
        # am does not keep --committer-date-is-author-date across --continue: pass the date
        text = (state_dir() / "backup" / "patches" / row.name).read_text(errors="replace")
        m = re.search(r"^Date: (.+)$", text, re.M)
        env = {**apply.AM_ENV, **({"GIT_COMMITTER_DATE": m.group(1)} if m else {})}
        out = git.run(vdir, "am", "--continue", check=False, env=env)
        if git.in_progress(vdir):
            raise SeriesError(
                f"git am --continue did not finish:\n{out.strip()[-600:]}",
                "scripts/rebase.sh --skip   # when the fix leaves nothing to add",
            )
    if st["status"] == "conflict" and git.rev(vdir, "HEAD") != st["head"]:
        text = (state_dir() / "backup" / "patches" / row.name).read_text(errors="replace")
        files = next(
            (m.group(1) for e in row.evidence if (m := re.search(r"unmerged files: (.*)", e))), ""
        )
        row.evidence = [
            "conflicted on the 3-way merge"
            + (f" in {files}" if files else "")
            + "; fixed by hand and continued"
        ]
        row.cls = ""
        _carried(st, row, text, threeway=True, resolved=True)
    elif st["status"] in ("replaying", "conflict"):
        # Killed midway (or the am session was ended by hand): go back to the last decision
        # and redo the patch after it, so that none is lost or applied twice.
        if git.in_progress(vdir):
            git.run(vdir, "am", "--abort", check=False)
        git.run(vdir, "checkout", "-q", "-f", "--detach", st["head"])
        print(f"rebase: resuming at patch {st['next'] + 1} of {len(st['rows'])}")
    return _run(st)


def skip() -> int:
    """--skip: drop the conflicting patch (recorded in the report) and go on."""
    st = _need_state()
    if st["status"] != "conflict":
        raise SeriesError("--skip drops a conflicting patch, and none is waiting", NEXT)
    vdir = paths.vllm_dir()
    if git.in_progress(vdir):
        git.run(vdir, "am", "--abort", check=False)
    git.run(vdir, "checkout", "-q", "-f", "--detach", st["head"])
    row = Row(**st["rows"][st["next"]])
    row.cls, row.new = classify.SKIPPED, ""
    row.evidence.insert(0, "dropped by the user with --skip after a conflict")
    _decided(st, row)
    return _run(st)


def _drop_refs(vdir: Path, refs: list[str]) -> None:
    for r in refs:
        git.run(vdir, "update-ref", "-d", r, check=False)


def _snapshot(path: Path) -> dict[str, bytes]:
    """{relative name: bytes} of a file or of the files in a folder (for "did it change?")."""
    if path.is_file():
        return {path.name: path.read_bytes()}
    return (
        {str(f.relative_to(path)): f.read_bytes() for f in sorted(path.rglob("*")) if f.is_file()}
        if path.is_dir()
        else {}
    )


def abort(quiet: bool = False) -> int:
    """--abort: put back everything as it was before the rebase began: vllm/ HEAD and branch
    (and the series branch's tip), the pin, patches/, the gitlink; remove the refs it made.
    Works in every state, also after a run killed midway or in the finishing steps."""
    st = _need_state()
    vdir, root = paths.vllm_dir(), paths.root()
    backup = state_dir() / "backup"
    if git.in_progress(vdir):
        git.run(vdir, "am", "--abort", check=False)
    git.run(vdir, "checkout", "-q", "-f", "--detach", st["orig_head"])
    orig_series = git.rev(vdir, REFS + "orig-series")
    if orig_series and git.rev(vdir, apply.BRANCH) != orig_series:
        git.run(vdir, "update-ref", f"refs/heads/{apply.BRANCH}", orig_series)
    if st["orig_branch"]:
        git.run(vdir, "checkout", "-q", "-f", st["orig_branch"])
    if (backup / "upstream.toml").exists() and _snapshot(backup / "upstream.toml") != _snapshot(
        root / "upstream.toml"
    ):
        shutil.copy2(backup / "upstream.toml", root / "upstream.toml")
    if (backup / "patches").exists() and _snapshot(backup / "patches") != _snapshot(
        paths.patches_dir()
    ):
        shutil.rmtree(paths.patches_dir(), ignore_errors=True)
        shutil.copytree(backup / "patches", paths.patches_dir())
    if st["gitlink"] and _gitlink(root) != st["gitlink"]:
        git.run(root, "update-index", "--cacheinfo", f"160000,{st['gitlink']},vllm")
    for name in ("upstream", "old-pin"):  # the contract runs' worktrees
        if (state_dir() / name).exists():
            git.run(vdir, "worktree", "remove", "--force", str(state_dir() / name), check=False)
            shutil.rmtree(state_dir() / name, ignore_errors=True)
    git.run(vdir, "worktree", "prune")
    _drop_refs(vdir, st["refs"] + [REFS + n for n in ("orig-head", "orig-series", "old-tip")])
    shutil.rmtree(backup, ignore_errors=True)
    _state_file().unlink()
    if not quiet:
        print(
            f"rebase: aborted; vllm/ is back at {st['orig_branch'] or st['orig_head'][:12]}, "
            f"the pin at {st['old']['tag']}, patches/ as before"
        )
    return 0


# ---- --check: the same, in a throw-away copy ---------------------------------------------------


@contextmanager
def _scratch_workspace():
    """A temporary workspace: upstream.toml and patches/ copied, vllm/ a clone that borrows
    the real one's objects (read-only) and has its HEAD, tags and replace refs. VSERIES_ROOT
    points at it inside the block."""
    real_root, real_vdir = paths.root(), paths.vllm_dir()
    git.require_checkout(real_vdir, idle=False)
    common = Path(git.run(real_vdir, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    with tempfile.TemporaryDirectory(prefix="vseries-check-") as tmp:
        ws = Path(tmp)
        shutil.copy2(real_root / "upstream.toml", ws)
        shutil.copytree(paths.patches_dir(), ws / "patches")
        for extra in ("tests", "vseries", "pyproject.toml"):  # contract tests, what they use
            src = real_root / extra
            if src.is_dir():
                shutil.copytree(src, ws / extra, ignore=shutil.ignore_patterns("__pycache__"))
            elif src.exists():
                shutil.copy2(src, ws / extra)
        vdir = ws / "vllm"
        vdir.mkdir()
        git.run(vdir, "init", "-q")
        (vdir / ".git" / "objects" / "info" / "alternates").write_text(f"{common}/objects\n")
        git.run(
            vdir,
            "fetch",
            "-q",
            str(real_vdir),
            "refs/replace/*:refs/replace/*",
            "refs/tags/*:refs/tags/*",
        )
        git.run(vdir, "checkout", "-q", "--detach", pinmod.load().commit)
        saved = os.environ.get("VSERIES_ROOT")
        os.environ["VSERIES_ROOT"] = str(ws)
        try:
            yield ws
        finally:
            if saved is None:
                os.environ.pop("VSERIES_ROOT", None)
            else:
                os.environ["VSERIES_ROOT"] = saved


def check(
    target: str,
    commit: str | None = None,
    route: str = "auto",
    contracts: bool = True,
    report: Path | None = None,
) -> int:
    """Classify the series against ``target`` without changing the workspace.

    Returns:
        0 when every patch would be carried or is upstreamed; 1 when one conflicts.
    """
    report = report.resolve() if report else None
    with _scratch_workspace():
        return start(target, commit, route, contracts, check=True, report=report)


# ---- command line ----------------------------------------------------------------------------


def main(args) -> int:
    if args.abort:
        return abort()
    if args.skip:
        return skip()
    if args.cont:
        return resume()
    if not args.target:
        raise SeriesError("name the release to rebase onto", "scripts/rebase.sh v0.22.0")
    if args.commit and not SHA1.match(args.commit):
        raise SeriesError(f"--commit {args.commit!r} is not a full 40-hex commit id")
    if args.check:
        return check(args.target, args.commit, args.source, not args.no_contracts, args.report)
    return start(args.target, args.commit, args.source, not args.no_contracts, report=args.report)


def add_parser(sub) -> None:
    p = sub.add_parser("rebase", help="rebase the series onto a newer upstream release")
    p.add_argument("target", nargs="?", help="release tag, e.g. v0.22.0")
    p.add_argument(
        "--commit",
        help="the tag's full 40-hex upstream commit id, when the source "
        "release only names a short one (checked against it)",
    )
    p.add_argument(
        "--source",
        choices=("auto", "git", "sdist"),
        default="auto",
        help="where the new release comes from (auto: git, then PyPI)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="classify only, in a temporary copy; exit 1 when a patch conflicts",
    )
    p.add_argument("--report", type=Path, help="write the Markdown report here")
    p.add_argument(
        "--no-contracts",
        action="store_true",
        help="do not run the patches' contract tests on plain upstream",
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--continue",
        dest="cont",
        action="store_true",
        help="go on after fixing a conflict, or after an interrupted run",
    )
    g.add_argument("--skip", action="store_true", help="drop the conflicting patch and go on")
    g.add_argument("--abort", action="store_true", help="put everything back as before")
    p.set_defaults(func=main)
