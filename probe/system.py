"""The system sampler: process and GPU readings on a thread of their own, about once a second.

psutil's readings cost 10–40 µs each and NVML's more; none of that may land on the
training thread, so a daemon thread takes them and hands finished ``sys`` records to
``emit`` (the probe's queue). What cannot be measured is left out of the record, never
written as a zero: a viewer must be able to tell "0 % utilisation" from "no GPU".
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from . import nvml
from .schema import EV_WARNING, EVENT, SYS

Emit = Callable[[dict[str, Any]], None]
CHILDREN_EVERY_S = 10.0  # how often the list of child processes is refreshed


def gpu_status() -> tuple[list[dict[str, Any]], str | None]:
    """The visible GPUs as NVML sees them, and the one note to record when there are none.

    Used by ``meta``; initialises the shared NVML session (~30 ms with a driver, once).
    """
    try:
        session = nvml.shared()
        if session.init():
            devices = session.devices()
            if devices:
                return devices, None
        reason = session.reason or "NVML unavailable"
        return [], f"no NVIDIA GPU: {reason}; GPU metrics are N/A"
    except Exception as e:  # never let a broken driver stop the run from starting
        return [], f"no NVIDIA GPU: NVML unavailable ({type(e).__name__}); GPU metrics are N/A"


class SystemSampler:
    """Emits a ``sys`` record every ``interval`` seconds from a daemon thread.

    Record fields: ``rss`` (bytes, this process), ``children_rss`` (bytes, data-loader
    workers and other children, when there are any), ``cpu_percent`` (this process, in
    % of one core, so up to 100 × cores), ``mem_available`` and ``mem_total`` (system,
    bytes) and ``gpus`` (one entry per visible GPU, only where NVML works).
    """

    def __init__(self, emit: Emit, interval: float = 1.0, nvml_session: Any = None) -> None:
        self._emit = emit
        self.interval = max(0.05, float(interval))
        self._nvml = nvml_session  # None: the process-wide session, created on the thread
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc: Any = None
        self._psutil: Any = None
        self._children: list[Any] = []
        self._children_age = 0
        self.samples = 0  # records emitted, for tests and the probe's own diagnostics

    def start(self) -> None:
        """Start the thread (idempotent); imports and NVML init happen on it, not here."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="dltop-sampler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop and join; a sample in progress is allowed to finish (bounded by ``timeout``)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    # -- the thread -----------------------------------------------------------------

    def _run(self) -> None:
        with contextlib.suppress(Exception):
            self._setup()
        next_t = time.monotonic() + self.interval
        while not self._stop.wait(max(0.0, next_t - time.monotonic())):
            next_t += self.interval
            now = time.monotonic()
            if next_t < now:  # we were starved (suspended, swapped): do not burst to catch up
                next_t = now + self.interval
            try:
                record = self.sample()
            except Exception:
                record = None
            if record is not None:
                try:
                    self._emit(record)
                    self.samples += 1
                except Exception:
                    pass

    def _setup(self) -> None:
        try:
            import psutil

            self._psutil = psutil
            self._proc = psutil.Process()
            self._proc.cpu_percent(None)  # the first call only starts the measurement
        except Exception:
            self._psutil = self._proc = None
        if self._nvml is None:
            self._nvml = nvml.shared()
        try:
            self._nvml.init()
        except Exception:
            self._nvml = None

    def sample(self) -> dict[str, Any] | None:
        """One ``sys`` record, or ``None`` when nothing at all could be read."""
        rec: dict[str, Any] = {"kind": SYS, "t": time.time()}
        proc, psutil = self._proc, self._psutil
        if proc is not None:
            with contextlib.suppress(Exception):
                rec["rss"] = int(proc.memory_info().rss)
            with contextlib.suppress(Exception):
                rec["cpu_percent"] = float(proc.cpu_percent(None))
            children = self._child_processes()
            total = alive = 0
            for child in children:
                with contextlib.suppress(Exception):  # exited since listed
                    total += child.memory_info().rss
                    alive += 1
            if alive:
                rec["children_rss"] = int(total)
            try:
                vm = psutil.virtual_memory()
                rec["mem_available"] = int(vm.available)
                rec["mem_total"] = int(vm.total)
            except Exception:
                pass
        session = self._nvml
        if session is not None and session.ok:
            gpus = session.sample()
            if gpus:
                rec["gpus"] = gpus
            elif not session.ok:  # it just failed: say so once, then stay quiet
                self._warn(f"{session.reason}; GPU metrics are N/A from now on")
        return rec if len(rec) > 2 else None

    def _child_processes(self) -> list[Any]:
        """The process's children, re-listed every ~10 s: listing scans all of /proc
        (about 1 ms per hundred processes), and data-loader workers rarely change."""
        self._children_age -= 1
        if self._children_age <= 0:
            self._children_age = max(1, round(CHILDREN_EVERY_S / self.interval))
            try:
                self._children = self._proc.children(recursive=True)
            except Exception:
                self._children = []
        return self._children

    def _warn(self, message: str) -> None:
        with contextlib.suppress(Exception):
            self._emit(
                {
                    "kind": EVENT,
                    "t": time.time(),
                    "type": EV_WARNING,
                    "source": "nvml",
                    "message": message,
                }
            )
