"""Huge logs: show the tail at once, then the whole run's charts, then its diagnosis.

A full parse of a 1 M-step log into the store takes a few seconds and the rules engine
several times more (``benchmarks/replay.py``), far over the 2 s a dashboard may take. So
a source that opens a log bigger than ``tail_first`` bytes:

1. parses only its last ``tail_bytes`` (plus the ``meta`` line) into a fresh store and
   notifies: the dashboard shows the latest steps within ~0.2 s;
2. parses the whole log into a private store, off-lock, while a second cursor keeps
   feeding lines appended meanwhile to the preview, then swaps it in (``RunModel.adopt``);
3. re-reads the log to bring a fresh rules engine through the run in order, while the
   normal follow loop keeps charting new records and the model queues them for that
   engine, then swaps it in (``RunModel.adopt_engine``). With a second CPU, a child
   process (``rules_worker.py``) started with step 2 has meanwhile run the rules over the
   log up to where the preview ended; its engine is taken over here and fed only the
   lines after that.

``TailFirst`` is a mixin of :class:`dltop.tui.core.sources.filesource.FileSource`, which owns the
descriptor, the decoder, the offsets and the follow loop used here.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from ....probe.schema import META
from ..files.logbytes import decoder, first_record
from ..store.pipeline import feed_engine, make_engine
from . import rules_worker, workers

if TYPE_CHECKING:
    import threading
    from collections.abc import Iterator

    from ....probe.decoding import LineDecoder
    from ..rules import RuleEngine
    from ..store.run import RunModel

CHUNK_LIVE = 1 << 20  # most bytes read per progress tick for the live preview
PROGRESS = 0.2  # seconds between progress notifications during a backfill


class TailFirst:
    """The tail-first replay and the two backfills (see the module docstring)."""

    model: RunModel
    offset: int
    chunk_size: int
    tail_bytes: int
    _fd: int
    _dec: LineDecoder
    _stop: threading.Event
    # a log of this many bytes or more gets its rules backfill in a child process started
    # with the charts' backfill (rules_worker.py); None: never
    rules_worker_min: int | None = rules_worker.MIN_BYTES
    _rules_job: rules_worker.RulesJob | None = None

    # What FileSource provides (declared here so that the contract is checked, not a comment)
    def _notify(self, n: int) -> None:
        raise NotImplementedError

    def _read_chunk(self, limit: int) -> bool:
        raise NotImplementedError

    def _pieces(self, fd: int, off: int, upto: int | None = None) -> Iterator[tuple[int, bytes]]:
        raise NotImplementedError

    def _check_file(self) -> bool:
        raise NotImplementedError

    def _remember_head(self) -> None:
        raise NotImplementedError

    def _tail_first(self, size: int) -> None:
        """Show the last ``tail_bytes`` at once, then build the whole run off-lock and swap.

        While the backfill runs, records appended to a live log still reach the preview
        (a second cursor, store only), so a huge live run does not look frozen meanwhile.
        """
        meta = first_record(self._fd)
        start = max(0, size - self.tail_bytes)
        blob = os.pread(self._fd, size - start, start)
        cut = blob.find(b"\n") + 1 if start else 0
        end = blob.rfind(b"\n") + 1  # the preview ends on a line boundary
        live_off = start + end  # where the live cursor picks up during the backfill
        show_meta = meta is not None and meta.get("kind") == META and start > 0
        self.model.ingest_preview([meta] if show_meta else [])  # type: ignore[list-item]
        pdec = decoder()
        n = 0
        for i in range(cut, end, self.chunk_size):  # in slices: few parsed dicts alive at once
            recs = pdec.feed(blob[i : min(i + self.chunk_size, end)])
            self.model.extend_preview(recs)
            n += len(recs)
        del blob
        self._notify(n)
        self._start_rules_job(live_off)
        live_dec = decoder()
        staged = self.model.staging(rules=False)
        last = time.monotonic()
        for off, piece in self._pieces(self._fd, self.offset):  # few reads: see READ_BLOCK
            if self._stop.is_set():
                self._drop_rules_job()
                return
            self.offset = off
            staged.ingest(self._dec.feed(piece))
            now = time.monotonic()
            if now - last >= PROGRESS:  # progress and live records, not one message per chunk
                last = now
                self.model.set_loading(self.offset / max(size, self.offset))
                fresh = os.pread(self._fd, CHUNK_LIVE, live_off)
                live_off += len(fresh)
                recs = live_dec.feed(fresh)
                self.model.extend_preview(recs)
                self._notify(len(recs))
        if self._stop.is_set():
            self._drop_rules_job()
            return
        self._remember_head()
        engine, error = make_engine(self.model.config)
        rules = engine is not None or error is not None  # None, None: no rules package
        # one step: a viewer never sees the charts done and the rules not yet begun
        # ("loading" and "diagnosing" both off) with the preview's alerts as the run's
        self.model.adopt(staged, self._dec.malformed, rules_follow=rules)
        self._notify(staged.records)
        if rules:
            self._backfill_rules(engine, error)
        else:
            self._drop_rules_job()

    def _backfill_rules(self, engine: RuleEngine | None, error: str | None) -> None:
        """Bring a fresh rules engine through the whole run, in order, by re-reading the
        log up to where the charts' backfill stopped, while the follow loop keeps the charts
        live (the model queues those records for the engine until it is adopted)."""
        upto = self.offset - self._dec.pending  # complete lines only; the rest comes live
        generation = self.model.generation
        start = 0  # where this process's reading starts: after what a child did
        job, self._rules_job = self._rules_job, None
        if job is not None and job.upto <= upto:
            done = self._await_rules_job(job, upto, generation)
            if done is False:
                return  # stopped, or the run restarted meanwhile
            if done is not True:
                engine, error = done
                start = job.upto
        elif job is not None:
            job.kill()
        fd = os.dup(self._fd)  # the follow loop may reopen the path (rotation) meanwhile
        try:
            dec = decoder()
            last = time.monotonic()
            # ends early if the log was truncated under us: the follow loop restarts the run
            for off, piece in self._pieces(fd, start, upto if error is None else start):
                if self._stop.is_set():
                    return
                error = feed_engine(engine, dec.feed(piece))
                if error is not None:
                    break
                now = time.monotonic()
                if now - last >= PROGRESS:
                    last = now
                    self.model.set_diagnosing(off / upto)
                    self._follow_a_little()
                    if self.model.generation != generation:
                        return  # the run restarted: this engine describes the old one
                    self._notify(0)
        finally:
            os.close(fd)
        self.model.adopt_engine(engine, error)
        self._notify(0)

    def _start_rules_job(self, upto: int) -> None:
        """The rules over ``[0, upto)`` in a child process, beside the charts' backfill,
        when the log is big enough and a second CPU can run it (rules_worker.py)."""
        least = self.rules_worker_min
        if least is None or upto < least or workers.cpus() < 2:
            return
        if make_engine(self.model.config)[0] is None:
            return  # no rules, or they fail to start: _backfill_rules says so
        self._rules_job = rules_worker.RulesJob.start(self._fd, upto, self.model.config)

    def _drop_rules_job(self) -> None:
        job, self._rules_job = self._rules_job, None
        if job is not None:
            job.kill()

    def _await_rules_job(
        self, job: rules_worker.RulesJob, upto: int, generation: int
    ) -> tuple[RuleEngine | None, str | None] | bool:
        """Wait for the child's engine while the follow loop keeps the charts live: the
        engine and its error; True when the child failed (run the rules here, from the
        start); False when the source stopped or the run restarted (the child is killed)."""
        try:
            while not job.poll(PROGRESS):
                if self._stop.is_set() or self.model.generation != generation:
                    return False
                self.model.set_diagnosing(job.reached / max(1, upto))
                self._follow_a_little()
                if self.model.generation != generation:
                    return False
                self._notify(0)
            got = job.result()
            return True if got is None else got
        finally:
            job.kill()  # ended already (reaped), or abandoned: never left running

    def _follow_a_little(self) -> None:
        """One bounded round of the follow loop (new records, truncation, rotation)."""
        if not self._read_chunk(CHUNK_LIVE):
            self._check_file()

    # -- end-of-file checks ----------------------------------------------------------------
