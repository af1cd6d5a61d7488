"""The one place the viewer turns a log's bytes into records.

Why: fourteen places built their own line decoder and read a log's first line or a byte
range their own way (``pread`` 64 KiB, find the newline, decode; or ``readline`` and add
a newline), so a fix to how records are read had to be made, and tested, in each. Every
viewer path (``dltop check``, the report, the follow loop and its backfill, the rules
child, ``dltop ls``, the sharded-norm join, the socket) now gets its decoder, its byte
ranges and its first record here; the decoding itself (repairs, limits, skip counts) is
``probe.decoding.LineDecoder``, shared with the probe. ``tests/sources/test_logbytes.py`` fails
when a decoder is built anywhere else.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from ....probe.decoding import LineDecoder, decode_line
from ....probe.schema import Record, Records

HEAD_BYTES = 1 << 16  # a first line (the meta) longer than this is not looked for


def decoder() -> LineDecoder:
    """A fresh decoder for bytes that arrive in pieces (a file read in chunks, a socket)."""
    return LineDecoder()


def decode_blob(blob: bytes) -> tuple[Records, LineDecoder]:
    """Every record of ``blob``, its unterminated last line included (a log read as it
    was), and the decoder holding the skip counts."""
    dec = LineDecoder()
    return dec.feed(blob) + dec.finish(), dec


def first_line(fd: int) -> bytes | None:
    """The log's first complete line (no newline), read with ``pread`` so the file's
    position is left alone; ``None`` when no newline came within :data:`HEAD_BYTES`
    (nothing complete yet: the writer may still be on it)."""
    head = os.pread(fd, HEAD_BYTES, 0)
    nl = head.find(b"\n")
    return head[:nl] if nl >= 0 else None


def first_record(fd: int) -> Record | None:
    """The log's first record (normally its meta); ``None`` when its first line is not
    complete yet or is not a record."""
    line = first_line(fd)
    return decode_line(line) if line is not None else None


def pieces(
    fd: int, off: int, upto: int | None, block: int, chunk: int
) -> Iterator[tuple[int, bytes]]:
    """The file's bytes from ``off`` to ``upto`` (``None``: to its end, as it grows) in
    ``chunk``-byte pieces, each with the offset just past it, read ``block`` bytes per
    ``os.pread``: few system calls for a backlog, small pieces for the parser."""
    while upto is None or off < upto:
        data = os.pread(fd, block if upto is None else min(block, upto - off), off)
        if not data:
            return
        for i in range(0, len(data), chunk):
            piece = data[i : i + chunk]
            off += len(piece)
            yield off, piece


def read_range(
    fd: int, off: int, upto: int | None, block: int, chunk: int, dec: LineDecoder | None = None
) -> Iterator[tuple[int, Records]]:
    """The records of bytes ``[off, upto)``, a chunk at a time, each with the offset
    reached; ``dec``: a decoder that holds a line cut at ``off`` (a fresh one when None).
    A partial last line stays in the decoder: the caller's ``finish`` says when it ends."""
    dec = dec if dec is not None else LineDecoder()
    for end, piece in pieces(fd, off, upto, block, chunk):
        yield end, dec.feed(piece)
