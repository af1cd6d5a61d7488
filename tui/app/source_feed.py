"""Opening the app's source and feeding it on a worker thread; a new run in the same log.

Why apart from ``app.py``: which reader a path gets (a run's log or folder, another
tool's log, a live socket, overlaid runs) and how its thread reports back (one message
per chunk, never a redraw; a failure as a one-line error) is one job; the app draws.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.present import view_model as vm
from ..core.sources.filesource import FileSource, SourceError
from ..core.sources.overlay_source import OverlaySource
from ..core.sources.socket_source import SocketSource, StreamError
from ..core.sources.source_open import open_source
from ..core.text.safetext import visible
from .messages import Ingested, SourceEnded, SourceFailed
from .mixin_base import AppMixin
from .toast import notify_wrapped

if TYPE_CHECKING:
    from ..core.diagnosis.ticks import Ticks
    from ..core.present.view_model import ViewState
    from ..core.sources.foreign_source import ForeignSource
    from ..core.store.run import RunModel


class SourceFeed(AppMixin):
    """Mixed into ``DltopApp``: its reader, started on a thread worker."""

    model: RunModel
    overlay: list[str] | None
    follow: bool
    poll_interval: float
    reader: FileSource | ForeignSource | SocketSource | OverlaySource | None
    source_error: str | None
    ticks: Ticks
    state: ViewState
    _drawn: dict[str, Any]
    _pane_user: bool | None
    _auto_explained: bool

    if TYPE_CHECKING:  # what the other mixins provide

        def _ticks_beside(self, path: str | None) -> Ticks: ...

    def _start_source(self, path: str) -> None:
        """Open the core's source and run its loop in a thread worker that never kills the
        app: a failing source becomes a one-line error in the header."""
        try:
            if self.overlay is not None:  # one reader per run, run A's into self.model
                self.reader = OverlaySource(
                    self.overlay,
                    self.model,
                    self._records_arrived,
                    follow=self.follow,
                    poll_interval=self.poll_interval,
                )
            else:  # a log, a folder, another tool's log, or a live socket (same reader shape)
                self.reader = open_source(
                    path,
                    self.model,
                    self._records_arrived,
                    follow=self.follow,
                    poll_interval=self.poll_interval,
                )
        except (SourceError, StreamError) as e:
            self.source_error = str(e)
            return
        reader = self.reader
        chosen = getattr(reader, "chosen", None)  # a directory: ticks go next to the rank shown
        if chosen is not None:
            self.ticks = self._ticks_beside(chosen.path)
        if getattr(reader, "skipped", None):  # rank files that are FIFOs, devices, loops
            skipped = visible("; ".join(reader.skipped))  # type: ignore[union-attr]
            notify_wrapped(self, skipped, severity="warning", timeout=8)

        def read() -> None:  # on the worker thread
            try:
                reader.run()
            except Exception as e:  # a bug below must not freeze the screen silently
                reader.error = f"reader stopped: {type(e).__name__}: {e}"
            finally:
                if reader.error:
                    self.post_message(SourceFailed(reader.error))
                self.post_message(SourceEnded())

        self.run_worker(read, thread=True, exit_on_error=False, name="reader", group="source")

    def _records_arrived(self, records: int) -> None:
        """The reader thread's callback, once per chunk: one thread-safe message, no drawing."""
        self.post_message(Ingested(records))

    def _show_restart(self, reason: str) -> None:
        """A truncated or replaced log is a new run: forget the old view (window, cursor,
        selected alert) and say so. The restart is model state (``RunModel.restarted``),
        pulled at the tick like everything else, not a message from the reader thread."""
        old = self.state
        self.state = vm.ViewState(
            smoothing=old.smoothing, log_loss=old.log_loss, panels=old.panels, x_axis=old.x_axis
        )
        self._drawn.clear()
        self._pane_user = None
        self._auto_explained = False
        self.notify(f"new run: {reason}", severity="warning", timeout=6)
