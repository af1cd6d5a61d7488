"""A framework's training call that ended without saying so: noticed, and recorded.

Why: a ``TrainerCallback`` is told when training begins and ends, but not when it ends
by an exception. An exception raised outside the methods the adapter wraps (another
callback, the optimizer's step, the scheduler, a data collator) leaves ``Trainer.train``
without ``on_train_end``; when the caller catches it (a sweep loop, a notebook cell) the
process goes on, the probe stays open writing heartbeats, and at the interpreter's exit
it closes "ok": the log says the run finished while it crashed.

So while training runs, a daemon thread looks once a second at the training thread's
stack (``sys._current_frames``: read-only, no tracing, nothing on the training thread):
when the frame of the training call is gone and the framework has not said the training
ended, the call was left by an exception. The adapter then closes its session with exit
status ``exception`` and a note saying what is known; the rules call it a crash ("the
run crashed: its exception is not in the log").
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from types import CodeType, FrameType

EVERY_S = 1.0  # how often the training thread's stack is looked at


def frame_of(code_name: str, owner: object, start: FrameType | None) -> FrameType | None:
    """The frame up the stack from ``start`` running ``owner.<code_name>``."""
    frame = start
    while frame is not None:
        if frame.f_code.co_name == code_name and frame.f_locals.get("self") is owner:
            return frame
        frame = frame.f_back
    return None


class TrainWatch:
    """Calls ``left()`` once, on its own thread, when ``code`` is no longer on the stack
    of thread ``ident`` and ``stop()`` has not been called (the framework's own end)."""

    def __init__(self, ident: int, code: CodeType, left: Callable[[], None]) -> None:
        self._ident = ident
        self._code = code
        self._left = left
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dltop-trainwatch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """The training ended as the framework says it should: nothing to notice."""
        self._stop.set()

    def _running(self) -> bool:
        frame: FrameType | None = sys._current_frames().get(self._ident)
        while frame is not None:
            if frame.f_code is self._code:
                return True
            frame = frame.f_back
        return False

    def _run(self) -> None:
        while not self._stop.wait(EVERY_S):
            try:
                running = self._running()
            except Exception:  # a stack we cannot read: never a false alarm
                continue
            if not running and not self._stop.is_set():
                self._stop.set()
                try:
                    self._left()
                except Exception:
                    pass
                return
