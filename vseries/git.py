"""Thin wrappers over the git command line (the real git; no library re-implements am).

Every git call of the package goes through ``run`` (raises on failure) or ``call`` (never
raises), with the same fixed settings, an optional timeout, and no terminal prompts; the
worktree helpers make and remove the extra checkouts the verbs need.
"""

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from vseries.errors import SeriesError

# Seconds a network git call (fetch, submodule update, ls-remote) may take before its route
# counts as unreachable; VSERIES_GIT_TIMEOUT overrides it.
NETWORK_TIMEOUT_S = int(os.environ.get("VSERIES_GIT_TIMEOUT", "300"))


def offline() -> bool:
    """True when VSERIES_OFFLINE=1: the git routes to upstream are not tried (the package
    index still is)."""
    return os.environ.get("VSERIES_OFFLINE") == "1"


# Settings that would change what format-patch or am produce; fixed so that output is the
# same on every machine whatever the user's ~/.gitconfig says.
STABLE = [
    "-c",
    "core.quotePath=true",
    "-c",
    "diff.noprefix=false",
    "-c",
    "diff.mnemonicPrefix=false",
    "-c",
    "diff.algorithm=myers",
    "-c",
    "diff.renames=true",
    "-c",
    "diff.relative=false",
    "-c",
    "format.signature=",
    "-c",
    "format.coverLetter=false",
    "-c",
    "format.numbered=false",
    "-c",
    "am.keepcr=false",
    "-c",
    "am.threeWay=true",
    "-c",
    "color.ui=false",
    "-c",
    "advice.detachedHead=false",
    "-c",
    "commit.gpgSign=false",
]


class GitError(SeriesError):
    """A git command exited non-zero; ``output`` holds what it printed."""

    def __init__(self, args: list[str], output: str, cwd: Path):
        self.args_ = args
        self.output = output
        # a git that was killed (Ctrl-C, a crash) leaves its lock behind; every later git
        # command that writes then fails on it
        lock = re.search(r"Unable to create '([^']+\.lock)': File exists", output)
        fix = (
            f"rm -f {lock.group(1)}   # when no other git command runs in {cwd.name}/"
            if lock
            else None
        )
        super().__init__(f"git {' '.join(args)} failed in {cwd}:\n{output.strip()}", fix)


@dataclass
class Result:
    """What one git call gave: exit code (124 when it ran past its timeout), stdout, stderr."""

    code: int
    out: str
    err: str

    @property
    def ok(self) -> bool:
        return self.code == 0


def call(
    repo: Path,
    *args: str,
    env: dict | None = None,
    input: str | None = None,
    timeout: float | None = None,
) -> Result:
    """Run ``git -C repo <args>`` with the stable settings; never raises.

    Args:
        env: extra environment variables (on top of os.environ, LC_ALL=C, no prompts).
        input: text for git's stdin.
        timeout: seconds; past it the call is killed and gives code 124.
    """
    full_env = {**os.environ, "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0", **(env or {})}
    try:
        p = subprocess.run(
            ["git", "-C", str(repo), *STABLE, *args],
            capture_output=True,
            text=True,
            errors="replace",  # a binary patch or file name must not raise here
            env=full_env,
            input=input,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return Result(124, "", f"no answer within {timeout:g} s")
    return Result(p.returncode, p.stdout, p.stderr)


def run(
    repo: Path,
    *args: str,
    check: bool = True,
    env: dict | None = None,
    input: str | None = None,
    timeout: float | None = None,
) -> str:
    """Run ``git -C repo <args>`` with the stable settings; return stdout (stripped of one
    trailing newline).

    Raises:
        GitError: when check is true and git exits non-zero or runs past ``timeout`` seconds
            (stdout+stderr in .output).
    """
    r = call(repo, *args, env=env, input=input, timeout=timeout)
    if check and not r.ok:
        raise GitError(list(args), r.out + r.err, repo)
    return r.out[:-1] if r.out.endswith("\n") else r.out


def blob(repo: Path, rev: str, path: str) -> bytes | None:
    """The bytes of ``path`` at ``rev`` exactly as committed (no newline translation), or None
    when ``rev`` has no such file."""
    p = subprocess.run(
        ["git", "-C", str(repo), *STABLE, "cat-file", "blob", f"{rev}:{path}"],
        capture_output=True,
        env={**os.environ, "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0"},
    )
    return p.stdout if p.returncode == 0 else None


def ok(repo: Path, *args: str) -> bool:
    """True when ``git -C repo <args>`` exits 0."""
    return call(repo, *args).ok


def tracked(repo: Path, path: str) -> bool:
    """True when the git repository at ``repo`` tracks ``path`` (relative to it)."""
    return ok(repo, "ls-files", "--error-unmatch", "--", path)


def is_repo(path: Path) -> bool:
    """True when path is the top of a git work tree (a checkout, not just inside one)."""
    if not path.is_dir() or not (path / ".git").exists():
        return False
    top = run(path, "rev-parse", "--show-toplevel", check=False)
    return bool(top) and Path(top).resolve() == path.resolve()


def rev(repo: Path, ref: str) -> str | None:
    """The commit id that ref names, or None when it names none."""
    out = run(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    return out or None


def head_branch(repo: Path) -> str | None:
    """The branch HEAD is on (short name), or None when HEAD is detached."""
    return run(repo, "symbolic-ref", "--quiet", "--short", "HEAD", check=False) or None


def dirty(repo: Path) -> list[str]:
    """``git status --porcelain`` lines for tracked changes and untracked, non-ignored files."""
    out = run(repo, "status", "--porcelain", "--ignore-submodules=all")
    return [line for line in out.splitlines() if line]


def require_clean(repo: Path, problem: str, hint: str) -> None:
    """Raise SeriesError naming up to 10 uncommitted paths of repo, when it has any.

    problem completes "<repo>/ has uncommitted changes ...", e.g. "a rebase could lose".
    """
    changed = dirty(repo)
    if changed:
        raise SeriesError(
            f"{repo.name}/ has uncommitted changes {problem}:\n"
            + "\n".join(f"  {d}" for d in changed[:10]),
            hint,
        )


# the marker an unfinished operation leaves in the git dir, what it is, the git verb that
# continues or aborts it (git am's marker is inside rebase-apply, so it comes first)
_BUSY = (
    ("rebase-apply/applying", "git am", "am"),
    ("rebase-apply", "git rebase", "rebase"),
    ("rebase-merge", "git rebase", "rebase"),
    ("MERGE_HEAD", "git merge", "merge"),
    ("CHERRY_PICK_HEAD", "git cherry-pick", "cherry-pick"),
)


def _busy(repo: Path) -> tuple[str, str] | None:
    gitdir = Path(run(repo, "rev-parse", "--absolute-git-dir"))
    return next(((what, verb) for name, what, verb in _BUSY if (gitdir / name).exists()), None)


def in_progress(repo: Path) -> str | None:
    """Name an unfinished am / rebase / merge / cherry-pick in repo, else None."""
    busy = _busy(repo)
    return busy[0] if busy else None


def require_no_rebase_run(state_file: Path) -> None:
    """The precondition of a verb a user runs on vllm/ (apply, refresh, build), besides
    ``require_checkout``: no ``scripts/rebase.sh`` run is stopped. Its state file
    (Workspace.rebase_state) says one is: that run owns vllm/, upstream.toml and patches/
    until its own --continue or --abort (a bare ``git am --abort`` would leave the pin and the
    series half-moved). Rebase itself calls those verbs' functions while its state exists, so
    the check is their command's, not their function's.

    Raises:
        SeriesError: a rebase.sh run is stopped.
    """
    if state_file.exists():
        raise SeriesError(
            "a scripts/rebase.sh run is stopped; it owns vllm/ until it is finished",
            "scripts/rebase.sh --continue   # after fixing its conflicts; or "
            "scripts/rebase.sh --abort (puts vllm/, upstream.toml and patches/ back)",
        )


def require_checkout(repo: Path, idle: bool = True) -> None:
    """The precondition every verb that works in vllm/ shares.

    Raises:
        SeriesError: ``repo`` is not a git checkout (not materialised yet), or, when ``idle``,
            an am, rebase, merge or cherry-pick is unfinished in it.
    """
    if not is_repo(repo):
        raise SeriesError(f"{repo} is not materialised", "scripts/setup.sh")
    if not idle:
        return
    busy = _busy(repo)
    if busy is None:
        return
    what, verb = busy
    git_c = f"git -C {repo.name}"
    then = " (then scripts/refresh.sh)" if verb == "am" else ""
    raise SeriesError(
        f"{repo} is in the middle of a {what}; finish it first",
        f"{git_c} {verb} --continue   # after fixing{then}; or {git_c} {verb} --abort",
    )


def patch_id(repo: Path, diff_text: str) -> str | None:
    """``git patch-id --stable`` of a diff or patch email; None when it holds no diff."""
    out = run(repo, "patch-id", "--stable", input=diff_text)
    return out.split()[0] if out else None


def same_message(a: str, b: str) -> bool:
    """Two commit messages equal up to whitespace (line wrapping, trailing blank lines)."""
    return a.split() == b.split()


def gitlink(superproject: Path, path: str = "vllm") -> str | None:
    """The commit a superproject's index records for submodule ``path`` (its gitlink), or
    None when the folder is no git repository or has no such entry."""
    if not (superproject / ".git").exists():
        return None
    out = run(superproject, "ls-files", "-s", path, check=False)
    return out.split()[1] if out.startswith("160000 ") else None


def commit_patch_ids(repo: Path, base: str, tip: str) -> list[tuple[str, str]]:
    """(commit, patch-id) of each commit in base..tip, oldest first."""
    commits = run(repo, "rev-list", "--reverse", f"{base}..{tip}").split()
    result = []
    for c in commits:
        diff = run(repo, "show", "--format=", "--full-index", c)
        result.append((c, patch_id(repo, diff) or ""))
    return result


# ---- extra checkouts of a repository ---------------------------------------------------------


def _common_dir(repo: Path) -> Path:
    return Path(run(repo, "rev-parse", "--path-format=absolute", "--git-common-dir")).resolve()


def add_worktree(repo: Path, dest: Path, commit: str) -> Path:
    """A detached worktree of ``repo`` at ``commit`` in ``dest``: made on first use, moved
    back to ``commit`` (discarding changes and untracked files in it: it is ours) when it has
    moved or is dirty,
    remade when ``dest`` is no worktree of ``repo`` (none, or one of another repository: a
    workspace copied with its scratch keeps the original's worktree links). Returns dest."""
    if not is_repo(dest) or _common_dir(dest) != _common_dir(repo):
        shutil.rmtree(dest, ignore_errors=True)
        run(repo, "worktree", "prune")
        run(repo, "worktree", "add", "-q", "--detach", str(dest), commit)
    elif rev(dest, "HEAD") != rev(repo, commit) or dirty(dest):
        run(dest, "checkout", "-q", "-f", "--detach", commit)
        # untracked files too (a module copied in by hand would make the base pass a
        # contract); not ignored ones: the release kernels linked into the tree stay
        run(dest, "clean", "-q", "-fd")
    return dest


def remove_worktree(repo: Path, dest: Path) -> None:
    """Remove a worktree of ``repo`` (and whatever is left of its folder); never raises."""
    if dest.exists():
        call(repo, "worktree", "remove", "--force", str(dest))
        shutil.rmtree(dest, ignore_errors=True)
    call(repo, "worktree", "prune")


@contextmanager
def temp_worktree(repo: Path, commit: str, parent: Path | None = None) -> Iterator[Path]:
    """A detached worktree of ``repo`` at ``commit`` in a new temporary folder (under
    ``parent`` when given) for the block; removed afterwards, whatever happens."""
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="vseries-wt-", dir=parent))
    dest = scratch / "worktree"
    try:
        run(repo, "worktree", "add", "-q", "--detach", str(dest), commit)
        yield dest
    finally:
        remove_worktree(repo, dest)
        shutil.rmtree(scratch, ignore_errors=True)
