"""The patches' contracts on plain upstream, as evidence for the rebase.

A patch's contract (tests/contract/..., named by ``contract=`` in patches/series) is run on
plain new upstream (and, for the part upstream took, on the old pin) with every CUDA device
hidden: the part of the contract that decides on the CPU (patch 2's oracle table, patch 3's
static JIT check, patch 1's PTX check) runs the same on every host, and GPU parts skip. Plain
upstream does not change during a rebase, so each answer is computed once and kept in the
rebase state.
"""

from pathlib import Path

from vseries import contract, git, linesite
from vseries.workspace import Workspace

# how pytest's JUnit report starts the message of a failed assertion (or pytest.fail)
_ASSERTED = ("AssertionError", "assert ", "Failed:")


def verdict(
    test: str, tree: Path, root: Path, paths: list[Path] = ()
) -> tuple[str, str, list[str]]:
    """Run a patch's contract on plain upstream (``tree``), CUDA hidden.

    Only an assertion decides: a test that fails with AssertionError (or pytest.fail) says
    the change is still needed; a run where tests pass and none fails on an assertion says
    upstream keeps the contract (skipped tests are named). A failure of another kind (an
    ImportError because upstream moved the module, a TypeError because an API changed) means
    the contract could not reach the code it checks in this release, and decides nothing;
    neither does a run where everything skipped (e.g. a GPU-only test).

    Args:
        test: contract test file, relative to the workspace root ``root``.
        paths: folders put on PYTHONPATH after the tree (a kept line's own packages).

    Returns:
        ("pass" | "fail" | "undecided", a sentence with pytest's closing line and the reason,
        the names of the tests that passed: what kept() compares the old pin with).
    """
    r = contract.run_one(test, tree, root=root, cpu_only=True, paths=paths)
    passed = [c.name for c in r.cases if c.kind == "passed"]
    said, why = _verdict(r)
    return said, why, passed


def _verdict(r: contract.Result) -> tuple[str, str]:
    """The verdict and its sentence, from one contract run (see verdict)."""
    failed = [c for c in r.cases if c.kind in ("failure", "error")]
    asserted = [c for c in failed if c.summary.startswith(_ASSERTED)]
    skipped = [c for c in r.cases if c.kind == "skipped"]
    skips = ""
    if skipped:
        why = skipped[0].summary
        gpu = " (the rebase runs contracts with CUDA hidden)" if _mentions_gpu(why) else ""
        skips = f"; skipped: {why.splitlines()[0][:120]}{gpu}"
    if asserted:
        c = asserted[0]
        return "fail", f"{r.line}; {c.name}: {c.summary.splitlines()[0][:160]}"
    if failed:
        return "undecided", (
            f"{r.line}; it could not reach the code it checks in this release "
            f"({failed[0].summary.splitlines()[0][:160]}), so it has to be brought "
            "up to date for it"
        )
    if r.code == 0 and any(c.kind == "passed" for c in r.cases):
        return "pass", r.line + skips
    return "undecided", (
        f"nothing passed or failed: {r.line}" if r.code == 0 else f"{r.outcome}: {r.line}"
    ) + skips


def _mentions_gpu(text: str) -> bool:
    return "cuda" in text.lower() or "gpu" in text.lower()


def kept(
    test: str, old_tree: Path, passed_new: list[str], root: Path, paths: list[Path] = ()
) -> list[str]:
    """Names of the contract's tests that fail on an assertion in ``old_tree`` (the old pin)
    and passed on plain new upstream (``passed_new``, from verdict()), CUDA hidden: the part
    upstream took. ``paths``: as verdict()'s."""
    old = contract.run_one(test, old_tree, root=root, cpu_only=True, paths=paths).cases
    return [
        c.name
        for c in old
        if c.kind == "failure" and c.summary.startswith(_ASSERTED) and c.name in passed_new
    ]


class Contracts:
    """The contract runs of one rebase: plain-upstream worktrees under ``.vseries/rebase/``
    and the answers cached in the state (``st.verdicts``, ``st.passed``, ``st.kept``; saved
    through ``save``): each contract runs at most once on plain new upstream and once on
    the old pin."""

    TREES = ("upstream", "old-pin")

    def __init__(self, ws: Workspace, st, save):
        self.ws, self.st, self.save = ws, st, save
        self.dir = ws.state / "rebase"
        # a kept line's rebase runs from the main venv: its own packages beside its trees
        self.paths = linesite.pythonpath(ws)

    def _tree(self, base: str, name: str) -> Path:
        return git.add_worktree(self.ws.vllm, self.dir / name, base)

    def _test(self, options: dict[str, str]) -> str | None:
        test = options.get("contract")
        return test if test and self.st.contracts and (self.ws.root / test).exists() else None

    def verdict(self, options: dict[str, str]) -> tuple[str, str] | None:
        """The contract's answer on plain new upstream, or None when the patch names none
        (or --no-contracts)."""
        test = options.get("contract")
        if not test or not self.st.contracts:
            return None
        if not (self.ws.root / test).exists():
            return "undecided", f"contract {test} does not exist in this workspace"
        if test not in self.st.verdicts or test not in self.st.passed:
            tree = self._tree(self.st.new.base, "upstream")
            said, why, passed = verdict(test, tree, self.ws.root, self.paths)
            self.st.verdicts[test], self.st.passed[test] = [said, why], passed
            self.save()
        return tuple(self.st.verdicts[test])

    def kept(self, options: dict[str, str]) -> list[str]:
        """Contract tests that fail on the old pin but pass on plain new upstream."""
        test = self._test(options)
        if not test:
            return []
        if test not in self.st.kept:
            self.verdict(options)  # the run on plain new upstream, once
            old = self._tree(self.st.old.commit, "old-pin")
            self.st.kept[test] = kept(test, old, self.st.passed[test], self.ws.root, self.paths)
            self.save()
        return list(self.st.kept[test])

    def remove_trees(self) -> None:
        """Remove the worktrees of the contract runs."""
        for name in self.TREES:
            git.remove_worktree(self.ws.vllm, self.dir / name)
