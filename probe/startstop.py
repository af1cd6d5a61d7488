"""``Probe.start()``, ``close()`` and the ``with`` block: the order a run's parts open and close in.

Mixed into ``Probe`` (``probe.py``), whose per-step code stays apart from it: none of this
runs per step, and all of it is about order. The writer exists before anything can emit,
the hooks and the config learnt at start are in place before its thread starts, the crash
hooks come last; at close the parts stop in reverse, a config change not written yet and
the sinks' closing notes go before the ``exit`` event, the last line. How the run ended
is decided here too: the exception leaving the ``with`` block, or a signal or crash event
seen on its way to the writer, or the interpreter's exit. What each part does when it
cannot start is ``lifecycle.py``'s.
"""

from __future__ import annotations

import atexit
import contextlib
from time import perf_counter
from typing import TYPE_CHECKING, Any, Literal, Self

from .lifecycle import (
    attach_notes,
    closing_notes,
    exit_record,
    exit_status,
    hook_gradients,
    hook_loop,
    install_crash,
    open_live,
    open_log,
    start_sampler,
)
from .records import build_layers, build_lazy
from .runsetup import learn_start
from .schema import EV_EXCEPTION, EV_OOM, EV_SIGNAL, EVENT
from .whereabouts import OUTSIDE_LOOP
from .writer import Writer

if TYPE_CHECKING:
    from collections.abc import Callable

    from .crash import CrashRecorder
    from .filesink import Sink
    from .gradnorm import GradNormTracker
    from .loophooks import LoopHooks
    from .records import StepRecords
    from .runconfig import RunConfig
    from .system import SystemSampler
    from .whereabouts import Whereabouts

# how long start() waits for the writer thread to put ``meta`` on disk: a slow disk
# costs the training at most this, once
META_WAIT_S = 1.0
# a Probe records one run: after close(), steps and a new `with` block record nothing
CLOSED = "this Probe is closed and records nothing more: make a new Probe for another run"


class StartStop:
    """Mixed into ``Probe``: ``start()``, ``close()``, ``with``, and how the run ended."""

    # what Probe sets in its __init__
    path: str | None
    run_id: str
    socket: bool
    tcp: str | None
    model: Any
    optimizer: Any
    scaler: Any
    clip_norm: float | None
    layers_every: int
    heartbeat_every: float
    _extra_sinks: list[Sink]
    _use_system: bool
    _system_interval: float
    _use_crash: bool
    _last_step: int | None
    _steps: int
    _prev_end: float
    _grad: GradNormTracker | None
    _records: StepRecords
    _where: Whereabouts
    _config: RunConfig
    _watched_optimizer: Any
    _loop: LoopHooks | None
    _step_builder: int
    _layers_builder: int
    _lazy_builder: int
    _signal: str | None
    _crashed: bool
    _writer: Writer | None
    _put: Callable[[Any], None] | None
    _sampler: SystemSampler | None
    _crash: CrashRecorder | None
    _started: bool
    _closed: bool
    _starting: bool
    _close_pending: str | None
    _close_status: str
    _exit_queued: bool
    _down: bool
    _depth: int

    if TYPE_CHECKING:  # what Probe provides

        def _heartbeat(self) -> dict[str, Any]: ...

        def _on_amp(self, dtype: str | None) -> None: ...

        def _learn(self, name: str, value: Any) -> None: ...

        def _error(self, where: str, err: BaseException) -> None: ...

        def flush(self, fsync: bool = False, timeout: float = 5.0) -> bool: ...

    def _lifecycle_state(self) -> None:
        """Where start() and close() are: what Probe's ``__init__`` sets."""
        self._started = False
        self._closed = False
        self._starting = False  # inside start(): a close() now waits for it
        self._close_pending = None  # the status of a close() start() owes
        self._close_status = "ok"  # what close() was asked to write (an exit hook finishes it)
        self._exit_queued = False  # the exit record is with the writer
        self._down = False  # close() stopped every part but the writer

    def start(self) -> Self:
        """Open the sinks, write ``meta``, start the writer (and sampler) threads, hook backward."""
        if self._started:
            if self._closed:  # `with probe:` again, after the first block closed it
                self._error("start", RuntimeError(CLOSED))
            return self
        self._starting = True  # first: a close() landing between the two waits for start()
        self._started = True
        try:
            self._open()
        except BaseException as exc:
            # a signal handler's exception inside start() (Ctrl-C, a SIGTERM handler's
            # sys.exit): the ``with`` block never opened, so its ``__exit__`` will not end
            # the log; end it here, as that would have
            self._starting = False
            self._close_pending = None
            self.close(exit_status(exc, self._signal)[0])
            raise
        finally:
            # a close() that came while we were starting (a signal handler on this thread,
            # whose user code calls ``probe.close()``): run now, over every part started
            self._starting = False
            pending, self._close_pending = self._close_pending, None
            if pending is not None:
                self.close(pending)
        return self

    def _open(self) -> None:
        sinks, meta = open_log(self.path, self.run_id, self._error)
        try:
            sinks.extend(self._extra_sinks)
            self._writer = w = Writer(
                sinks, heartbeat=self._heartbeat, heartbeat_every=self.heartbeat_every
            )
        except BaseException:  # no writer to close the sinks (a signal handler's exception)
            for sink in sinks:
                with contextlib.suppress(Exception):
                    sink.close()
            raise
        if meta is not None:  # first, so that a log ended early still says what ran
            w.emit(meta)
        live = open_live(self.run_id, meta, self.socket, self.tcp)
        if live is not None:  # the writer's thread has not started: no one reads the list
            w.sinks.append(live)
        attach_notes(w.sinks, w.emit)
        self._put = w.put
        self._step_builder = w.register(self._records.build)
        self._layers_builder = w.register(build_layers)
        self._lazy_builder = w.register(build_lazy)
        self._grad = hook_gradients(
            self.model, self.optimizer, self.scaler, self.layers_every > 0, self._error
        )
        if self._grad is not None:
            self._grad.where = self._where
        self._loop = hook_loop(
            self.model, self._watched_optimizer, self._where, self._on_amp, self._error
        )
        learn_start(self)
        self._where.move(OUTSIDE_LOOP)
        # the signal handlers before the writer thread: once ``meta`` is in the log, a
        # SIGTERM (a scheduler's, a dead parent's PDEATHSIG) is recorded. Started after
        # them, the writer left a window in which the log had its meta and the default
        # action ended the process without a word (a test found it; race-free now: a
        # signal before the writer runs is written by the handler's own flush)
        if self._use_crash:
            self._crash = install_crash(self._emit, self._flush, self._crash_step, self._error)
        if self._use_system:
            self._sampler = start_sampler(self._emit, self._system_interval, self._error)
        w.start()
        atexit.register(self._at_exit)  # before the wait: a Ctrl-C in it still closes the log
        # ``meta`` on disk before start() returns: a run killed (SIGKILL, the OOM killer)
        # right after start() otherwise left an empty log 6 times in 20. A signal during
        # this wait is safe: its handler's own emit and flush cannot block on us (wake.py)
        w.flush(timeout=META_WAIT_S)
        self._prev_end = perf_counter()

    def close(self, status: str = "ok") -> None:
        """Write the ``exit`` event, stop the threads, fsync and close the log. Idempotent."""
        if self._closed:
            return
        if self._starting:
            # called inside start() (a signal handler's user code, between two of start's
            # bytecodes): closing now stopped the parts started so far, and start() then
            # went on to install the rest on a closed Probe: its signal handlers stayed in
            # place for good, recording later signals into the closed log, and its writer
            # thread ran on. start() closes, with this status, once it is done
            self._close_pending = status
            return
        if not self._started:
            return
        # A signal handler's exception (a second Ctrl-C, a SIGTERM handler's sys.exit) can
        # land anywhere in here: it cut close() short before the exit record, and the log
        # of a run that finished read as killed. Once closing has begun the log is ended
        # whatever happens; where the exception lands between two statements of that, the
        # interpreter's exit hook, unregistered only once the log has ended, finishes it.
        try:
            self._closed = True
            self._close_status = status
            self._take_down()
        finally:
            if self._closed:
                self._finish_close(status)

    def _finish_close(self, status: str) -> None:
        """What a close() cut short still owes: the parts it did not stop (each step is
        idempotent), then the end of the log."""
        try:
            if not self._down:
                self._take_down()
        finally:
            self._end_log(status)

    def _take_down(self) -> None:
        """Stop every part but the writer: handlers, sampler, hooks; steps are ignored.
        Each one even when an exception (a signal handler's) cut an earlier one short:
        a sampler left running in a process that goes on writes to a closed log."""
        try:
            if self._crash is not None:
                with contextlib.suppress(Exception):
                    self._crash.uninstall()
        finally:
            try:
                if self._sampler is not None:
                    with contextlib.suppress(Exception):
                        self._sampler.stop()
            finally:
                try:
                    if self._grad is not None:
                        with contextlib.suppress(Exception):
                            self._grad.remove()
                    if self._loop is not None:
                        with contextlib.suppress(Exception):
                            self._loop.remove()
                finally:
                    self._put = None  # steps after close are ignored
                    self._where.move(OUTSIDE_LOOP)
        self._down = True  # only when no step was cut short (the ones after it did run)

    def _end_log(self, status: str) -> None:
        """A config change not written yet, the sinks' notes, the ``exit`` record; then the
        writer closed (everything written and fsynced). Each later part runs even when an
        exception cuts an earlier one short, and is then raised."""
        w = self._writer
        if w is not None:
            self._end_writer(w, status)
        with contextlib.suppress(Exception):  # the log has ended: nothing left for the hook
            atexit.unregister(self._at_exit)

    def _end_writer(self, w: Writer, status: str) -> None:
        rec = None
        try:
            if self._exit_queued:  # the exit hook finishing a close cut short
                return
            rec = exit_record(status, self._last_step, self._steps, w.dropped)
            with contextlib.suppress(Exception):  # a change not written yet: before the exit
                config = self._config.take(None, self._last_step)
                if config is not None:
                    w.emit(config)
            closing_notes(w.sinks, w.emit)  # the live socket's counts not yet on record
        finally:
            try:
                self._queue_exit(w, rec, status)
            finally:
                # cut short around the emit: once more, before the writer closes for good
                # (a second exit record beats none)
                self._queue_exit(w, rec, status)
                try:
                    w.close()
                except BaseException:
                    # cut short while it waited for the writer thread: one more bounded
                    # wait, so that the exit record queued above is on disk before we go on
                    # (a daemon thread does not outlive the interpreter's exit)
                    w.close(timeout=1.0)
                    raise

    def _queue_exit(self, w: Writer, rec: dict[str, Any] | None, status: str) -> None:
        if not self._exit_queued:
            w.emit(rec or exit_record(status, self._last_step, self._steps, w.dropped))
            self._exit_queued = True

    def __enter__(self) -> Self:
        self._depth += 1
        return self.start()

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        self._depth -= 1
        if self._depth > 0:  # a nested `with probe:` (a helper's): the outer block closes
            return False  # an exception goes on to the outer block, which records it
        status, on_record = exit_status(exc, self._signal)
        if on_record and exc is not None and self._crash is not None:
            with contextlib.suppress(Exception):
                self._crash.record(exc)
        self.close(status)
        return False  # the exception, if any, goes on unchanged

    def _at_exit(self) -> None:
        # no start() runs at the interpreter's exit: one that an exception left between
        # its last statements must not make this close wait for it
        self._starting = False
        if self._closed:  # a close() an exception cut short between two of its statements
            with contextlib.suppress(Exception):
                self._finish_close(self._close_status)
            return
        self.close("signal" if self._signal else "exception" if self._crashed else "ok")

    def _emit(self, record: dict[str, Any]) -> None:
        """Queue a record from any thread; events are written at once."""
        w = self._writer
        if w is None:
            return
        if record.get("kind") == EVENT:
            kind = record.get("type")
            if kind == EV_SIGNAL:
                self._signal = str(record.get("signal"))
            elif kind in (EV_EXCEPTION, EV_OOM):
                self._crashed = True
            w.emit(record)
        else:
            w.put(record)

    def _crash_step(self) -> int | None:
        """The step a crash record names, read once the queue is written (``crash.py``
        flushes first): the newest step record in the log when every step so far was
        built, so a signal taken inside ``put``, after the append and before
        ``_last_step`` is set, still names the step whose record precedes the event in
        the log (and becomes the step reached, for the ``exit`` record after it).
        Otherwise (a step dropped by a full queue, or failed, or a signal taken before
        the append) the step reached, ``_last_step``."""
        built = self._records
        if built.built == self._steps:
            # the step reached, as the log shows it: the ``exit`` record and heartbeats
            # after this name it too (step() may not have noted it yet)
            self._last_step = built.newest
            return built.newest
        return self._last_step

    def _flush(self, fsync: bool) -> None:
        """The crash path's flush: bounded, and read-backs stuck on a hung device are given
        up within the same bound (see ``Writer.flush``), so the event gets written."""
        self.flush(fsync, timeout=3.0)
