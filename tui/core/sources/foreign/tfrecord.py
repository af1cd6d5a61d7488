"""TFRecord framing, the container of TensorBoard event files: records read in bulk.

Each record is an 8-byte length, the masked CRC-32C of that length, the data, and the
masked CRC-32C of the data. TensorBoard's own Python reader checks both sums byte by
byte in Python, several microseconds a record; a 1 M-step run of six scalars is 6 M
records. Here the file is read in large chunks, the headers are unpacked from the buffer
(a header already checked, the same length and sum again, is not checked twice: a run's
events come in a few sizes), and the sums are checked with the ``crc32c`` C extension
when it is installed (it comes with the ``[tensorboard]`` extra), else with the
pure-Python table (the same answers, slower). A record whose sums do not hold is damage:
the walk stops there and says so, as TensorBoard's loader does.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator

MAX_RECORD = 1 << 26  # bytes in one record; a longer length is damage
CHUNK = 4 << 20  # bytes read at a time
HEADERS_KEPT = 4096  # distinct record headers remembered as checked
LIST_RECORDS = 4096  # records handed on at a time
_HEADER = struct.Struct("<QI")
_U32 = struct.Struct("<I")


def _crc_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def _crc32c_python(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _fast_crc() -> Callable[[bytes], int] | None:
    try:
        import crc32c  # noqa: PLC0415 - optional, in the [tensorboard] extra

        return crc32c.crc32c
    except ImportError:
        return None
    except Exception:  # a broken build: the pure-Python sums give the same answers
        return None


_crc32c: Callable[[bytes], int] = _fast_crc() or _crc32c_python


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C (Castagnoli) of ``data``."""
    c = _crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """``data`` as one TFRecord: the inverse of :func:`record_lists` (tests and benchmarks
    write event files with it)."""
    head = struct.pack("<Q", len(data))
    return head + _U32.pack(masked_crc32c(head)) + data + _U32.pack(masked_crc32c(data))


def framed(head: bytes) -> bool:
    """True when ``head`` starts with a record header whose checksum holds."""
    if len(head) < 12:
        return False
    length, crc = _HEADER.unpack_from(head)
    return 0 < length < MAX_RECORD and masked_crc32c(head[:8]) == crc


class Walk:
    """How a file's records were read: how many, and why the walk stopped early."""

    __slots__ = ("records", "damage")

    def __init__(self) -> None:
        self.records = 0
        self.damage: str | None = None  # None: the file ended cleanly (or was not read to its end)


def record_lists(fd: int, walk: Walk, limit: int) -> Iterator[list[bytes]]:
    """The data of each record of the open file ``fd``, in order, at most ``limit``, in
    lists of at most :data:`LIST_RECORDS`: the loop over them is not
    a generator's resume per record (a 1 M-step run of six scalars is 6 M records), and
    what a reader builds from one list stays small (a whole 4 MiB chunk's values, held
    with the preview, added 30 MB to a 150 k-step read). ``walk.records`` counts the
    records handed on, list by list."""
    buf = b""
    pos = 0  # read position in the file
    at = 0  # position in ``buf``
    # masked_crc32c, inline: once a record (and once a new header). frame() writes with
    # masked_crc32c, so a difference between the two fails every test that reads a
    # written file back
    crc = _crc32c
    unpack_header, unpack_u32 = _HEADER.unpack_from, _U32.unpack_from
    # a length whose header checksum was worked out -> that checksum (it depends on the
    # length alone): a run's events are of a few sizes, so most headers are checked once,
    # not once per record (bounded: records of every size get no further than HEADERS_KEPT)
    known: dict[int, int] = {}
    left = limit - walk.records
    while left > 0:
        out: list[bytes] = []
        append = out.append
        damage: str | None = None
        size = len(buf)
        room = min(left, LIST_RECORDS)
        while room > 0 and size - at >= 12:  # the records whole in ``buf``
            length, sum_ = unpack_header(buf, at)
            if known.get(length) != sum_:
                c = crc(buf[at : at + 8])
                if ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF != sum_:
                    damage = "a record header with a bad checksum"
                    break
                if length >= MAX_RECORD:  # (a length of 0 is an empty record: read through)
                    damage = f"a record of {length} bytes (over the {MAX_RECORD >> 20} MiB limit)"
                    break
                if len(known) < HEADERS_KEPT:
                    known[length] = sum_
            end = at + 16 + length
            if end > size:
                break
            data = buf[at + 12 : end - 4]
            c = crc(data)
            if ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF != unpack_u32(
                buf, end - 4
            )[0]:
                damage = "a damaged record"
                break
            at = end
            room -= 1
            append(data)
        left -= len(out)
        walk.records += len(out)
        if out:
            yield out
        if damage is not None:
            walk.damage = damage
            return
        if left <= 0:
            return
        if room == 0:
            continue  # the list was full: more records may be whole in ``buf``
        # the next record is not whole in ``buf``: read on (a chunk, or the whole record)
        need = 12
        if len(buf) - at >= 12:
            need = 16 + unpack_header(buf, at)[0]
        buf, at = buf[at:], 0
        while len(buf) < need:
            more = os.pread(fd, max(CHUNK, need - len(buf)), pos)
            if not more:
                break
            pos += len(more)
            buf += more
        if len(buf) < need:
            if not buf:
                return
            walk.damage = "cut inside a record header" if len(buf) < 12 else "cut inside a record"
            return
