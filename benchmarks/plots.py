"""The reports' figures: one matplotlib set-up (no display, the same resolution) for every
plot of the annex, and the axes of a roofline plot."""

from pathlib import Path


def grid(nrows: int, ncols: int, panel: tuple[float, float], **kw):
    """(figure, 2-D array of axes) of ``nrows`` x ``ncols`` panels of ``panel`` inches each;
    matplotlib without a display (imported here, so that the reports import without it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    size = (panel[0] * ncols, panel[1] * nrows)
    return plt.subplots(nrows, ncols, figsize=size, squeeze=False, **kw)


def save(fig, path: Path, title: str = "") -> None:
    """Title the figure, lay it out, write it to ``path`` (110 dpi) and free it."""
    import matplotlib.pyplot as plt

    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def roofline_axis(ax, title: str, xlabel: str = "tokens", fontsize: float | None = None) -> None:
    """An axis of % of the HBM read roofline against tokens (log 2)."""
    ax.set_xscale("log", base=2)
    ax.set_title(title, fontsize=fontsize)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("% of the read roofline")
    ax.grid(alpha=0.3)


def roofline_by_shape(points: list[dict], arms: list[tuple[str, str, str]], out: Path,
                      title: str) -> None:  # fmt: skip
    """One panel per model shape of % of the read roofline against tokens, a line per arm and
    scale (static solid, dynamic dashed); ``points``: dicts of shape, dtype (the scales), m and
    each arm's key; ``arms``: (key in the points, legend name, colour)."""
    shapes = sorted({p["shape"] for p in points})
    fig, axes = grid(1, len(shapes), (5, 3.8))
    for ax, shape in zip(axes[0], shapes, strict=True):
        for dtype, style in (("static", "-"), ("dynamic", "--")):
            pts = [p for p in points if p["shape"] == shape and p["dtype"] == dtype]
            ms = [p["m"] for p in pts]
            for key, name, colour in arms:
                ax.plot(ms, [p[key] for p in pts], "o" + style, color=colour,
                        label=f"{name}, {dtype}")  # fmt: skip
        roofline_axis(ax, shape, "tokens (M)")
        ax.set_ylim(0, 100)
    axes[0][0].legend(fontsize=7)
    save(fig, out, title)
