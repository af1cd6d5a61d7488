"""One connected viewer as the live server sees it: a position in the shared stream.

A viewer owns no copy of what it is sent: it reads the server's one
:class:`~dltop.probe.sharedlog.SharedLog` from its own position (the next batch's number
and an offset into the item being sent), so a thousand silent viewers cost no more
memory than one. The rule for a viewer that falls behind lives here, in one place: when
it is further behind the live end than the log's window, it skips ahead, whole batches
only (the item it is in the middle of is finished first, so no line is ever cut), and
the records it skipped are counted and told to it in a ``dropped`` event sent right
where the gap is. Everything here runs on the server thread.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

from .encoding import encode_record
from .schema import EV_DROPPED
from .sharedlog import SharedLog

GATHER_ITEMS = 64  # batches handed to one sendmsg at most (well under IOV_MAX)
GATHER_BYTES = 1 << 20  # and bytes


@dataclass(eq=False)
class Client:
    sock: socket.socket
    name: str
    active: bool  # False while a TCP viewer has not yet shown its token
    address: str = ""  # the peer's address (its /64 for IPv6) for the per-address cap
    next_seq: int = 0  # the next batch of the shared log to send after ``current``
    next_lines: int = 0  # lines in the log before ``next_seq``
    current: bytes = b""  # the item being sent (meta, a batch, a notice)
    offset: int = 0  # bytes of ``current`` already sent
    dropped: int = 0  # records skipped for this viewer in total
    unreported: int = 0  # skipped records the viewer has not yet been told about
    hello: bytes = b""
    deadline: float = 0.0
    stuck_since: float | None = None  # when a send last found the viewer's socket full

    def start(self, log: SharedLog, first: bytes) -> None:
        """Begin with ``first`` (the meta line), then the log from its backlog on."""
        self.current, self.offset = first, 0
        self.next_seq = log.backlog_start
        self.next_lines = log.lines_at(self.next_seq)

    def behind(self, log: SharedLog) -> bool:
        """Whether anything is still to be sent to this viewer."""
        return self.offset < len(self.current) or self.unreported > 0 or self.next_seq < log.end

    def skip_to(self, log: SharedLog, seq: int) -> int:
        """Skip the batches before ``seq`` (the viewer fell too far behind); records skipped."""
        if self.next_seq >= seq:
            return 0
        lines = log.lines_at(seq)
        n = lines - self.next_lines
        self.next_seq, self.next_lines = seq, lines
        self.dropped += n
        self.unreported += n
        return n

    def buffers(self, log: SharedLog) -> list[memoryview]:
        """What to send next, in order, without taking it (``sent`` does)."""
        self._fill(log)
        out: list[memoryview] = []
        if self.offset >= len(self.current):
            return out
        out.append(memoryview(self.current)[self.offset :])
        size = len(out[0])
        if self.unreported:
            return out  # the notice goes next, before the batches after the gap
        seq = self.next_seq
        while log.first <= seq < log.end and len(out) < GATHER_ITEMS and size < GATHER_BYTES:
            chunk = log.get(seq)
            out.append(memoryview(chunk))
            size += len(chunk)
            seq += 1
        return out

    def sent(self, log: SharedLog, n: int) -> None:
        """``n`` bytes of what ``buffers`` offered went out."""
        left = len(self.current) - self.offset
        if n < left:
            self.offset += n
            return
        n -= left
        self.current, self.offset = b"", 0
        while n > 0 and self.next_seq < log.end:
            chunk = log.get(self.next_seq)
            self.next_seq += 1
            self.next_lines = log.lines_at(self.next_seq)
            if n < len(chunk):
                self.current, self.offset = chunk, n
                return
            n -= len(chunk)
        self._fill(log)

    def _fill(self, log: SharedLog) -> None:
        """Make ``current`` the next item when the last one is all sent."""
        if self.offset < len(self.current):
            return
        self.current, self.offset = b"", 0
        if self.next_seq < log.first:  # never expected: the server skips first
            self.skip_to(log, log.first)
        notice = self.drop_notice()
        if notice is not None:
            self.current = notice
        elif self.next_seq < log.end:
            self.current = log.get(self.next_seq)
            self.next_seq += 1
            self.next_lines = log.lines_at(self.next_seq)

    def drop_notice(self) -> bytes | None:
        """The ``dropped`` event owed to the viewer, at the gap, else None."""
        if not self.unreported:
            return None
        notice = {
            "kind": "event",
            "type": EV_DROPPED,
            "scope": "viewer",
            "t": time.time(),
            "records": self.unreported,
            "total": self.dropped,
            "message": "this viewer fell behind; records were skipped for it only",
        }
        self.unreported = 0
        return encode_record(notice)
