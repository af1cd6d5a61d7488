"""A directory of rank files followed as one job: every rank into its own model.

Why apart from ``sources.py``: following one file (offsets, truncation, rotation) is
that module's job; this one adds what a job of several processes needs on top of it,
rank files that appear seconds apart, a cap on how many are followed, and the sharded
grad-norm join (``shardnorm.PeerJoin``) for the rank in view.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from ....probe.schema import Records
from ..files.sourcefiles import (
    RankFile,
    SourceError,
    list_rank_files,
    pick_rank_file,
    separate_runs,
)
from ..ranks import jobs
from ..ranks.jobs import RankLog
from ..ranks.shardnorm import PeerJoin, has_shares
from ..store.run import RunModel
from .filesource import FileSource, OnUpdate


class DirectorySource(FileSource):
    """A directory of rank files, one job: every rank followed into its own model.

    Rank 0 (else the newest file: ``chosen``) is read by this source into the model it was
    given, so everything that shows one run keeps working on it; every other rank gets
    its own :class:`RunModel` (its own store and rules: NaN, OOM, memory growth and crashes
    are per process) and its own :class:`FileSource` thread, started with this one.
    ``ranks`` lists them all in rank order (``jobs.RankLog``), replaced as a whole when
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
        # a folder of separate runs (./dltop-runs) is no job: its newest run alone; a folder
        # of several jobs' ranks: its newest job alone (jobs.py, as `dltop check DIR`)
        choice = jobs.choose(self.directory, self.files)
        self.separate = separate_runs(self.files)
        self.job = choice.job  # files appearing later join only if they are this job's
        if choice.note:
            self.skipped.append(choice.note)
        self.files = choice.files
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
        # grad_sq_local before the records reach the model (shardnorm.py); the tail-first
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

    def _deliver(self, records: Records) -> None:
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
            if self.separate:
                return  # the run chosen stays the one shown: the others are other runs
            with contextlib.suppress(SourceError):  # the directory went away: keep the old list
                files = list_rank_files(self.directory)
                job = self.job
                self.files = files if job is None else [f for f in files if jobs.in_job(f, job)]
                self._add_ranks(self.files)
                self.join.set_peers([f.path for f in self.files if f.path != self.chosen.path])


def _rank_order(r: RankLog) -> tuple[bool, int, str]:
    return (r.rank is None, r.rank if r.rank is not None else 0, r.path)
