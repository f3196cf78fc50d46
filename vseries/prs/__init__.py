"""prs: turn each carried patch into an upstream pull request: a branch, checks, and its text.

For every patch not yet upstreamed (Upstream-Status not ``Accepted [...]``), in series order:

1. branches.py: branch ``pr/<slug>`` in vllm/ = the upstream base (the pin, or ``--base``) +
   that ONE patch, in a temporary worktree (a patch that needs an earlier one is reported),
   without the patch's sign-off (``--sign``: signed off as the person who submits);
2. checks.py: DCO, vLLM's own pre-commit hooks on the touched files (hooks.py, offline), and
   the test files the patch adds or changes, on this host with CUDA hidden;
3. body.py + results.py: title and body in vLLM's layout, with the benchmark results that
   belong to the patch, the template's checklist ticked on evidence (checklist.py) and no
   path of the workspace (paths.py); publish.py writes ``out/prs/<NNNN>/`` and, with
   ``--sign --push --remote <fork>``, pushes every branch at once when all passed;
4. record.py: ``--record NNNN URL`` sets that patch's header to ``Submitted [URL]``.

A patch whose change an open upstream PR already makes carries ``Pending [data for URL]``
(``--data-for NNNN URL``): no branch, but comment.py writes that PR's comment with the
patch's data (from ``docs/upstream/<PR number>-comment.md``) and its ``gh pr comment``.
A patch whose size against its gain only the maintainers can judge carries ``Pending [RFC first]``
(``--rfc-first NNNN``): no branch, but rfc.py writes the RFC issue (from
``docs/upstream/<NNNN>-rfc.md``) and its ``gh issue create``.

command.py holds the command line and the run over the series.
"""

from vseries.prs.command import add_parser, main, prs
from vseries.prs.hooks import derive_config
from vseries.prs.record import record

__all__ = ["add_parser", "derive_config", "main", "prs", "record"]
