"""The background writer: queued records → complete JSON lines → sinks.

The training thread only appends to a deque (a tuple for a step, a dict for
anything else); this thread wakes every ~50 ms, turns what it finds into lines
with :func:`dltop.probe.encoding.encode_record` (the only way a line is made), and
hands each sink one batch of complete lines in one call. Events wake it at once.

Failure policy (``sinkwrite.py``): a sink that raises (disk full, file size limit, the
file descriptor closed under us, a dead socket) is dropped, one line goes to stderr,
and a ``warning`` event goes to the sinks that still work. Nothing here ever raises
into the training thread. The bounded queue and its ``dropped`` gaps: ``dropqueue.py``.

Queue items:
- a ``dict``: a finished record;
- a ``tuple`` whose first element is the index of a builder ``f(item, force) -> dict |
  None`` (see :meth:`Writer.register`): built here, off the training thread. An index,
  not the function itself, so that a tuple of plain numbers is one the garbage
  collector stops tracking: a full queue then costs a gen-2 collection (run on the
  training thread) a few ms instead of tens. ``None`` means "not ready yet" (a device
  read-back still in flight): the item and everything after it wait for the next
  wake, so the log keeps its order. ``force`` (close, crash flush, or an item held
  too long) asks the builder to give up waiting and return what it has: it is then a
  :class:`~dltop.probe.readback.Deadline` shared by the whole drain, so that N stuck
  read-backs cost one wait, not N. What is still in flight at the deadline is
  written without its device values, counted in ``readbacks_lost``, and noted by a
  ``warning`` event right after the first such record. A flush (the crash path)
  passes its own timeout down, so the drain finishes, events included, before the
  caller stops waiting.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .dropqueue import DropQueue, Gap
from .encoding import encode_record
from .readback import FORCE_WAIT_S, Deadline
from .schema import EV_WARNING, EVENT
from .sinkwrite import fsync_sinks, say, warn, write_batch
from .wake import Wake

if TYPE_CHECKING:
    from .filesink import Sink

WAKE_S = 0.05  # how often the thread looks at the queue
HOLD_MAX_S = 5.0  # an item not ready for this long is forced (a hung device must not stop the log)
# records queued at most; beyond, new ones are dropped and counted. A burst of 262 144
# steps (a loop doing nothing but step()) is kept whole; full, the queue holds ~80 MiB
# (benchmarks/probe_overhead.py --sustained measures it)
QUEUE_MAX = 1 << 18
# bytes of lines written at once while a backlog drains: bounded memory, and a log that
# grows as it goes rather than all at the end
WRITE_CHUNK = 1 << 20
# seconds close() waits for a still-draining writer to write more before giving it up
CLOSE_PROGRESS_S = 2.0
WRITE_MARGIN_S = 0.5  # of a flush's timeout, kept for encoding, writing and fsync after the waits


_WRITERS: weakref.WeakSet[Writer] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A forked child (a DataLoader worker) must never write into its parent's log.

    It inherits the writer's state and file descriptors but not its thread; a crash
    hook or an atexit handler in the child would otherwise append the child's records
    (a worker's SIGTERM, say) to the parent's run.
    """
    for w in list(_WRITERS):
        w._disown()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _waits_until(timeout: float) -> float:
    """The monotonic time a forced drain may wait until so that a caller waiting
    ``timeout`` seconds sees it finished: at most ``FORCE_WAIT_S``, and a margin kept for
    writing what was built."""
    wait = min(FORCE_WAIT_S, max(0.0, timeout - min(WRITE_MARGIN_S, timeout / 4)))
    return time.monotonic() + wait


class Writer:
    """Owns the writer thread, the queue, and the sinks."""

    def __init__(
        self,
        sinks: list[Sink],
        heartbeat: Callable[[], dict[str, Any]] | None = None,
        heartbeat_every: float = 2.0,
        wake_every: float = WAKE_S,
        queue_max: int | None = None,
    ) -> None:
        self.sinks: list[Sink] = list(sinks)
        self._builders: list[Callable[[Any, Any], dict[str, Any] | None]] = []
        # read at construction (not bound at import), so a test can shrink it
        self._dropq = q = DropQueue(max(1, int(QUEUE_MAX if queue_max is None else queue_max)))
        self._queue, self._cap = q.items, q.cap
        self.put: Callable[[Any], None] = q.put  # the training thread's only cost
        self._held: deque[Any] = deque()
        self._held_since: float | None = None
        self._heartbeat = heartbeat
        self._heartbeat_every = heartbeat_every
        self._last_beat = time.monotonic()
        self._wake_every = wake_every
        self._wake = Wake()  # set from signal handlers too: see wake.py
        self._stop = False
        self._lock = threading.Lock()  # one drain at a time (thread, or a caller when it is dead)
        self._flush_reqs: deque[tuple[Wake, bool, float]] = deque()
        self._stop_by: float | None = None  # close()'s deadline for the last drain
        self._thread: threading.Thread | None = None
        self._gone = False  # the thread has served its last flush request (_run, flush)
        self.warnings: list[str] = []  # what was reported, for tests and close()
        self.records_written = 0
        self._build_errors = 0
        self.readbacks_lost = 0  # device read-backs given up by forced drains
        _WRITERS.add(self)

    def _disown(self) -> None:
        """In a forked child: forget the sinks (without closing the parent's files) and the queue."""
        self.sinks = []
        self._dropq.clear()
        self._held.clear()
        self._flush_reqs.clear()
        self._thread = None
        self._lock = threading.Lock()  # the parent's thread may have held it at the fork
        self._stop = True

    def register(self, builder: Callable[[Any, Any], dict[str, Any] | None]) -> int:
        """The index to put first in a queued tuple that ``builder(item, force)`` builds."""
        self._builders.append(builder)
        return len(self._builders) - 1

    @property
    def dropped(self) -> int:
        """Records the full queue had no room for (the training outran us): ``dropqueue.py``."""
        return self._dropq.dropped

    # --- any thread -----------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="dltop-writer", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Write what is queued now rather than at the next tick (events)."""
        self._wake.set()

    def emit(self, record: dict[str, Any]) -> None:
        """Queue a finished record and write it at once."""
        self._queue.append(record)
        self._wake.set()

    def flush(self, fsync: bool = False, timeout: float = 5.0) -> bool:
        """Block until everything queued so far is written (and fsynced if asked).

        Device read-backs still in flight are forced (waited for, boundedly).
        Returns False on timeout. Safe from a signal handler on the main thread, even
        one that lands inside another flush or emit: it only waits on the writer
        thread (which never waits on a lock the caller can hold, ``wake.py``), or
        drains itself when that is gone.
        """
        by = _waits_until(timeout)
        t = self._thread
        if t is None or not t.is_alive() or t is threading.current_thread():
            return self._drain_locked(force=Deadline(at=by), fsync=fsync, timeout=timeout)
        done = Wake()  # set by the writer thread, which must never wait on us: wake.py
        self._flush_reqs.append((done, fsync, by))
        self._wake.set()
        if self._gone:
            # the thread stopped after we looked (a close() in between: a signal handler's
            # on this thread, or another thread's): nobody will serve the request, and
            # waiting for it stalled the training the whole timeout
            return self._drain_locked(force=Deadline(at=by), fsync=fsync, timeout=timeout)
        return done.wait(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Write everything, fsync, close the sinks. Idempotent."""
        self._stop_by = _waits_until(timeout)
        self._stop = True
        self._wake.set()
        t = self._thread
        if t is not None and t.is_alive() and t is not threading.current_thread():
            t.join(timeout)
            self._wait_while_writing(t)
        if t is None or not t.is_alive():
            self._drain_locked(force=Deadline(at=self._stop_by), fsync=True, timeout=timeout)
        for sink in self.sinks:
            with contextlib.suppress(Exception):
                sink.close()
        self.sinks = []

    def _wait_while_writing(self, t: threading.Thread) -> None:
        """At close, a backlog (a loop that outran the encoder) still being written: wait
        for it as long as lines keep reaching the log, saying so once; closing the sinks
        under the writer lost the backlog and the exit record without a word. A writer
        that stopped making progress is given up on, and what it held is counted."""
        said = False
        while t.is_alive():
            before = self.records_written
            if not said:
                said = True
                say(f"dltop: writing the log's last {self.backlog()} record(s)...")
            t.join(CLOSE_PROGRESS_S)
            if t.is_alive() and self.records_written == before:
                warn(self, f"the log writer is stuck: {self.backlog()} record(s) not written")
                return

    def backlog(self) -> int:
        """Records queued or held, not yet written (approximate while the writer runs)."""
        return len(self._queue) + len(self._held)

    # --- the writer thread ------------------------------------------------------------
    def _run(self) -> None:
        while True:
            self._wake.wait(self._wake_every)
            stop = self._stop
            reqs = []
            while self._flush_reqs:
                reqs.append(self._flush_reqs.popleft())
            force: Deadline | None = None
            if stop or reqs:  # the earliest caller's deadline bounds the waits of this drain
                bys = [by for _, _, by in reqs]
                if stop and self._stop_by is not None:
                    bys.append(self._stop_by)
                force = Deadline(at=min(bys)) if bys else Deadline()
            fsync = stop or any(f for _, f, _ in reqs)
            try:
                with self._lock:
                    self._drain(force=force, fsync=fsync)
            except Exception as e:  # a bug here must not kill the thread and with it the log
                warn(self, f"writer error: {e!r}")
            for done, _, _ in reqs:
                done.set()
            if stop:
                # last: say we are gone, then serve what came during the final drain (its
                # records are written). A request after this is served by its caller
                self._gone = True
                while self._flush_reqs:
                    self._flush_reqs.popleft()[0].set()
                return

    def _drain_locked(self, force: Deadline, fsync: bool, timeout: float) -> bool:
        if not self._lock.acquire(timeout=timeout):
            return False
        try:
            self._drain(force=force, fsync=fsync)
            return True
        except Exception as e:
            warn(self, f"writer error: {e!r}")
            return False
        finally:
            self._lock.release()

    def _drain(self, force: Deadline | None, fsync: bool) -> None:
        lines: list[bytes] = []
        held, queue = self._held, self._queue
        now = time.monotonic()
        if held and self._held_since is not None and now - self._held_since > HOLD_MAX_S:
            force = force or Deadline()
        lost_at = -1  # index in lines of the first record written without its device values
        size = 0  # bytes in lines
        if not self.sinks:  # nowhere left to write: do not build lines nobody will read
            held.clear()
            queue.clear()
            return
        cap = self._cap
        while queue and len(held) < cap:  # a stuck read-back holds the rest in the queue
            held.append(queue.popleft())
        while held:
            item = held[0]
            if type(item) is dict:
                rec: dict[str, Any] | None = item
            elif type(item) is Gap:
                rec = self._dropq.gap_event(item, self._said_dropped)
            else:
                missed = force.missed if force is not None else 0
                try:
                    rec = self._builders[item[0]](item, force)
                except Exception as e:
                    self._build_errors += 1
                    if self._build_errors == 1:
                        warn(self, f"could not build a record: {e!r}")
                    held.popleft()
                    continue
                if rec is None:  # a read-back still in flight: keep the order, wait
                    if self._held_since is None:
                        self._held_since = now
                    break
                if lost_at < 0 and force is not None and force.missed > missed:
                    lost_at = len(lines)
            held.popleft()
            self._held_since = None
            if rec is None:  # a gap or a dict is never None; a builder said "ready"
                continue
            try:
                lines.append(encode_record(rec))
            except Exception as e:
                self._build_errors += 1
                if self._build_errors == 1:
                    warn(self, f"could not encode a {rec.get('kind')!r} record: {e!r}")
                continue
            size += len(lines[-1])
            if size >= WRITE_CHUNK and lost_at < 0:  # a backlog reaches the log as it goes
                write_batch(self, b"".join(lines))
                self.records_written += len(lines)
                lines, size = [], 0
        if not held:
            self._held_since = None
        if force is not None and force.missed:
            self._note_lost(lines, lost_at, force.missed)
        beat_due = now - self._last_beat >= self._heartbeat_every
        if self._heartbeat is not None and beat_due and not self._stop:  # exit is the last line
            self._last_beat = now
            with contextlib.suppress(Exception):
                lines.append(encode_record(self._heartbeat()))
        if lines:
            write_batch(self, b"".join(lines))
            self.records_written += len(lines)
        if fsync:
            fsync_sinks(self)

    def _said_dropped(self, message: str) -> None:
        """The first ``dropped`` event's message, once on stderr too."""
        self.warnings.append(message)
        say(f"dltop: warning: {message}; the log marks each gap with a 'dropped' event")

    def _note_lost(self, lines: list[bytes], at: int, n: int) -> None:
        """A ``warning`` event right after the first record that lost its device values."""
        self.readbacks_lost += n
        message = (
            f"{n} device read-back(s) still in flight at a forced flush (GPU busy or hung); "
            "their records were written without their device values (loss, grad_norm...)"
        )
        if self.readbacks_lost == n:  # the first time: once on stderr too
            self.warnings.append(message)
            say(f"dltop: warning: {message}")
        rec = {"kind": EVENT, "type": EV_WARNING, "t": time.time(), "message": message}
        with contextlib.suppress(Exception):
            lines.insert(
                min(max(at, 0) + 1, len(lines)), encode_record(rec | {"readbacks_lost": n})
            )
