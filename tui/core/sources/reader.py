"""The control half every source shares: one daemon reader thread and how to stop it.

A source (a followed file, another tool's log, a live socket) reads on its own thread
and hands records to a RunModel; the UI only starts it, stops it, asks whether it still
runs and waits until it has caught up. Those four are the same for every source, so
they live here once; each source writes its own ``run()``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    from ..store.run import RunModel


class ReaderThread:
    thread_name = "dltop-reader"
    model: RunModel
    on_update: Callable[[int], Any] | None
    error: str | None
    caught_up: threading.Event  # set when the reader has read what there is (per source)
    _stop: threading.Event
    _thread: threading.Thread | None

    def _init_reader(self) -> None:
        self.caught_up = threading.Event()
        self._stop = threading.Event()
        self._thread = None

    def run(self) -> None:
        raise NotImplementedError

    def start(self) -> Self:
        """Start the reader thread (a daemon: it never keeps the viewer alive)."""
        self._thread = threading.Thread(target=self.run, name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        """Ask the reader to stop and wait for it (it checks between chunks and polls)."""
        self._stop.set()
        self._join(timeout)

    def _join(self, timeout: float) -> None:
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wait_caught_up(self, timeout: float | None = None) -> bool:
        return self.caught_up.wait(timeout)

    def _notify(self, n: int) -> None:
        """Tell the UI that n records arrived; a UI that is gone stops the reader."""
        if self.on_update is None:
            return
        try:
            self.on_update(n)
        except Exception as exc:  # the UI is gone: no point in reading further
            self._fail(f"update callback failed: {exc}")
            self._stop.set()

    def _fail(self, message: str) -> None:
        """The reader's one-line error, where the UI reads it (the model, under its lock)."""
        self.error = message
        with self.model.lock:
            self.model.source_error = message
