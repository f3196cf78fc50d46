"""vseries: carry an ordered patch series on a pinned vLLM release.

One module (or package) per verb: materialise, apply, refresh, build, contract, test
(testrun), rebase/, prs/, wheel/; a base layer they share (workspace, errors, git, host, patchfile,
pytestrun, fetch, release, pin, series, am, worktree); lab/ for the Triton JIT audit, which
the command line does not use. CONTRIBUTING.md draws the import graph.
"""

__all__ = ["SeriesError"]

from vseries.errors import SeriesError
