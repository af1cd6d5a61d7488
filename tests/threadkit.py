"""Threads a test leaves running: waited out, then named.

Why: ``dltop check`` forks its workers only while its process runs one thread
(``tui/core/sources/workers.py``: fork copies the calling thread alone). A thread an earlier
test left running (a helper's accept loop, a DataLoader queue's feeder, tqdm's monitor)
made the worker tests in the same pytest process see no fork, depending on which tests
xdist had put before them: CI failed on two tests that had nothing wrong with them.
``tests/conftest.py`` fails the test that leaves a thread; the worker tests wait for a
process of one thread before they start.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Collection


def threads_left(before: Collection[threading.Thread], within: float) -> list[str]:
    """The names of the threads alive now that were not in ``before``, once each has had
    its share of ``within`` seconds to end. tqdm's monitor (a Trainer's progress bars
    start it, and it lives until told) is told: the next progress bar starts a new one."""
    deadline = time.monotonic() + within
    monitor = sys.modules.get("tqdm._monitor")
    for thread in threading.enumerate():
        if thread in before or thread is threading.current_thread():
            continue
        if monitor is not None and isinstance(thread, monitor.TMonitor):
            thread.exit()
        thread.join(max(0.0, deadline - time.monotonic()))
    return [t.name for t in threading.enumerate() if t not in before and t.is_alive()]
