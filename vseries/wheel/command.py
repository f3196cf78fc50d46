"""The verb: the line's verified release wheel with the series' files in it, as a new wheel.

Steps: the line's tree holds the series (branch ``series`` = the series' patches on the pin),
the release wheel is the pin's (fetch checks its sha256), the series changes only files a
wheel can carry and the wheel holds the tag's version of each (changes.py); then the new
wheel is written (archive.py) and read back and checked before it is moved into place.
"""

import re
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from vseries import am, fetch, git, series
from vseries import pin as pinmod
from vseries.errors import SeriesError
from vseries.wheel import archive, changes
from vseries.wheel import label as labelmod
from vseries.workspace import Workspace

SERIES_FILE = "vseries-series.txt"  # in the dist-info: the patches, in order
LABEL = labelmod.NAME  # the local version label: <release>+series.<time>.<n>.h<digest>
OUT = "out/wheel"  # where the wheels go by default, one folder per line: out/wheel/<tag>/


@dataclass
class Built:
    """A written wheel and what was checked."""

    path: Path
    version: str
    sha256: str
    size: int
    plan: changes.Plan
    checked: archive.Checked
    patches: list[str]
    seconds: float
    label: labelmod.Label


def line_workspace(tag: str | None) -> Workspace:
    """The current workspace's main line, or its kept line ``tag`` (lines/<tag>/)."""
    ws = Workspace.current()
    if not tag:
        return ws
    main = ws.main
    if tag == pinmod.load(main.pin_file).tag:
        return main
    return main.kept(tag, "scripts/wheel.sh")


def release_prefix(release: str) -> str:
    """What every series version of ``release`` starts with: its public version, ``+``, and
    its own local label and ``.`` when it has one (``0.34.0+``, ``0.34.0+cu130.``)."""
    from packaging.version import Version  # not at the top: --help needs the stdlib only

    v = Version(release)
    return f"{v.public}+{v.local + '.' if v.local else ''}"


def series_version(release: str, label: labelmod.Label) -> str:
    """The PEP 440 version of the patched wheel: the release's with the local label
    ``series.<time>.<n>.h<digest>`` (vseries/wheel/label.py), added to a local label the
    release already has.

    Raises:
        SeriesError: the result is not what ``packaging`` reads back (it would rename it).
    """
    from packaging.version import Version

    version = f"{release_prefix(release)}{label}"
    if str(Version(version)) != version:
        raise SeriesError(f"the series version {version} is not in PEP 440's normal form")
    return version


def wheel_name(release: str, version: str) -> str:
    """The release wheel's file name with ``version`` in place of its version."""
    from packaging.utils import parse_wheel_filename

    parts = release.removesuffix(".whl").split("-")
    name = "-".join([parts[0], version, *parts[2:]]) + ".whl"
    parse_wheel_filename(name)  # raises InvalidWheelFilename on a bad result
    return name


def with_version(metadata: bytes, version: str) -> bytes:
    """METADATA with its ``Version:`` header (the first, in the header block) replaced."""
    head, sep, body = metadata.partition(b"\n\n")
    new, n = re.subn(rb"(?m)^Version: .*$", f"Version: {version}".encode(), head, count=1)
    if n != 1:
        raise SeriesError("the release wheel's METADATA has no Version header")
    return new + sep + body


def require_series(ws: Workspace, pinned: str, entries: list[series.Entry]) -> list[str]:
    """The tree's branch ``series`` holds exactly the series on the pin; returns the patch-ids.

    Raises:
        SeriesError: no such branch, or it holds other commits (not applied since a change).
    """
    vdir = ws.vllm
    fix = f"VSERIES_LINE={ws.line} scripts/apply.sh" if ws.line else "scripts/apply.sh"
    if git.rev(vdir, am.BRANCH) is None:
        raise SeriesError(f"{ws.rel(vdir)} has no branch {am.BRANCH} (the series applied)", fix)
    want = am.wanted_ids(vdir, entries)
    held = [pid for _, pid in git.commit_patch_ids(vdir, pinned, am.BRANCH)]
    if held != want:
        raise SeriesError(
            f"{ws.rel(vdir)}'s branch {am.BRANCH} does not hold {ws.rel(ws.series_file)}: "
            f"{len(held)} commits on the pin for {len(entries)} patches, or a patch changed "
            "since it was applied",
            fix,
        )
    return want


def build(ws: Workspace, out_dir: Path | None = None) -> Built:
    """Write the patched wheel of ``ws``'s line into ``out_dir`` (default out/wheel/<tag>/),
    replacing an older series wheel of the same release there.

    Raises:
        SeriesError: the tree is not set up or does not hold the series; the release wheel
            cannot be fetched or verified; the series changes what a wheel cannot carry; the
            wheel's files differ from the tag's; the written wheel fails its check.
    """
    from packaging.utils import parse_wheel_filename

    start = time.monotonic()
    pin = pinmod.load(ws.pin_file)
    entries = series.load(ws)
    git.require_checkout(ws.vllm, idle=False)
    ids = require_series(ws, pin.commit, entries)
    release = fetch.fetch(pin.package, pin.wheel)
    _, version, _, _ = parse_wheel_filename(release.name)
    if str(version) != pin.version:
        raise SeriesError(
            f"the pin's wheel {release.name} is version {version}, the pin is {pin.tag}",
            f"correct [wheel] in {ws.rel(ws.pin_file)}",
        )
    vdir = ws.vllm
    p = changes.plan(
        changes.changes(vdir, pin.commit, am.BRANCH),
        pin.package,
        f"{ws.rel(vdir)} {pin.tag}..{am.BRANCH}",
    )
    listing = [
        "# The patch series this wheel carries, in order of application (scripts/wheel.sh):",
        f"# {pin.tag} ({pin.commit}), release wheel {release.name} sha256={pin.wheel.sha256}",
        *(f"{e.name} patch-id={pid}" for e, pid in zip(entries, ids, strict=True)),
    ]
    listed = ("\n".join(listing) + "\n").encode()
    files = [ws.series_file, *(e.path for e in entries)]
    lab = labelmod.label(ws.root, files, len(entries), listed)
    new_version = series_version(str(version), lab)
    out_dir = (out_dir or ws.root / OUT / pin.tag).resolve()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a file of that name, no permission
        raise SeriesError(
            f"cannot make the output folder {out_dir}: {e.strerror}",
            "scripts/wheel.sh -o <a folder you can write>",
        ) from None
    out = out_dir / wheel_name(release.name, new_version)
    part = out.with_name(out.name + ".part")
    with open(release, "rb") as src, zipfile.ZipFile(src) as rz:
        infos = {i.filename: i for i in rz.infolist()}
        changes.check_release(
            p, vdir, pin.commit, pin.tag, release, lambda n: rz.read(n) if n in infos else None
        )
        tops = {n.split("/", 1)[0] for n in infos if n.split("/", 1)[0].endswith(".dist-info")}
        if len(tops) != 1:
            raise SeriesError(f"the release wheel {release.name} has {len(tops)} dist-info folders")
        old_info = tops.pop()
        stem = old_info.removesuffix(".dist-info")
        new_stem = f"{stem.rsplit('-', 1)[0]}-{new_version}"
        renames = {f"{stem}.dist-info": f"{new_stem}.dist-info", f"{stem}.data": f"{new_stem}.data"}

        def renamed(n: str) -> str:
            top, _, rest = n.partition("/")
            return f"{renames[top]}/{rest}" if top in renames else n

        release_hashes = archive.hashes(rz)
        meta = f"{old_info}/METADATA"
        new_files = {c.path: git.blob(vdir, am.BRANCH, c.path) for c in p.put}
        new_files[renamed(meta)] = with_version(rz.read(meta), new_version)
        new_files[f"{new_stem}.dist-info/{SERIES_FILE}"] = listed
        # the members in the release's order; added files before the dist-info; RECORD last
        order: list[tuple[str, zipfile.ZipInfo | None]] = []
        added = [c.path for c in p.put if c.path not in infos]
        dropped = {c.path for c in p.drop}
        for n, i in infos.items():
            if added and n.split("/", 1)[0] in renames:
                order += [(a, None) for a in added]
                added = []
            if n not in dropped and n != f"{old_info}/RECORD":
                order.append((n, None if renamed(n) in new_files else i))
        order += [(a, None) for a in added]
        order.append((f"{old_info}/{SERIES_FILE}", None))
        rows = [
            (renamed(n), release_hashes[n] if i else _hs(new_files[renamed(n)])) for n, i in order
        ]
        record = f"{new_stem}.dist-info/RECORD"
        new_files[record] = archive.record([*rows, (record, None)])
        order.append((f"{old_info}/RECORD", None))
        template = infos[meta]
        fresh, fresh_infos = archive.fresh(
            [
                (archive.like(infos.get(n, template), renamed(n)), new_files[renamed(n)])
                for n, i in order
                if i is None
            ]
        )
        members = [
            archive.Member(renamed(n), src, i)
            if i
            else archive.Member(renamed(n), fresh, fresh_infos[renamed(n)])
            for n, i in order
        ]
        try:
            archive.write(part, members)
        except BaseException as e:
            part.unlink(missing_ok=True)
            if isinstance(e, OSError):  # a full disk: nothing half-written is left
                raise SeriesError(
                    f"writing {part} failed: {e.strerror}; nothing was left there",
                    f"df -h {out_dir}   # free {release.stat().st_size >> 20} MiB or more "
                    "there, or scripts/wheel.sh -o <a folder with room>",
                ) from None
            raise
    identical = {n: renamed(n) for n, i in order if i is not None}
    checked = archive.verify(part, release_hashes, identical)
    for old in out_dir.glob(f"{out.name.split('-')[0]}-{release_prefix(pin.version)}{LABEL}.*.whl"):
        if old != out:
            print(f"wheel: removed the older series wheel {old.name} from {out_dir}")
            old.unlink()
    part.replace(out)
    return Built(
        out,
        new_version,
        fetch.sha256_of(out),
        out.stat().st_size,
        p,
        checked,
        [e.name for e in entries],
        time.monotonic() - start,
        lab,
    )


def _hs(data: bytes) -> tuple[str, int]:
    return archive.digest(data), len(data)


def main(args) -> int:
    ws = line_workspace(args.line)
    b = build(ws, args.out)
    pin = pinmod.load(ws.pin_file)
    p = b.plan
    added = sum(1 for c in p.put if c.status == "A")
    print(
        f"wheel{ws.label}: {pin.wheel.filename} (sha256 verified) with the series of "
        f"{len(b.patches)} patches ({ws.rel(ws.series_file)}, {ws.rel(ws.vllm)} branch "
        f"{am.BRANCH})"
    )
    print(
        f"  files   {len(p.put) - added} replaced, {added} added, {len(p.drop)} removed in the "
        f"package; {len(p.not_shipped)} outside it not shipped "
        f"({', '.join(sorted({c.path.split('/')[0] + '/' for c in p.not_shipped})) or '-'})"
    )
    print(f"  wrote   {ws.rel(b.path)}")
    lab = b.label
    print(
        f"  version {b.version}   (series' last commit {lab.changed} UTC, {lab.patches} "
        f"patches, {lab.digest} = sha256 of {SERIES_FILE})"
    )
    if lab.uncommitted:
        print(
            f"  note    the series has changes no commit holds "
            f"({', '.join(x[3:] for x in lab.uncommitted[:5])}): its version carries the time "
            "of its last commit and sorts with that series' wheel; commit it for a wheel "
            "that sorts above it"
        )
    if lab.shallow:
        print(
            "  note    this checkout is shallow and its history stops at that commit: the "
            "series' last change may be older, so the version may sort a little late; "
            f"git -C {ws.root} fetch --unshallow gives the exact time"
        )
    print(f"  size    {b.size} bytes")
    print(f"  sha256  {b.sha256}")
    print(
        f"  checked RECORD ({b.checked.recorded} files: hashes and sizes); "
        f"{len(b.checked.kernels)} .so files and {len(b.checked.identical)} files in all "
        "byte-identical to the release's"
    )
    print(f"  took    {b.seconds:.1f} s")
    print(f"install:   pip install --no-deps {ws.rel(b.path)}")
    print(
        f"container: docker build -f deploy/Dockerfile --build-arg VLLM_TAG={pin.tag} "
        f"-t vllm-series:{pin.tag} .   (docs/deploy.md)"
    )
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser(
        "wheel",
        help="the line's release wheel with the series in it, as a new wheel",
        description="Write the line's release wheel (the pin's, sha256-checked) with the "
        "series' files in it as a wheel of its own: version <release>+series.<time>.<n>."
        "h<digest> (the UTC time of the workspace's last commit that changed the series, n "
        "patches, the sha256 of the patch list: a newer series sorts higher), "
        f"the patches named in its dist-info ({SERIES_FILE}), a new RECORD, and every other "
        "file, the release's kernels (.so) among them, byte-identical to the release's "
        "(checked). Refuses a series that changes anything but Python / Triton / JSON / text "
        "files of the package, and a release wheel whose copy of a file the series touches "
        "is not the pinned tag's. The files come from the branch series of the line's tree "
        "(scripts/apply.sh makes it).",
    )
    p.add_argument(
        "--line",
        metavar="TAG",
        help="a kept line (lines/TAG/): its release wheel and series (default: the main line)",
    )
    p.add_argument(
        "-o",
        "--out",
        metavar="DIR",
        type=Path,
        help="the folder to write it to (default: out/wheel/<tag>/; an older series wheel "
        "of the same release there is replaced)",
    )
    p.set_defaults(func=main)
