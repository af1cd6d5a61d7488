"""The reader of overlaid runs: one source per run, each into its own model.

Run A is read by this source's own thread into the model the app was given, so the
header, the status and everything else that shows one run keep working on it; every
other run gets its own :class:`RunModel` and its own reader, started with this one. Each
run can be anything ``dltop SOURCE`` opens (a log followed while it grows, a job folder,
another tool's log, a live socket), so overlaid live runs are followed as they go.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from ..ranks.jobs import MAX_RUNS, OverlayRun, overlay_runs
from ..store.run import RunModel
from .filesource import SourceError
from .reader import ReaderThread
from .socket_source import redact
from .source_open import open_source


class OverlaySource(ReaderThread):
    """Readers for 2 to 8 runs; ``ranks`` lists them lettered A.. in command-line order."""

    thread_name = "dltop-overlay"

    def __init__(
        self,
        specs: Sequence[str],
        model: RunModel,
        on_update: Callable[[int], Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if not 2 <= len(specs) <= MAX_RUNS:
            raise SourceError(f"overlay {len(specs)} runs? give 2 to {MAX_RUNS} sources")
        self._init_reader()
        self.model = model
        self.on_update = on_update
        self.error: str | None = None
        self.skipped: list[str] = []
        models = [model] + [RunModel(redact(s), model.config) for s in specs[1:]]
        # raises SourceError naming the run that cannot be opened: said before the UI
        self.readers = [
            open_source(s, m, on_update, **kwargs) for s, m in zip(specs, models, strict=True)
        ]
        self.ranks: tuple[OverlayRun, ...] = overlay_runs([redact(s) for s in specs], models)
        for r in self.readers:
            self.skipped.extend(getattr(r, "skipped", None) or [])

    def run(self) -> None:
        """Start runs B.. on their threads and read run A here; a replay returns once every
        run is read, a follow when stopped (stopping the others with it)."""
        first, others = self.readers[0], self.readers[1:]
        for r in others:
            r.start()
        done = threading.Thread(target=self._caught_up_when_all, daemon=True)
        done.start()
        try:
            first.run()
            self.error = first.error
            while not self._stop.is_set() and any(r.alive for r in others):
                self._stop.wait(0.1)
        finally:
            if self._stop.is_set():
                for r in others:
                    r.stop()

    def _caught_up_when_all(self) -> None:
        for r in self.readers:
            while not r.wait_caught_up(0.2):
                if self._stop.is_set():
                    return
        self.caught_up.set()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        for r in self.readers:
            r.stop(timeout)
        self._join(timeout)
