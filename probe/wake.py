"""The writer thread's wake-up bit, safe to set from a signal handler.

``threading.Event.set`` runs Python code under the event's own lock. A Python signal
handler runs on the main thread between two bytecodes, so it can run while that very
thread is inside ``set()`` with the lock held. The crash path's handler then queued its
``signal`` event and called ``set()`` again: it waited for a lock its own thread held,
and the process hung for good with its event unwritten (1 SIGTERM in 40 during
``start()``'s wait for ``meta``; any event the main thread emits had the same window).

The same hazard the other way: a flush waited on an ``Event`` whose lock the main
thread held when a handler landed inside ``wait()``; the writer thread's ``set()`` of
it then blocked, so the handler's own flush behind it timed out after 3 s and the
process died by the signal with its event still queued.

A bare lock used as one bit has no such state: ``set()`` is one ``release`` that never
blocks, and the one waiter takes the bit back with ``acquire``. The writer thread's
wake-up and each flush's "done" are such bits.
"""

from __future__ import annotations

import threading


class Wake:
    """An auto-clearing event: ``set`` from any thread or signal handler, one waiter."""

    __slots__ = ("_bit",)

    def __init__(self) -> None:
        self._bit = threading.Lock()
        self._bit.acquire()  # held means "not set"

    def set(self) -> None:
        """Wake the waiter; never blocks (one C call: no bytecode for a handler to land in)."""
        try:
            self._bit.release()
        except RuntimeError:  # already set
            pass

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for ``set``, and clear it. True if it was set."""
        return self._bit.acquire(timeout=max(0.0, timeout))
