"""Chart data worked out on one thread beside the event loop, for a job of many ranks.

Why: a chart pulls its data when painted, and across 64 ranks one panel's data is ~130
decimations (20-60 ms of Python). Worked out on the event loop, that blocks keys and
ticks for the whole pass; spreading the panels over the tick only made each block
shorter. Here the event loop gets the GIL back at every switch interval (5 ms) while the
data are worked out, and the chart shows its last picture until they arrive as a message.

One thread for all panels, in the order asked, coalesced: a panel asked for again before
its turn is worked out once, with the latest request. The thread starts at the first
request and ends with :meth:`close`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable


class ChartThread:
    """A queue of jobs keyed by who asked, run one at a time on a daemon thread."""

    def __init__(self, name: str = "dltop-charts") -> None:
        self._name = name
        self._cond = threading.Condition()
        self._jobs: dict[Hashable, Callable[[], None]] = {}  # insertion order: asked order
        self._thread: threading.Thread | None = None
        self._closed = False
        self.busy = False  # a job is running (tests and the benchmark read it)

    def submit(self, key: Hashable, job: Callable[[], None]) -> bool:
        """Queue ``job`` under ``key``, replacing one still waiting under the same key (it
        keeps its place); False once closed. ``job`` must not raise: it reports its own
        failure (the chart posts the exception to the event loop, which raises it)."""
        with self._cond:
            if self._closed:
                return False
            self._jobs[key] = job
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify()
            return True

    def pending(self) -> int:
        with self._cond:
            return len(self._jobs) + int(self.busy)

    def close(self) -> None:
        """Drop the waiting jobs and let the thread end after the one it is running."""
        with self._cond:
            self._closed = True
            self._jobs.clear()
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                self.busy = False
                while not self._jobs and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                key = next(iter(self._jobs))
                job = self._jobs.pop(key)
                self.busy = True
            job()
