"""Reading a log that may still be growing, for a command that must end: ``dltop check``
and ``dltop report``.

Why: they read until ``read()`` returned nothing. On the log of a live run that writes
faster than they read, that never happened: killed at 30, 60 and 120 s with the file at
1–2.4 GB, and a CI step checking a live run hung (issue 29). So a :class:`Snapshot` reads
what the file held when it was opened, and stops there. With ``until`` (``--follow
SECONDS``) it goes on reading what the run appends, until the run is over (``ended()``:
its exit record, or its process gone) or the deadline passes, whichever comes first:
always bounded. What it left unread is said by :meth:`Snapshot.note`, never dropped in
silence.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import IO

POLL_S = 0.2  # seconds between two looks at a followed log that did not grow


class Snapshot:
    """Chunks of the open log ``f`` from its current offset: up to its size now, then,
    with ``until`` (a ``time.monotonic()`` deadline), on as it grows until ``ended()``."""

    def __init__(self, f: IO[bytes], chunk_size: int, until: float | None = None) -> None:
        self.f = f
        self.chunk_size = chunk_size
        self.until = until
        self.size = os.fstat(f.fileno()).st_size  # what the log held when reading began
        self.pos = f.tell()
        self.followed = 0.0  # seconds spent following (with ``until``)

    def chunks(self, ended: Callable[[], bool] = lambda: False) -> Iterator[bytes]:
        """Read up to the size seen at the start; then follow (``until``): read what is
        appended until, caught up, ``ended()`` says the run is over, or the deadline."""
        yield from self._upto(self.size)
        if self.until is None:
            return
        start = time.monotonic()
        try:
            while (left := self.until - time.monotonic()) > 0:
                now = self._size()
                if now > self.pos:
                    yield from self._upto(now, self.until)
                elif ended():  # asked once caught up: what a gone process wrote is read
                    return
                else:
                    time.sleep(min(POLL_S, left))
        finally:
            self.followed = time.monotonic() - start

    def _upto(self, end: int, until: float | None = None) -> Iterator[bytes]:
        """Chunks up to offset ``end``; with ``until``, none started past that deadline
        (a run appending faster than we read must not keep us past it)."""
        while self.pos < end and (until is None or time.monotonic() < until):
            chunk = self.f.read(min(self.chunk_size, end - self.pos))
            if not chunk:  # the file is shorter than it was (truncated): stop here
                return
            self.pos += len(chunk)
            yield chunk

    def _size(self) -> int:
        return os.fstat(self.f.fileno()).st_size

    def unread(self) -> int:
        """Bytes the log holds now beyond what was read (0 when it has not grown)."""
        return max(0, self._size() - self.pos)

    def note(self, unread: int, partial: int) -> str:
        """What a command says of a log that grew while it was read ('' when it did not):
        ``unread`` bytes past what was read, ``partial`` bytes of a last line that was
        still being written (not counted as malformed: it is not finished)."""
        if not unread:
            return ""
        how = (
            f"followed for {self.followed:.0f} s and stopped at its --follow limit"
            if self.until is not None
            else "read as it was when the check began"
        )
        hint = (
            "a longer --follow waits for the run's exit"
            if self.until is not None
            else "--follow SECONDS reads on until the run's exit record"
        )
        part = f" (and a last line of {partial} bytes still being written)" if partial else ""
        return (
            f"the log is still growing: {how}, up to byte {self.pos - partial}{part}; "
            f"{unread} bytes written since are not in this check (hint: {hint})"
        )
