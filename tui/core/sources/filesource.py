"""Where records come from: a growing log file, a finished one, a directory of rank files.

A :class:`FileSource` owns one reader thread. It reads big chunks with ``os.pread`` at
an explicit offset, parses them with the schema's ``LineDecoder`` (partial last line held
until its newline, corrupt lines counted) outside the model lock, feeds the model in
slices, and calls ``on_update(n_records)`` at most once per chunk. At end of file it
polls every ``poll_interval`` seconds, and on every poll checks what existing tailers
miss (see ``shared/notes/engineering.md``):

- truncation (size below our offset) or a rewrite in place (the first line changed):
  a new run, ``model.reset()``;
- the path now names another file: if the old file was deleted or replaced
  (``os.replace``; its link count is 0) or the new file starts with another run's
  ``meta``, a new run; otherwise it was rotated (renamed away, recreated) and we go on
  with the new file as the same run;
- the path vanished: keep the old descriptor and wait for it to come back.

A finished log is just a file: it is read at full speed and then followed (pass
``follow=False`` to stop at its end); whether the run finished is the rules engine's call
(an ``exit`` event), never the file's. A huge log (> ``tail_first`` bytes) shows its tail
first (``RunModel.ingest_preview``), builds the full run's charts off-lock
(``RunModel.adopt``), then brings the rules through the run (``RunModel.adopt_engine``).
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from ....probe.decoding import decode_line
from ....probe.schema import META, Record, Records
from ..files.logbytes import decoder, first_line, pieces
from ..files.sourcefiles import (
    SourceError,
    check_log_file,
    list_rank_files,
    open_log,
)
from ..store.run import RunModel
from .backfill import TailFirst
from .reader import ReaderThread

__all__ = [
    "SourceError",
    "FileSource",
    "list_rank_files",
    "check_log_file",
]

# Bytes per read. Measured on a 1 M-step replay (CPU s for decode + store, peak RSS):
# 64 KB 2.7 s / 110 MB, 256 KB 3.0 s / 114 MB, 1 MB 3.6 s / 135 MB, 4 MB slower still:
# small chunks keep the freshly parsed dicts in cache and few of them alive at once.
CHUNK = 64 << 10
# Bytes per ``os.pread``, parsed ``CHUNK`` at a time. Few reads, not small ones: a read
# releases the GIL and takes it straight back, and a thread waiting for the GIL (the UI's
# event loop, back from ``select``) only asks for it after a whole switch interval (5 ms)
# with no GIL hand-over meanwhile. A reader doing a 64 KB read every ~1 ms so starved the
# event loop: 200-500 ms stalls while a big log loaded (CPython's "convoy effect"; see
# docs/viewer.md, "Speed").
READ_BLOCK = 4 << 20
SLICE = 4096  # records per lock hold, so the UI never waits long for the lock
POLL = 0.2  # seconds between polls at end of file
TAIL_FIRST = 16 << 20  # logs bigger than this show their tail first (~65 k steps; see benchmark)
TAIL_BYTES = 4 << 20  # how much tail to show first (~18 k steps)
_HEAD = 4096  # bytes of the first line kept to notice a rewrite in place

OnUpdate = Callable[[int], Any]


def _same_run(a: Record | None, b: Record) -> bool:
    if a is None:
        return False
    for key in ("run_id", "run", "id"):
        if key in a and key in b:
            return a[key] == b[key]
    return a == b


# bytes kept from the end of the last read, to tell a rewritten file (FileSource._check_file)
_LAST_READ = 64


class FileSource(ReaderThread, TailFirst):  # ReaderThread first: its _notify is real
    """Follows one log file into ``model`` on a reader thread (or inline via :meth:`run`)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        model: RunModel,
        on_update: OnUpdate | None = None,
        *,
        follow: bool = True,
        poll_interval: float = POLL,
        chunk_size: int = CHUNK,
        tail_first: int | None = TAIL_FIRST,
        tail_bytes: int = TAIL_BYTES,
    ) -> None:
        self.path = os.fspath(path)
        check_log_file(self.path)  # SourceError now, in the caller, not later in the thread
        self.model = model
        self.on_update = on_update
        self.follow = follow
        self.poll_interval = poll_interval
        self.chunk_size = chunk_size
        self.tail_first = tail_first  # None or 0: always parse from the start
        self.tail_bytes = tail_bytes
        self.offset = 0  # bytes of the current file consumed (the held partial line included)
        self.missing = False  # the path is gone (rotated away, not yet recreated)
        self.error: str | None = None  # why the reader thread stopped early
        self.traceback: str | None = None  # for a bug report, when it was a bug
        self._init_reader()  # caught_up: set each time the reader reaches end of file
        self._fd = -1
        self._ident: tuple[int, int] = (0, 0)
        self._head: bytes | None = None
        self._last_read: tuple[bytes, int] | None = None  # the last bytes read, and their end
        self._dec = decoder()

    # -- control: start / stop / alive / wait_caught_up (reader.ReaderThread) ------------
    def run(self) -> None:
        """The reader loop; returns at end of file when ``follow`` is False, else on stop()."""
        try:
            self._open()
            size = os.fstat(self._fd).st_size
            if self.tail_first and size > self.tail_first:
                self._tail_first(size)
            while not self._stop.is_set():
                # a backlog in big reads (see READ_BLOCK); once caught up, what a poll finds
                # a chunk per read: measured, that keeps a live run's event-loop lag lower
                if self._read_chunk(self.chunk_size if self.caught_up.is_set() else READ_BLOCK):
                    continue
                self.caught_up.set()
                if not self.follow:
                    self._deliver(self._dec.finish())
                    break
                if self._check_file():
                    continue
                self._idle()
                self._stop.wait(self.poll_interval)
        except SourceError as exc:
            self._fail(str(exc))
        except OSError as exc:
            self._fail(f"cannot read {self.path}: {exc.strerror or exc}")
        except Exception as exc:  # a bug: say it in the UI instead of a traceback over it
            self.traceback = traceback.format_exc()
            self._fail(f"reader failed: {type(exc).__name__}: {exc}")
        finally:
            self._drop_rules_job()  # a rules child still running (backfill.py) ends with us
            self._close()
            self.caught_up.set()

    # -- reading -------------------------------------------------------------------------
    def _open(self) -> None:
        fd = open_log(self.path)  # a regular file only: a FIFO or device never blocks us
        self._close()
        self._fd = fd
        st = os.fstat(fd)
        self._ident = (st.st_dev, st.st_ino)
        self.model.log_path = self.path
        self.offset = 0
        self._head = None
        self._last_read = None
        self.missing = False

    def _close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _read_chunk(self, limit: int = READ_BLOCK) -> bool:
        """Read up to ``limit`` bytes (one read), parse and deliver them a chunk at a time;
        False at end of file."""
        got = False
        if self.caught_up.is_set() and self._rewritten():  # following: new bytes, same file?
            got = True
        for off, piece in self._pieces(self._fd, self.offset, self.offset + limit):
            self.offset = off
            if not got:
                got = True
                if self._head is None:
                    self._remember_head()
            self._deliver(self._dec.feed(piece))
            self._last_read = (piece[-_LAST_READ:], off)
        return got

    def _pieces(self, fd: int, off: int, upto: int | None = None) -> Iterator[tuple[int, bytes]]:
        """The file's bytes from ``off`` to ``upto`` (None: to its end, as it grows) in
        ``chunk_size`` pieces, each with the offset just past it, read ``READ_BLOCK`` bytes
        per ``os.pread`` (see READ_BLOCK)."""
        return pieces(fd, off, upto, READ_BLOCK, self.chunk_size)

    def _deliver(self, records: Records) -> None:
        model = self.model
        changed = self._dec.malformed != model.malformed
        for i in range(0, len(records), SLICE):
            model.ingest(records[i : i + SLICE], malformed=self._dec.malformed)
        if changed and not records:
            model.ingest([], malformed=self._dec.malformed)
        if records or changed:
            self._notify(len(records))

    def _remember_head(self) -> None:
        blob = os.pread(self._fd, _HEAD, 0)
        nl = blob.find(b"\n")
        if nl >= 0:
            self._head = blob[: nl + 1]

    def _restart(self, reason: str) -> None:
        self._dec = decoder()
        self.model.reset(reason)
        self._notify(0)

    def _check_file(self) -> bool:
        """Truncation, replacement, rotation; True when reading should go on at once."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self.missing = True  # rotated away; keep the old descriptor until it reappears
            # ...or deleted: no other name left for what we still read (st_nlink 0)
            self.model.set_log_deleted(os.fstat(self._fd).st_nlink == 0)
            return False
        if self.missing:
            self.model.set_log_deleted(False)
        self.missing = False
        if (st.st_dev, st.st_ino) != self._ident:
            return self._switch_file(st.st_size)
        if st.st_size < self.offset:
            self._open()
            self._restart(f"{self.path} was truncated")
            return True
        if self._head is not None and os.pread(self._fd, len(self._head), 0) != self._head:
            # truncated between the stat above and this read (a writer's open("w")), or
            # rewritten past our offset: said as what the file is now
            self._restart_as_it_is()
            return True
        return self._rewritten()

    def _rewritten(self) -> bool:
        """A rewrite that kept the first line (a hand-written log without a meta, written
        again from the start, grown past our offset within one poll): the last bytes read
        are no longer where they were. Restarts from the top; True when it did."""
        last = self._last_read
        if last is None or os.pread(self._fd, len(last[0]), last[1] - len(last[0])) == last[0]:
            return False
        self._restart_as_it_is()
        return True

    def _restart_as_it_is(self) -> None:
        """Start over from the top, saying "truncated" when the file is now shorter than
        what was read, "rewritten" when it was written again past that."""
        how = "truncated" if os.fstat(self._fd).st_size < self.offset else "rewritten"
        self._open()
        self._restart(f"{self.path} was {how}")

    def _switch_file(self, new_size: int) -> bool:
        old_gone = os.fstat(self._fd).st_nlink == 0
        if not old_gone:
            # rotated: a new run only if the new file starts with another run's meta
            try:
                fd = open_log(self.path)
            except (OSError, SourceError):
                return False
            try:
                line = first_line(fd)
            finally:
                os.close(fd)
            if line is None:
                return False  # nothing complete yet: the old file may still be written to
            first = decode_line(line)
            new_run = (
                first is not None
                and first.get("kind") == META
                and not _same_run(self.model.meta, first)
            )
        else:
            new_run = True
        self._deliver(self._dec.finish())  # the old file's last line, if it had no newline
        self._open()
        if new_run:
            self._restart(f"{self.path} was replaced by a new run")
        return True

    def _idle(self) -> None:
        """Called between polls at end of file; subclasses refresh what they list."""
