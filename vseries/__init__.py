"""vseries: carry an ordered patch series on a pinned vLLM release.

One module per verb (materialise, apply, refresh, build, contract, rebase, prs), plus the
shared helpers: pin (upstream.toml), git, fetch (verified downloads), series (patches/series).
"""

__all__ = ["SeriesError"]

from vseries.errors import SeriesError
