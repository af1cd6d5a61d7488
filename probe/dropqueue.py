"""The writer's queue: bounded, and what it does when the training outruns the writer.

Apart from ``writer.py`` because it is the only part of the writer the training thread
runs (``put``, its whole cost per step), and because its policy is a decision of its
own: a full queue drops the new record rather than block (the training would stall on
its own monitor) or grow (a slow log traded for an OOM). The memory is bounded by the
cap, and the loss is said in the log itself, where it happened (``Gap``): the writer
thread turns each gap into a counted ``dropped`` event.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from .schema import EV_DROPPED, EVENT


class Gap:
    """Where the log lost records: queued (past the cap) at the first record dropped.

    It travels in the queue like a record, so the ``dropped`` event lands exactly
    between the last record kept before the gap and the first one kept after it.
    """

    __slots__ = ("records",)

    def __init__(self) -> None:
        self.records = 0


class DropQueue:
    """The deque the training thread appends to, at most ``cap`` records, and the count
    of those it had no room for."""

    def __init__(self, cap: int) -> None:
        self.items: deque[Any] = deque()
        self.cap = cap
        self.gap: Gap | None = None
        self.dropped = 0  # records the full queue had no room for (the training outran us)
        self.reported = 0  # of those, written in ``dropped`` events so far
        self.put: Callable[[Any], None] = self._bounded_put()  # the training thread's only cost

    def _bounded_put(self) -> Callable[[Any], None]:
        """``put``: append while the queue has room, else count the record as dropped."""
        queue, cap, append = self.items, self.cap, self.items.append
        drop = self._drop

        def put(item: Any) -> None:
            if len(queue) < cap:
                append(item)
            else:
                drop()

        return put

    def _drop(self) -> None:
        # the same gap while nothing was queued after its marker; a record kept since
        # (or the writer took the marker) means a new gap, marked where it begins
        gap, queue = self.gap, self.items
        try:
            same = gap is not None and queue[-1] is gap
        except IndexError:  # the writer emptied the queue meanwhile
            same = False
        if not same:
            gap = self.gap = Gap()
            queue.append(gap)  # one marker per gap, allowed past the cap
        assert gap is not None
        gap.records += 1
        self.dropped += 1

    def clear(self) -> None:
        """Forget what is queued and the gap open (a forked child's copy)."""
        self.items.clear()
        self.gap = None

    def gap_event(self, gap: Gap, first: Callable[[str], None]) -> dict[str, Any]:
        """The ``dropped`` event for one gap; the first gap's message also goes to ``first``."""
        n = gap.records
        self.reported += n
        message = (
            f"the training outran the log writer: {n} record(s) were not recorded here "
            f"(its queue of {self.cap} was full)"
        )
        if self.reported == n:
            first(message)
        return {
            "kind": EVENT,
            "type": EV_DROPPED,
            "t": time.time(),
            "scope": "log",
            "records": n,
            "total": self.reported,
            "message": message,
        }
