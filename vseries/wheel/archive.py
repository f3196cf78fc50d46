"""The wheel as a zip archive: members copied raw from the release wheel, new members added,
the dist-info renamed, RECORD computed; and the written wheel read back and checked.

A member that the series does not change is copied as it is stored: its compressed bytes, CRC
and local header (with the new name, for the renamed dist-info), so it is byte-identical to
the release's and nothing is compressed again (a 239 MB wheel is written in seconds). New
content (the series' files, METADATA, the series list, RECORD) is compressed by ``zipfile``
into an archive in memory, and its members are copied from there the same way. The writer
supports what release wheels use: no encryption, no data descriptors, no ZIP64.
"""

import base64
import csv
import hashlib
import io
import struct
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from vseries.errors import SeriesError

# zipfile's layouts of the local header, the central directory entry and its end record
LOCAL = struct.Struct("<4s2B4HL2L2H")
CENTRAL = struct.Struct("<4s4B4HL2L5H2L")
END = struct.Struct("<4s4H2LH")
LOCAL_SIG, CENTRAL_SIG, END_SIG = b"PK\x03\x04", b"PK\x01\x02", b"PK\x05\x06"
ENCRYPTED, DESCRIPTOR, UTF8 = 0x1, 0x8, 0x800
MOST = 0xFFFFFFFF  # past this, an offset or size needs ZIP64
CHUNK = 1 << 20


@dataclass(frozen=True)
class Member:
    """One member of the wheel to write: its name there, and where its stored bytes are.

    Attributes:
        name: the member's path in the new wheel.
        source: the archive (an open binary file) holding it.
        info: its entry in that archive's central directory.
    """

    name: str
    source: BinaryIO
    info: zipfile.ZipInfo


def digest(data: bytes) -> str:
    """A RECORD hash: ``sha256=`` and the urlsafe base64 digest without padding."""
    raw = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def record(rows: Iterable[tuple[str, tuple[str, int] | None]]) -> bytes:
    """RECORD's text: one CSV row per member (path, hash, size), from (path, (hash, size));
    a member given with None (the RECORD itself) has an empty hash and size."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    for name, hs in rows:
        w.writerow([name, "", ""] if hs is None else [name, hs[0], hs[1]])
    return out.getvalue().encode()


def fresh(
    files: list[tuple[zipfile.ZipInfo, bytes]],
) -> tuple[BinaryIO, dict[str, zipfile.ZipInfo]]:
    """An archive in memory holding ``files`` (each compressed as its ZipInfo says), to copy
    from like the release wheel: the archive and its members by name."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for info, data in files:
            z.writestr(info, data)
    with zipfile.ZipFile(buf) as z:
        return buf, {i.filename: i for i in z.infolist()}


def like(info: zipfile.ZipInfo, name: str) -> zipfile.ZipInfo:
    """A new ZipInfo named ``name`` with ``info``'s time, permissions and compression."""
    new = zipfile.ZipInfo(name, info.date_time)
    new.compress_type = info.compress_type
    new.external_attr = info.external_attr
    new.create_system = info.create_system
    return new


def _refuse(what: str) -> SeriesError:
    return SeriesError(
        f"the wheel cannot be written as a copy of the release wheel: {what}",
        "report it with the release wheel's name (scripts/wheel.sh supports plain zip "
        "archives: no ZIP64, data descriptors or encryption)",
    )


def _copy(src: BinaryIO, info: zipfile.ZipInfo, name: bytes, flags: int, dst: BinaryIO) -> None:
    """Write ``info``'s local header (named ``name``, with ``flags``) and its stored bytes
    from src to dst."""
    src.seek(info.header_offset)
    head = LOCAL.unpack(src.read(LOCAL.size))
    if head[0] != LOCAL_SIG:
        raise _refuse(f"{info.filename}: no local header at offset {info.header_offset}")
    src.read(head[10])  # the old name
    extra = src.read(head[11])
    dst.write(LOCAL.pack(*head[:3], flags, *head[4:10], len(name), len(extra)) + name + extra)
    left = info.compress_size
    while left:
        block = src.read(min(CHUNK, left))
        if not block:
            raise _refuse(f"{info.filename}: the archive ends inside it")
        dst.write(block)
        left -= len(block)


def write(path: Path, members: list[Member]) -> None:
    """Write the zip archive ``path`` from ``members``, in order, each copied as stored.

    Raises:
        SeriesError: a member is encrypted or uses a data descriptor, or the archive would
            need ZIP64 (over 4 GiB or 65535 members).
    """
    if len(members) > 0xFFFF:
        raise _refuse(f"{len(members)} members need ZIP64")
    central = []
    with open(path, "wb") as dst:
        for m in members:
            i = m.info
            if i.flag_bits & (ENCRYPTED | DESCRIPTOR):
                raise _refuse(f"{i.filename} is encrypted or has a data descriptor")
            if max(i.compress_size, i.file_size, i.header_offset, dst.tell()) >= MOST:
                raise _refuse(f"{i.filename} needs ZIP64")
            try:
                name, flags = m.name.encode("ascii"), i.flag_bits
            except UnicodeEncodeError:
                name, flags = m.name.encode("utf-8"), i.flag_bits | UTF8
            offset = dst.tell()
            _copy(m.source, i, name, flags, dst)
            y, mo, d, h, mi, s = i.date_time
            entry = CENTRAL.pack(
                CENTRAL_SIG,
                i.create_version,
                i.create_system,
                i.extract_version,
                i.reserved,
                flags,
                i.compress_type,
                h << 11 | mi << 5 | s // 2,
                (y - 1980) << 9 | mo << 5 | d,
                i.CRC,
                i.compress_size,
                i.file_size,
                len(name),
                len(i.extra),
                len(i.comment),
                0,
                i.internal_attr,
                i.external_attr,
                offset,
            )
            central.append(entry + name + i.extra + i.comment)
        start = dst.tell()
        for entry in central:
            dst.write(entry)
        size = dst.tell() - start
        if dst.tell() >= MOST:
            raise _refuse("the archive is over 4 GiB")
        dst.write(END.pack(END_SIG, 0, 0, len(central), len(central), size, start, 0))


@dataclass
class Checked:
    """What ``verify`` found: the members, how many RECORD lines it checked, and the members
    byte-identical to the release's (by name in the release, e.g. the ``.so`` files)."""

    names: list[str]
    recorded: int
    identical: list[str]
    kernels: list[str]


def hashes(z: zipfile.ZipFile) -> dict[str, tuple[str, int]]:
    """Each member's RECORD hash and size, from its content (zipfile checks the CRC)."""
    out = {}
    for info in z.infolist():
        data = z.read(info)
        out[info.filename] = (digest(data), len(data))
    return out


def read_record(text: str) -> dict[str, tuple[str, str]]:
    """RECORD's rows: path -> (hash, size)."""
    return {row[0]: (row[1], row[2]) for row in csv.reader(io.StringIO(text)) if row}


def verify(wheel: Path, release: dict[str, tuple[str, int]], renamed: dict[str, str]) -> Checked:
    """Read the written wheel back: every member once, RECORD right for every member (its own
    line with no hash), and every member that ``renamed`` maps from a release name (the
    members the series leaves alone, the ``.so`` kernels among them) byte-identical to the
    release's, whose hashes and sizes ``release`` holds.

    Raises:
        SeriesError: anything that does not hold (the wheel is removed).
    """
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        have = hashes(z)
        rec_name = next((n for n in names if n.endswith(".dist-info/RECORD")), None)
        rows = read_record(z.read(rec_name).decode()) if rec_name else {}
    problems = []
    if len(set(names)) != len(names):
        problems.append("a member is stored twice")
    if set(rows) != set(names):
        problems.append(f"RECORD lists {len(rows)} files, the wheel holds {len(names)}")
    for n, (h, size) in rows.items():
        if n == rec_name:
            if (h, size) != ("", ""):
                problems.append("RECORD's own line has a hash")
        elif n in have and (h, size) != (have[n][0], str(have[n][1])):
            problems.append(f"RECORD's hash or size of {n} is wrong")
    identical = []
    for old, new in renamed.items():
        if have.get(new) != release.get(old):
            problems.append(f"{new} differs from the release's {old}")
        else:
            identical.append(old)
    if problems:
        wheel.unlink()
        raise SeriesError(
            f"the written wheel failed its check, so it was removed: {'; '.join(problems[:5])}",
            "report it (scripts/wheel.sh wrote a wrong archive)",
        )
    kernels = [n for n in identical if n.endswith(".so") or ".so." in n.rsplit("/", 1)[-1]]
    return Checked(names, len(rows), identical, kernels)
