"""One connected viewer as the live server sees it, and the rule for its queue.

The rule is the server's promise to a slow viewer, so it lives in one place: records
are dropped for that viewer only, whole batches and counted, and never unless
something is already pending, so that the ``dropped`` notice is guaranteed once the
queue drains. Everything here runs on the server thread.
"""

from __future__ import annotations

import socket
import time
from collections import deque
from dataclasses import dataclass, field

from dltop.probe.encoding import encode_record
from dltop.probe.schema import EV_DROPPED


@dataclass
class Client:
    sock: socket.socket
    name: str
    active: bool  # False while a TCP viewer has not yet shown its token
    pending: deque[bytes] = field(default_factory=deque)
    pending_bytes: int = 0
    offset: int = 0  # bytes of pending[0] already sent
    dropped: int = 0  # records dropped in total
    unreported: int = 0  # dropped records the viewer has not yet been told about
    hello: bytes = b""
    deadline: float = 0.0

    def enqueue(self, data: bytes, limit: int, force: bool = False) -> int:
        """Queue ``data`` for this viewer; the records dropped instead (0 when queued)."""
        # A viewer with nothing pending takes any batch, even one bigger than its queue (a
        # burst the writer caught up on): the bytes are shared, not copied, and dropping
        # only behind a pending queue guarantees the ``dropped`` notice once it drains.
        over = self.pending_bytes + len(data) > limit
        if not force and self.pending and over:
            n = data.count(b"\n")
            self.dropped += n
            self.unreported += n
            return n
        self.pending.append(data)
        self.pending_bytes += len(data)
        return 0

    def drop_notice(self) -> bytes | None:
        """The ``dropped`` event owed to the viewer once its queue has drained, else None."""
        if self.pending or not self.unreported:
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
