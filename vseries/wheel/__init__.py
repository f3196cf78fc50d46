"""wheel: the line's release wheel with the series in it, as a wheel of its own.

    scripts/wheel.sh [--line TAG] [-o DIR]

The way production installs vLLM (its release wheel, or its container image built on it),
with the series: the release wheel verified against the pin's sha256, the series' files in
it (Python, Triton, JSON configs; never a kernel), version
``<release>+series.<time>.<n>.h<digest>`` (a newer series sorts higher), the patches named in
its dist-info, a new RECORD, every other file byte-identical (checked).
``deploy/Dockerfile`` installs it into vLLM's release image (docs/deploy.md).

The package, by responsibility:
    command.py   the command line and the build: the series on the branch, the checks, the
                 output wheel moved into place only after it passed its own check
    changes.py   what the series changes (git), sorted; what a wheel cannot carry; the
                 release wheel's files against the pinned tag's
    archive.py   the zip archive: raw copies of the release's members, new members, RECORD;
                 the written wheel read back and checked
    label.py     the version label: the time of the series' last commit, the number of
                 patches, the digest of the series list
"""

from vseries.wheel.command import add_parser, main

__all__ = ["add_parser", "main"]
