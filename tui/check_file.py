"""One log through the rules: a dltop log read in chunks, or another tool's log converted.

Why apart from ``check_cmd.py``: that module finds a source's logs, hands the ranks of a
job to workers, judges them side by side and picks the exit code; this one is what each
of them does with one file, the same in a worker process and in the command's own.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from .check_output import FileResult
from .core.diagnosis.status import explain_unrecorded_end, local_pid_alive, run_state
from .core.files.logbytes import decoder
from .core.files.sourcefiles import SourceError, open_log
from .core.ranks import compare as ranks
from .core.ranks import shardnorm
from .core.rules import Config, RuleEngine
from .core.sources import foreign, rules_worker
from .core.sources.logread import Snapshot
from .core.store import pipeline
from .core.store.runstore import Store
from .report_parallel import store_then_engine

# bytes read and decoded at a time: the viewer's parse size (sources.CHUNK). The records of
# 64 KiB are still in the CPU's cache when the engine reads them; those of 1 MiB are not
# (~3 % of `dltop check`'s time). The decoder gives the same records for any chunking.
READ_CHUNK = 64 << 10


class CheckError(Exception):
    """Why the source cannot be checked: one line for stderr."""


def _open_log(path: str) -> int:
    """A regular file's descriptor; a FIFO, device or symlink loop is a CheckError, never
    a read that blocks or never ends (sourcefiles.open_log)."""
    try:
        return open_log(path)
    except SourceError as exc:
        raise CheckError(str(exc)) from None


def check_foreign(path: str, fmt: str, config: Config, store: Store | None = None) -> FileResult:
    """Another tool's log: converted to our records as it is read (a batch at a time:
    foreign/common.py), through a fresh engine like any log."""
    try:
        log = foreign.load(path, fmt)
    except foreign.MissingExtra:
        raise
    except SourceError as exc:
        raise CheckError(str(exc)) from None
    engine = RuleEngine(config)
    try:
        for batch in log.batches():  # converted as read: a batch's memory, not the run's
            pipeline.feed(batch, engine, store=store)
    except SourceError as exc:
        raise CheckError(str(exc)) from None
    engine.finish()
    state = run_state(engine, now=time.time(), pid_alive=None)
    return FileResult(path, engine, state, log.skipped, notes=list(log.notes), store=store)


def check_file(
    path: str,
    config: Config,
    times: ranks.RankTimes | None = None,
    store: Store | None = None,
    *,
    shares: shardnorm.RankShares | None = None,
    on_bytes: Callable[[int], None] | None = None,
    beside: int | None = None,
    follow_until: float | None = None,
) -> FileResult:
    """Feed one log through a fresh engine in chunks (bounded memory for any log size);
    ``times`` (one rank of a job) gets the step timings the ranks are compared by, ``store``
    the records for charts, ``shares`` its sharded grad-norm shares (the first rank's steps
    get the joined norm before the engine and the store see them), ``on_bytes`` the bytes
    read so far after each chunk (a progress line). ``beside``: with a store, the bytes
    from which the rules run in a child process meanwhile (``report_parallel.py``).
    ``follow_until``: a ``time.monotonic()`` deadline to read on to while the run goes
    on (``--follow``); without it the log is read as it was when it was opened."""
    fmt = foreign.detect(path)
    if fmt is not None:
        return check_foreign(path, fmt, config, store)
    dec = decoder()
    engine = RuleEngine(config)
    job: rules_worker.RulesJob | None = None
    note = ""
    try:
        with os.fdopen(_open_log(path), "rb") as f:
            # the log as it is now; a live run's log grows meanwhile: read on only with
            # ``follow_until`` (--follow), and at most until then (tui/core/sources/logread.py)
            snap = Snapshot(f, READ_CHUNK, follow_until)
            done = 0
            if beside is not None and store is not None:  # dltop report: rules in a child
                job = rules_worker.start_beside(
                    f.fileno(), config, beside, shares is not None, size=snap.size
                )
            if job is not None and store is not None:
                engine = store_then_engine(
                    f, job, dec, store, config, times, shares, on_bytes, READ_CHUNK
                )
                done = snap.pos = f.tell()
            for chunk in snap.chunks(lambda: _run_over(engine)):
                recs = dec.feed(chunk)
                if on_bytes is not None:
                    done += len(chunk)
                    on_bytes(done)
                pipeline.feed(recs, engine, shares=shares, times=times, store=store)
            unread = snap.unread()
            if unread:  # still growing: its last line is being written, not malformed
                note = snap.note(unread, dec.pending)
    except IsADirectoryError:
        raise CheckError(f"{path} is a directory") from None
    except OSError as exc:
        raise CheckError(f"cannot read {path}: {exc.strerror or exc}") from None
    finally:
        if job is not None:
            job.kill()  # ended (reaped) already, or abandoned by an error or a Ctrl-C
    tail = dec.finish() if not note else []
    if shares is not None:
        pipeline.feed(tail, shares=shares)
        shares.finish()  # the last joined norms, written into their records before the rules
    pipeline.feed(tail, engine, times=times, store=store)
    if times is not None:
        times.finish()
    engine.finish()  # the log is all there is: judge the last steps (no exit record after SIGKILL)
    if dec.records == 0:
        what = "is empty" if dec.bytes == 0 else 'is not a dltop log (no JSON record with a "kind")'
        raise CheckError(f"{path} {what}")
    state = run_state(engine, now=time.time(), pid_alive=local_pid_alive(engine.meta))
    state = explain_unrecorded_end(state, path)
    rank = (engine.meta or {}).get("rank")
    rank_ = rank if isinstance(rank, int) else None
    notes = [note] if note else []
    return FileResult(path, engine, state, dec.malformed, rank_, notes=notes, store=store)


def _run_over(engine: RuleEngine) -> bool:
    """A followed log can stop: its exit record is in, or its process is gone (this host)."""
    if engine.crash_rule.run_ending.exit_status is not None:
        return True
    return local_pid_alive(engine.meta) is False
