"""What ``Probe.start()`` opens and how a run's end is put on record, apart from the class.

Why: each part the probe starts (the log file, the live socket, the system sampler,
the crash hooks, the backward, forward and optimizer hooks) can fail on its own, and its failure must cost only that part: a log
that cannot be opened still leaves the socket, a socket that cannot be bound still
leaves the log, and neither stops the training. Here each part is one function that
says what it could not do and returns what it could.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .filesink import FileSink, Sink
from .gradnorm import GradNormTracker, trainable_params
from .schema import EV_EXIT, EV_WARNING, EVENT
from .whereabouts import Whereabouts

if TYPE_CHECKING:
    from .crash import CrashRecorder
    from .loophooks import LoopHooks, OnAmp
    from .system import SystemSampler
    from .writer import Writer

OnError = Callable[[str, BaseException], None]
Emit = Callable[[dict[str, Any]], None]


def open_log(
    path: str | None, run_id: str, on_error: OnError
) -> tuple[list[Sink], dict[str, Any] | None]:
    """The log file, when it can be opened, and the ``meta`` record (``None`` when it
    could not be built: the probe's error, reported once). The live socket opens apart
    (``open_live``), once the writer exists: it takes most of ``start()``'s time, and a
    signal handler's exception in it then still leaves a log with ``meta`` and ``exit``."""
    sinks: list[Sink] = []
    if path is not None:
        try:
            sinks.append(FileSink(path))
        except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
            sys.stderr.write(
                f"dltop: warning: cannot open {path} ({e}); the training goes on without a log\n"
            )
    meta: dict[str, Any] | None = None
    try:
        from .meta import build_meta  # noqa: PLC0415 - only once started

        meta = build_meta(run_id, path)
    except Exception as e:
        on_error("meta", e)
    return sinks, meta


def open_live(run_id: str, meta: dict[str, Any] | None, unix: bool, tcp: str | None) -> Sink | None:
    """The live socket, when asked for and it can be served."""
    if not (unix or tcp):
        return None
    try:
        from .live import LiveSink  # noqa: PLC0415 - sockets only when asked

        key = f"{run_id}.{os.getpid()}"
        return LiveSink(key, meta or {}, tcp=tcp, unix=unix)
    except Exception as e:
        sys.stderr.write(
            f"dltop: warning: no live socket for this run ({e}); the log file still works\n"
        )
        return None


def attach_notes(sinks: list[Sink], emit: Emit) -> None:
    """Give the sinks that have something to say on record (the live socket: connections
    it turned away, errors it contained) the writer's ``emit``."""
    for sink in sinks:
        notes_to = getattr(sink, "notes_to", None)  # a user's sink with a `notify` is not ours
        if callable(notes_to):
            with contextlib.suppress(Exception):
                notes_to(emit)


def closing_notes(sinks: list[Sink], emit: Emit) -> None:
    """What the sinks have not yet said, on record before the ``exit`` event."""
    for sink in list(sinks):
        note = getattr(sink, "closing_note", None)
        if note is None:
            continue
        with contextlib.suppress(Exception):
            record = note()
            if record is not None:
                emit(record)


def hook_gradients(
    model: Any, optimizer: Any, scaler: Any, want_layers: bool, on_error: OnError
) -> GradNormTracker | None:
    """The backward hooks that measure the grad norm (and per-layer figures), or ``None``
    when there is nothing to watch or the hooks could not be set."""
    try:
        params = trainable_params(model, optimizer)
    except Exception as e:
        on_error("model parameters", e)
        return None
    if not params:
        return None
    try:
        tracker = GradNormTracker(params, scaler=scaler)
        tracker.want_layers = want_layers
        return tracker
    except Exception as e:
        on_error("grad norm hooks", e)
        return None


def hook_loop(
    model: Any, optimizer: Any, where: Whereabouts, on_amp: OnAmp, on_error: OnError
) -> LoopHooks | None:
    """The forward pre-hook on ``model`` and the step hooks on ``optimizer`` that say
    where the loop is, with the autocast look; ``None`` when there is neither, or torch
    is missing. A model or optimizer that cannot be hooked costs only its own hooks."""
    if model is None and optimizer is None:
        return None
    try:
        from .loophooks import LoopHooks  # noqa: PLC0415 - imports torch

        hooks = LoopHooks(where, on_amp)
    except Exception as e:
        on_error("loop hooks", e)
        return None
    if model is not None:
        try:
            hooks.watch_model(model)
        except Exception as e:
            on_error("forward hooks", e)
    if optimizer is not None:
        try:
            hooks.watch_optimizer(optimizer)
        except Exception as e:
            on_error("optimizer hooks", e)
    return hooks


def start_sampler(emit: Emit, interval: float, on_error: OnError) -> SystemSampler | None:
    """The ~1 Hz system sampler thread (RSS, CPU, NVML GPUs), or ``None`` if it failed."""
    try:
        from .system import SystemSampler  # noqa: PLC0415 - psutil/NVML lazily

        sampler = SystemSampler(emit, interval=interval)
        sampler.start()
        return sampler
    except Exception as e:
        on_error("system sampler", e)
        return None


def install_crash(
    emit: Emit,
    flush: Callable[[bool], None],
    last_step: Callable[[], int | None],
    on_error: OnError,
) -> CrashRecorder | None:
    """The exception and signal hooks that put a crash on record, or ``None`` if they failed."""
    try:
        from .crash import CrashRecorder  # noqa: PLC0415

        recorder = CrashRecorder(emit, flush, last_step)
        recorder.install()
        return recorder
    except Exception as e:
        on_error("crash capture", e)
        return None


def exit_status(exc: BaseException | None, signal: str | None) -> tuple[str, bool]:
    """How a ``with Probe(...)`` block ended, as the ``exit`` record's status, and whether
    the exception goes on record as a crash event first.

    Ctrl-C is on record (marked interrupted by the crash recorder) but is no crash; a
    ``SystemExit`` raised by our own signal handler, or ``sys.exit(0)``, records nothing.
    """
    if exc is None:
        return "ok", False
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", True
    if isinstance(exc, SystemExit) and (signal or exc.code in (None, 0)):
        return ("signal" if signal else "ok"), False
    return ("signal" if signal else "exception"), True


def exit_record(status: str, last_step: int | None, steps: int, dropped: int) -> dict[str, Any]:
    """The ``exit`` event, the log's last record: how the run ended and its step count,
    with the run's total of records dropped under overload when there were any (beside
    the per-gap ``dropped`` events)."""
    rec: dict[str, Any] = {
        "kind": EVENT,
        "type": EV_EXIT,
        "t": time.time(),
        "status": status,
        "step": last_step,
        "steps": steps,
    }
    if dropped:
        rec["dropped"] = dropped
    return rec


def say_error(where: str, err: BaseException, writer: Writer | None) -> None:
    """The probe's own failure, said on stderr and in the log as one line (a torch
    dispatch error runs to 80; 300 characters are enough to name it). Never raises."""
    text = str(err).strip()
    cut = "\n" in text or len(text) > 300
    text = (text.splitlines() or [""])[0][:300] + (" ..." if cut else "")
    message = (
        f"probe error in {where}: {type(err).__name__}: {text}; "
        "monitoring degraded, training goes on"
    )
    with contextlib.suppress(Exception):
        sys.stderr.write(f"dltop: warning: {message}\n")
    if writer is not None:
        writer.warnings.append(message)
        writer.emit({"kind": EVENT, "type": EV_WARNING, "t": time.time(), "message": message})
