"""Another tool's log in the viewer: a finished replay, read once, never followed.

Why a source of its own: a Hugging Face ``trainer_state.json``, a Lightning
``metrics.csv`` or TensorBoard event files are converted whole (``core/foreign``, with
its bounded reads), not tailed line by line like our logs (``sources.FileSource``).
"""

from __future__ import annotations

import os
import traceback
from typing import Any

from ..files.sourcefiles import SourceError
from ..store.run import RunModel
from .filesource import SLICE, OnUpdate
from .reader import ReaderThread


class ForeignSource(ReaderThread):
    """Another tool's log (``core/foreign``): a finished replay, read once on the reader
    thread, ingested in slices, never followed and never written to.

    Shaped like :class:`FileSource` where the app uses it (start / stop / run / alive /
    ``error`` / ``traceback`` / ``caught_up``). A missing optional reader
    (``foreign.MissingExtra``) is raised here, in the caller, before any thread starts.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        model: RunModel,
        on_update: OnUpdate | None = None,
        *,
        fmt: str | None = None,
        **_ignored: Any,  # follow, poll_interval...: a finished file has nothing to follow
    ) -> None:
        from . import foreign  # noqa: PLC0415

        self.path = os.fspath(path)
        found = fmt or foreign.detect(self.path)
        if found is None:
            raise SourceError(f"{self.path}: not a log dltop can read")
        self.format = found
        foreign.prepare(self.path, found)
        self.model = model
        self.on_update = on_update
        self.error: str | None = None
        self.traceback: str | None = None
        self._init_reader()

    def run(self) -> None:
        """Read the log and ingest it as it is converted (foreign/common.py's batches)."""
        from . import foreign  # noqa: PLC0415

        try:
            # read already when the command line checked it (view_cmd), else now
            log = foreign.take_preloaded(self.path, self.format)
            if log is None:
                log = foreign.load(self.path, self.format)
            for batch in log.batches():  # converted as read: a batch's memory at a time
                for i in range(0, len(batch), SLICE):
                    if self._stop.is_set():
                        return
                    self.model.ingest(batch[i : i + SLICE], malformed=log.skipped)
                    self._notify(len(batch[i : i + SLICE]))
            self.model.ingest([], malformed=log.skipped)  # the count, complete at the end
            self.model.finish()  # the whole log is in: judged at its end, as `check` does
        except SourceError as exc:
            self._fail(str(exc))
        except Exception as exc:  # a bug: said in the UI instead of a traceback over it
            self.traceback = traceback.format_exc()
            self._fail(f"reader failed: {type(exc).__name__}: {exc}")
        finally:
            self.caught_up.set()
