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

import contextlib
import os
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from dltop.probe.decoding import LineDecoder, decode_line
from dltop.probe.schema import META
from dltop.tui.core.backfill import TailFirst
from dltop.tui.core.peers import PeerJoin, has_shares
from dltop.tui.core.ranklog import RankLog
from dltop.tui.core.reader import ReaderThread
from dltop.tui.core.run import RunModel
from dltop.tui.core.sourcefiles import (
    RankFile,
    SourceError,
    check_log_file,
    list_rank_files,
    open_log,
    pick_rank_file,
)

__all__ = [
    "SourceError",
    "FileSource",
    "DirectorySource",
    "ForeignSource",
    "open_source",
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


def _same_run(a: dict[str, Any] | None, b: dict[str, Any]) -> bool:
    if a is None:
        return False
    for key in ("run_id", "run", "id"):
        if key in a and key in b:
            return a[key] == b[key]
    return a == b


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
        self._dec = LineDecoder()

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
        self.missing = False

    def _close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _read_chunk(self, limit: int = READ_BLOCK) -> bool:
        """Read up to ``limit`` bytes (one read), parse and deliver them a chunk at a time;
        False at end of file."""
        got = False
        for off, piece in self._pieces(self._fd, self.offset, self.offset + limit):
            self.offset = off
            if not got:
                got = True
                if self._head is None:
                    self._remember_head()
            self._deliver(self._dec.feed(piece))
        return got

    def _pieces(self, fd: int, off: int, upto: int | None = None) -> Iterator[tuple[int, bytes]]:
        """The file's bytes from ``off`` to ``upto`` (None: to its end, as it grows) in
        ``chunk_size`` pieces, each with the offset just past it, read ``READ_BLOCK`` bytes
        per ``os.pread`` (see READ_BLOCK)."""
        while upto is None or off < upto:
            data = os.pread(fd, READ_BLOCK if upto is None else min(READ_BLOCK, upto - off), off)
            if not data:
                return
            for i in range(0, len(data), self.chunk_size):
                piece = data[i : i + self.chunk_size]
                off += len(piece)
                yield off, piece

    def _deliver(self, records: list[dict[str, Any]]) -> None:
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
        self._dec = LineDecoder()
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
            self._open()
            self._restart(f"{self.path} was rewritten")
            return True
        return False

    def _switch_file(self, new_size: int) -> bool:
        old_gone = os.fstat(self._fd).st_nlink == 0
        if not old_gone:
            # rotated: a new run only if the new file starts with another run's meta
            try:
                fd = open_log(self.path)
            except (OSError, SourceError):
                return False
            try:
                blob = os.pread(fd, 1 << 16, 0)
            finally:
                os.close(fd)
            nl = blob.find(b"\n")
            if nl < 0:
                return False  # nothing complete yet: the old file may still be written to
            first = decode_line(blob[:nl])
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


class DirectorySource(FileSource):
    """A directory of rank files, one job: every rank followed into its own model.

    Rank 0 (else the newest file: ``chosen``) is read by this source into the model it was
    given, so everything that shows one run keeps working on it; every other rank gets
    its own :class:`RunModel` (its own store and rules: NaN, OOM, memory growth and crashes
    are per process) and its own :class:`FileSource` thread, started with this one.
    ``ranks`` lists them all in rank order (``ranklog.RankLog``), replaced as a whole when
    a rank's file appears later (ranks start seconds apart), so a reader of it never sees
    it half-built. At most ``MAX_RANKS`` are followed: beyond that a note says so.
    """

    REFRESH = 2.0
    MAX_RANKS = 64  # a thread, a store and a rules engine each; a 1000-rank job is sampled

    def __init__(
        self,
        directory: str | os.PathLike[str],
        model: RunModel,
        on_update: OnUpdate | None = None,
        **kwargs: Any,
    ) -> None:
        self.directory = os.fspath(directory)
        self.skipped: list[str] = []  # *.jsonl that are not regular files, one note each
        self.files = list_rank_files(self.directory, self.skipped)
        if not self.files:
            raise SourceError(f"no .jsonl logs in {self.directory}")
        self.chosen = pick_rank_file(self.files)
        self._since_refresh = 0.0
        self._kwargs = kwargs  # follow, poll_interval...: the same for every rank
        super().__init__(self.chosen.path, model, on_update, **kwargs)
        self.ranks: tuple[RankLog, ...] = (RankLog(self.chosen.rank, self.chosen.path, model),)
        self.others: list[FileSource] = []
        self._running = False
        self._capped = False
        self._add_ranks(self.files)
        # a sharded job (FSDP): the whole model's grad_norm is joined from every rank's
        # grad_sq_local before the records reach the model (peers.py); the tail-first
        # shortcut would bypass the join, so such a job's log is read from its start
        self.join = PeerJoin()
        self.join.set_peers([f.path for f in self.files if f.path != self.chosen.path])
        if self.tail_first and has_shares(self.chosen.path):
            self.tail_first = None

    def _add_ranks(self, files: list[RankFile]) -> None:
        """Follow the rank files not followed yet (started at once once we run)."""
        known = {r.path for r in self.ranks}
        # two files saying the same rank (a copied log, two attempts): the second one is
        # named by its file, so that the table never shows two rows of one rank
        taken = {r.rank for r in self.ranks}
        added = []
        for f in files:
            if f.path in known:
                continue
            if len(known) >= self.MAX_RANKS:
                if not self._capped:
                    self._capped = True
                    self.skipped.append(
                        f"following {self.MAX_RANKS} of {len(files)} rank files (the first by rank)"
                    )
                break
            model = RunModel(f"rank{f.rank}" if f.rank is not None else f.path, self.model.config)
            try:
                src = FileSource(f.path, model, self.on_update, **self._kwargs)
            except SourceError as exc:  # not a log after all: one note, the others go on
                self.skipped.append(f"skipped {exc}")
                known.add(f.path)
                continue
            known.add(f.path)
            self.others.append(src)
            added.append(RankLog(None if f.rank in taken else f.rank, f.path, model))
            taken.add(f.rank)
            if self._running:
                src.start()
        if added:
            self.ranks = tuple(sorted((*self.ranks, *added), key=_rank_order))

    def run(self) -> None:
        """Start every other rank's reader, follow ``chosen`` here; a replay returns once
        every rank is read, a follow when stopped (stopping the others with it)."""
        self._running = True
        for src in list(self.others):
            src.start()
        try:
            super().run()
            while not self._stop.is_set() and any(s.alive for s in list(self.others)):
                self._stop.wait(self.poll_interval)
        finally:
            if self._stop.is_set():
                for src in list(self.others):
                    src.stop()

    def stop(self, timeout: float = 2.0) -> None:
        super().stop(timeout)
        for src in list(self.others):
            src.stop(timeout)

    def wait_caught_up(self, timeout: float | None = None) -> bool:
        """True once every rank has read what there is, within ``timeout`` for them all
        (not per rank: 64 ranks must not wait 65 timeouts)."""
        end = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if end is None else max(0.0, end - time.monotonic())

        ok = self.caught_up.wait(left())
        return all([ok, *(s.wait_caught_up(left()) for s in list(self.others))])

    def _deliver(self, records: list[dict[str, Any]]) -> None:
        now = time.monotonic()
        ready = self.join.offer(records, now)
        if not self.follow and self.caught_up.is_set():  # a replay's end: nothing comes later
            ready += self.join.release(now, force=True)
        super()._deliver(ready)

    def _restart(self, reason: str) -> None:
        self.join.reset()
        super()._restart(reason)

    def _close(self) -> None:
        super()._close()
        join = getattr(self, "join", None)  # set after FileSource.__init__
        if join is not None:
            join.close()

    def _idle(self) -> None:
        if self.join.held:  # sharded steps whose last shares came, or whose wait is over
            super()._deliver(self.join.release(time.monotonic()))
        self._since_refresh += self.poll_interval
        if self._since_refresh >= self.REFRESH:
            self._since_refresh = 0.0
            with contextlib.suppress(SourceError):  # the directory went away: keep the old list
                self.files = list_rank_files(self.directory)
                self._add_ranks(self.files)
                self.join.set_peers([f.path for f in self.files if f.path != self.chosen.path])


def _rank_order(r: RankLog) -> tuple[bool, int, str]:
    return (r.rank is None, r.rank if r.rank is not None else 0, r.path)


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
        from dltop.tui.core import foreign  # noqa: PLC0415

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
        """Read the whole log (bounded by foreign/common.py's limits), then ingest it."""
        from dltop.tui.core import foreign  # noqa: PLC0415

        try:
            log = foreign.load(self.path, self.format)
            records = log.records
            for i in range(0, len(records), SLICE):
                if self._stop.is_set():
                    return
                self.model.ingest(records[i : i + SLICE], malformed=log.skipped)
                self._notify(len(records[i : i + SLICE]))
            if not records:
                self.model.ingest([], malformed=log.skipped)
        except SourceError as exc:
            self._fail(str(exc))
        except Exception as exc:  # a bug: said in the UI instead of a traceback over it
            self.traceback = traceback.format_exc()
            self._fail(f"reader failed: {type(exc).__name__}: {exc}")
        finally:
            self.caught_up.set()


def open_source(
    spec: str | os.PathLike[str],
    model: RunModel,
    on_update: OnUpdate | None = None,
    **kwargs: Any,
) -> FileSource | ForeignSource:
    """A source for a log file, a directory of rank files, or another tool's log (a
    Hugging Face trainer_state.json, a Lightning metrics.csv, TensorBoard event files, or
    a folder holding them: recognised by content, ``core/foreign``); not started yet.

    Raises :class:`SourceError` with a one-line message when it cannot be read.
    """
    from dltop.tui.core import foreign  # noqa: PLC0415

    path = os.fspath(spec)
    fmt = foreign.detect(path)
    if fmt is not None:
        return ForeignSource(path, model, on_update, fmt=fmt)
    if os.path.isdir(path):
        return DirectorySource(path, model, on_update=on_update, **kwargs)
    return FileSource(path, model, on_update, **kwargs)
