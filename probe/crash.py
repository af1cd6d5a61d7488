"""Crash capture: how a run ended, written down before the process is gone.

Three ways a run dies without a clean close: an exception leaving the ``with`` block
(the probe calls :meth:`CrashRecorder.record`), an exception nobody catches
(``sys.excepthook``), and a signal (SIGTERM from a scheduler, SIGINT from Ctrl-C,
SIGHUP when the terminal or ssh session that started the run goes away).
Each becomes one ``event`` record, flushed and fsynced, and then the original
behaviour continues exactly as it would have without the probe: the exception is
re-raised by the caller, the previous hook and handlers run, and a signal whose
action was the default is re-delivered so the process dies by it (exit status
``-SIGTERM``, which schedulers and shells rely on). Such a death runs no ``close``:
the run's live socket and its rendezvous entry are removed first, so that ``dltop``
and ``dltop ls`` do not offer a run that is gone. An uncaught exception removes them
too (the process is about to end; viewers already connected keep their stream until
it does), except in an interactive session, which lives on.

This code runs at the worst moment, right after an out-of-memory error or inside a
signal handler, so it allocates little, imports nothing heavy (torch is only ever
read from ``sys.modules``) and guards every step: recording a crash must never
cause one.
"""

from __future__ import annotations

import contextlib
import linecache
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Any

from . import rendezvous
from .memory import CPU_OOM, CUDA_OOM, memory_state
from .schema import EV_EXCEPTION, EV_OOM, EV_SIGNAL, EVENT

MESSAGE_CHARS = 4096  # characters of the exception message kept
TRACEBACK_FRAMES = 30  # innermost frames kept
TRACEBACK_CHARS = 8192  # budget for all kept frames together
_CODE_CHARS = 200  # per source line
_PATH_CHARS = 300  # per file name

# the signals that end a run from outside and are recorded before the run dies by them:
# a scheduler's or a kill's SIGTERM, Ctrl-C, and SIGHUP, which a training started from a
# terminal or an ssh session gets when that goes away (unrecorded, such a run looked like
# SIGKILL: "check dmesg"). Those a platform lacks (Windows: SIGHUP) are left out
RECORDED_SIGNALS: tuple[signal.Signals, ...] = tuple(
    s for s in (getattr(signal, n, None) for n in ("SIGTERM", "SIGINT", "SIGHUP")) if s is not None
)
_RECORDED = "__dltop_recorded__"


class CrashRecorder:
    """Records crashes through ``emit`` (the probe's queue) and ``flush(True)`` (write and
    fsync now, synchronously); ``last_step`` says which step the run had reached, asked
    after a ``flush(False)``."""

    def __init__(
        self,
        emit: Callable[[dict[str, Any]], None],
        flush: Callable[[bool], None],
        last_step: Callable[[], int | None],
    ) -> None:
        self._emit = emit
        self._flush = flush
        self._last_step = last_step
        self._seen: deque[int] = deque(maxlen=16)  # ids, for exceptions without a __dict__
        self._active = False  # recording on; the hooks pass through when off
        self._prev_hook: Any = None
        self._hook = self._excepthook  # one bound object, so identity checks work
        self._prev_handlers: dict[int, Any] = {}
        self._handler = self._on_signal
        self._handling: int | None = None  # the signal whose handler is running

    # -- hooks ------------------------------------------------------------------------

    def install(self) -> None:
        """Chain ``sys.excepthook``; on the main thread, also SIGTERM, SIGINT and SIGHUP.

        A signal that is ignored (``SIG_IGN``, e.g. SIGINT of a background job, SIGHUP
        under ``nohup``) or whose handler was set outside Python is left alone: the probe
        must not change what it does.
        """
        if self._active:
            return
        self._active = True
        try:
            if sys.excepthook is not self._hook:
                self._prev_hook = sys.excepthook
                sys.excepthook = self._hook
        except Exception:
            pass
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        for sig in RECORDED_SIGNALS:
            try:
                prev = signal.getsignal(sig)
                if prev is self._handler or prev is None or prev == signal.SIG_IGN:
                    continue
                self._prev_handlers[sig] = prev
                signal.signal(sig, self._handler)
            except Exception:
                pass

    def uninstall(self) -> None:
        """Put back what ``install`` changed, where nobody has replaced it since.

        Where someone chained onto our hook or handler, ours stays in their chain but
        only passes through to what was there before us (the previous ones are kept).
        """
        self._active = False
        try:
            if sys.excepthook is self._hook:
                sys.excepthook = self._prev_hook
        except Exception:
            pass
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, prev in self._prev_handlers.items():
            try:
                if signal.getsignal(sig) is self._handler:
                    signal.signal(sig, prev)
            except Exception:
                pass

    def _excepthook(
        self, exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
    ) -> None:
        if self._active:
            self.record(exc)
            if not _interactive():
                _forget_live_entries()
        prev = self._prev_hook or sys.__excepthook__
        prev(exc_type, exc, tb)

    def _on_signal(self, signum: int, frame: Any) -> Any:
        if self._handling == signum:
            # the same signal again while this one is being recorded (a parent-death
            # SIGTERM and a process-group SIGTERM arrive together): Python runs the
            # handler nested, and the outer call still goes on to the default action
            return None
        self._handling = signum
        # SIGCHLD's handler put aside while we record: a DataLoader's raises RuntimeError
        # ("worker exited unexpectedly") into whatever Python code runs when its workers die
        # of the same process-group SIGTERM; inside our write that lost the record, and
        # between the write and the clean-up it left the run's live entry behind
        held = _HeldSigchld()
        try:
            if self._active:
                try:
                    name = signal.Signals(signum).name
                except Exception:
                    name = str(signum)
                event = {"kind": EVENT, "t": time.time(), "step": self._step(), "type": EV_SIGNAL}
                self._write(event | {"signal": name})
            prev = self._prev_handlers.get(signum, signal.SIG_DFL)
            if callable(prev):  # the user's handler, or SIGINT's default_int_handler
                try:
                    held.release()
                except BaseException:  # the held SIGCHLD's handler raised (a DataLoader
                    prev(signum, frame)  # worker died): the user's handler still runs
                    raise
                return prev(signum, frame)
            if prev == signal.SIG_DFL:  # die by the signal, exactly as without the probe
                _forget_live_entries()  # no close will run: leave no socket of a dead run
                signal.signal(signum, signal.SIG_DFL)
                signal.raise_signal(signum)
            return None
        finally:
            self._handling = None
            held.release()

    # -- records ----------------------------------------------------------------------

    def record(self, exc: BaseException) -> None:
        """Record ``exc`` once (the ``with`` exit and the excepthook may both see it)."""
        try:
            if self._already(exc):
                return
            self._write(self.describe(exc))
        except Exception:
            pass

    def describe(self, exc: BaseException) -> dict[str, Any]:
        """The ``event`` record for ``exc``: type, message, bounded traceback, memory state."""
        message = _message(exc)
        kind = EV_OOM if is_oom(exc, message) else EV_EXCEPTION
        rec: dict[str, Any] = {
            "kind": EVENT,
            "t": time.time(),
            "step": self._step(),
            "type": kind,
            "exc_type": qualified_name(type(exc)),
            "message": _bounded(message, MESSAGE_CHARS),
        }
        if isinstance(exc, KeyboardInterrupt):
            rec["interrupted"] = True
        elif isinstance(exc, SystemExit):
            code = exc.code
            rec["exit_code"] = code if code is None or isinstance(code, int) else str(code)[:200]
        try:
            frames, omitted = traceback_frames(exc.__traceback__)
            rec["traceback"] = frames
            if omitted:
                rec["traceback_omitted"] = omitted
        except Exception:
            pass
        cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
        if cause is not None:
            with contextlib.suppress(Exception):
                rec["cause"] = {
                    "exc_type": qualified_name(type(cause)),
                    "message": _bounded(_message(cause), 1024),
                }
        if kind == EV_OOM:
            with contextlib.suppress(Exception):
                rec["memory"] = memory_state(exc, message)
        return rec

    def _already(self, exc: BaseException) -> bool:
        try:
            if getattr(exc, _RECORDED, False):
                return True
            setattr(exc, _RECORDED, True)
            return False
        except Exception:  # no __dict__: fall back to identity of the last few
            if id(exc) in self._seen:
                return True
            self._seen.append(id(exc))
            return False

    def _step(self) -> int | None:
        """The step the record names, asked once what is queued is written (no fsync: the
        record's own flush does that): the probe names the step whose record then precedes
        the event in the log (``StartStop._crash_step``), which it can only say of records
        already built."""
        with contextlib.suppress(Exception):
            self._flush(False)
        try:
            return self._last_step()
        except Exception:
            return None

    def _write(self, rec: dict[str, Any]) -> None:
        with contextlib.suppress(Exception):
            self._emit(rec)
        with contextlib.suppress(Exception):
            self._flush(True)


class _HeldSigchld:
    """A Python-level SIGCHLD handler (a DataLoader's) put aside while a signal is recorded.

    Blocking SIGCHLD with ``pthread_sigmask`` is not enough: the kernel then delivers it
    to another thread (the writer's), and Python still runs the handler on the main thread
    at the next bytecode, inside our handler. So the handler itself is swapped for one that
    only notes the signal; ``release`` restores it and runs it once if it was missed.
    """

    def __init__(self) -> None:
        self.old: Any = None
        self.missed: tuple[int, Any] | None = None
        try:
            old = signal.getsignal(signal.SIGCHLD)
            if callable(old):
                signal.signal(signal.SIGCHLD, self._note)
                self.old = old
        except (AttributeError, ValueError, OSError):  # no SIGCHLD, or not the main thread
            pass

    def _note(self, signum: int, frame: Any) -> None:
        self.missed = (signum, frame)

    def release(self) -> None:
        old, self.old = self.old, None
        if old is None:
            return
        with contextlib.suppress(AttributeError, ValueError, OSError):
            signal.signal(signal.SIGCHLD, old)
        if self.missed is not None:
            missed, self.missed = self.missed, None
            old(*missed)  # the DataLoader's check, as it would have run: it may raise


def _forget_live_entries() -> None:
    with contextlib.suppress(Exception):
        rendezvous.remove_own()


def _interactive() -> bool:
    """A REPL (``python -i``, IPython...): an uncaught exception does not end the process."""
    return bool(getattr(sys.flags, "interactive", 0)) or hasattr(sys, "ps1")


# -- pieces, usable on their own ----------------------------------------------------


def qualified_name(cls: type) -> str:
    """``torch.OutOfMemoryError``, ``ValueError`` (builtins unqualified), ``mod.Outer.Inner``."""
    module = getattr(cls, "__module__", None) or ""
    name = str(getattr(cls, "__qualname__", None) or getattr(cls, "__name__", "?"))
    return name if module in ("builtins", "__main__", "") else f"{module}.{name}"


def is_oom(exc: BaseException, message: str | None = None) -> bool:
    """torch's OutOfMemoryError (by class name through the MRO, without importing torch),
    the CPU allocator's RuntimeError, or Python's MemoryError."""
    if isinstance(exc, MemoryError):
        return True
    for cls in type(exc).__mro__:
        if cls.__name__ == "OutOfMemoryError" and (cls.__module__ or "").startswith("torch"):
            return True
    if isinstance(exc, RuntimeError):
        text = _message(exc) if message is None else message
        return CPU_OOM in text or CUDA_OOM in text
    return False


def traceback_frames(tb: TracebackType | None) -> tuple[list[dict[str, Any]], int]:
    """The innermost frames as ``{"file", "line", "func", "code"}``, within the size budget,
    and how many outer frames were left out.

    An exception caught at the ``with`` exit has not yet unwound through the callers of
    the ``with`` block; their frames, still live, are put in front so that the record
    shows the stack Python prints when the exception ends the program.
    """
    kept: deque[tuple[Any, int]] = deque(maxlen=TRACEBACK_FRAMES)
    total = 0
    callers = []
    frame = tb.tb_frame.f_back if tb is not None else None
    while frame is not None:
        callers.append((frame.f_code, frame.f_lineno))
        frame = frame.f_back
    for entry in reversed(callers):
        kept.append(entry)
        total += 1
    while tb is not None:
        kept.append((tb.tb_frame.f_code, tb.tb_lineno))
        total += 1
        tb = tb.tb_next
    frames: list[dict[str, Any]] = []
    used = 0
    for code, line in reversed(kept):  # innermost first while budgeting, the end matters most
        filename = code.co_filename
        src = ""
        with contextlib.suppress(Exception):
            src = linecache.getline(filename, line).strip()
        info = {
            "file": _bounded(filename, _PATH_CHARS, keep_end=True),
            "line": line,
            "func": _bounded(code.co_name, _CODE_CHARS),
            "code": _bounded(src, _CODE_CHARS),
        }
        size = len(info["file"]) + len(info["func"]) + len(info["code"]) + 40
        if frames and used + size > TRACEBACK_CHARS:
            break
        used += size
        frames.append(info)
    frames.reverse()  # outermost first, like Python prints it
    return frames, total - len(frames)


def _message(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        try:
            return repr(exc)
        except Exception:
            return "<unprintable exception>"


def _bounded(text: str, limit: int, keep_end: bool = False) -> str:
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    if keep_end:
        return f"…{text[cut + 1 :]}"
    return f"{text[: limit - 24]}… [{cut + 24} chars cut]"
