"""Thin wrappers over the git command line (the real git; no library re-implements am)."""

import os
import subprocess
import tempfile
from pathlib import Path

from vseries.errors import SeriesError

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
        super().__init__(f"git {' '.join(args)} failed in {cwd}:\n{output.strip()}")


def run(
    repo: Path, *args: str, check: bool = True, env: dict | None = None, input: str | None = None
) -> str:
    """Run ``git -C repo <args>`` with the stable settings; return stdout (stripped of one
    trailing newline).

    Raises:
        GitError: when check is true and git exits non-zero (stdout+stderr in .output).
    """
    full_env = {**os.environ, "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0", **(env or {})}
    p = subprocess.run(
        ["git", "-C", str(repo), *STABLE, *args],
        capture_output=True,
        text=True,
        env=full_env,
        input=input,
    )
    if check and p.returncode != 0:
        raise GitError(list(args), p.stdout + p.stderr, repo)
    out = p.stdout
    return out[:-1] if out.endswith("\n") else out


def ok(repo: Path, *args: str) -> bool:
    """True when ``git -C repo <args>`` exits 0."""
    return (
        subprocess.run(
            ["git", "-C", str(repo), *STABLE, *args],
            capture_output=True,
            env={**os.environ, "LC_ALL": "C"},
        ).returncode
        == 0
    )


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


def in_progress(repo: Path) -> str | None:
    """Name an unfinished am / rebase / merge / cherry-pick in repo, else None."""
    gitdir = Path(run(repo, "rev-parse", "--absolute-git-dir"))
    for name, what in (
        ("rebase-apply", "git am or rebase"),
        ("rebase-merge", "git rebase"),
        ("MERGE_HEAD", "git merge"),
        ("CHERRY_PICK_HEAD", "git cherry-pick"),
    ):
        if (gitdir / name).exists():
            return what
    return None


def require_checkout(repo: Path, idle: bool = True) -> None:
    """The precondition every verb that works in vllm/ shares.

    Raises:
        SeriesError: ``repo`` is not a git checkout (not materialised yet), or, when ``idle``,
            an am / rebase / merge / cherry-pick is unfinished in it.
    """
    if not is_repo(repo):
        raise SeriesError(f"{repo} is not materialised", "scripts/setup.sh")
    busy = in_progress(repo) if idle else None
    if busy:
        raise SeriesError(
            f"{repo} is in the middle of a {busy}; finish it first",
            f"git -C {repo.name} am --continue   # after fixing (then scripts/refresh.sh); "
            f"or git -C {repo.name} am --abort",
        )


def patch_id(repo: Path, diff_text: str) -> str | None:
    """``git patch-id --stable`` of a diff or patch email; None when it holds no diff."""
    out = run(repo, "patch-id", "--stable", input=diff_text)
    return out.split()[0] if out else None


def patch_message(repo: Path, patch_text: str) -> str:
    """The commit message ``git am -k`` makes of a patch email (``git mailinfo -k``)."""
    with tempfile.TemporaryDirectory() as tmp:
        msg, pat = Path(tmp, "msg"), Path(tmp, "patch")
        info = run(repo, "mailinfo", "-k", str(msg), str(pat), input=patch_text)
        subject = next((ln[9:] for ln in info.splitlines() if ln.startswith("Subject: ")), "")
        return f"{subject}\n\n{msg.read_text(errors='replace')}"


def same_message(a: str, b: str) -> bool:
    """Two commit messages equal up to whitespace (line wrapping, trailing blank lines)."""
    return a.split() == b.split()


def commit_patch_ids(repo: Path, base: str, tip: str) -> list[tuple[str, str]]:
    """(commit, patch-id) of each commit in base..tip, oldest first."""
    commits = run(repo, "rev-list", "--reverse", f"{base}..{tip}").split()
    result = []
    for c in commits:
        diff = run(repo, "show", "--format=", "--full-index", c)
        result.append((c, patch_id(repo, diff) or ""))
    return result
