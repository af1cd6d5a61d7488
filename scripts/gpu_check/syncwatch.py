"""Who made the host wait for the device, and where: the probe, or the training itself.

On a GPU (``SyncWatch("cuda")``) torch says it: ``torch.cuda.set_sync_debug_mode("warn")``
turns the synchronising CUDA calls that go through c10's ``memcpy_and_sync`` or
``stream_synchronize`` (``.item()``, ``.cpu()``, a blocking copy, ``nonzero``,
``Stream.synchronize()``...) on any thread into a warning, which is caught here with the
Python stack that made it. ``"error"`` would raise instead, inside the probe, which reports
its own errors and carries on: the warning keeps the count and the place. The debug mode
does not see ``torch.cuda.synchronize()`` nor ``Event.synchronize()``
(``cudaDeviceSynchronize`` and ``cudaEventSynchronize`` are called without its check):
those two are intercepted as well, on every thread.

On the CPU (``SyncWatch("cpu")``) nothing syncs, so the calls that *would* on a GPU are
intercepted instead: ``Tensor.item``, ``tolist``, ``__float__``, ``__int__``, ``__bool__``,
``__index__``, ``cpu``, ``numpy``, ``nonzero`` and ``torch.cuda.synchronize``, on the
training thread (the writer thread reads host copies by design). The probe reads CPU
tensors on purpose in two places, each behind a ``device.type == "cpu"`` test on the
line making the read or the line above it (a CUDA tensor never takes that branch): those
are counted apart as ``cpu_branch`` reads, never as syncs. Any other read is one.

Attribution: a call is the probe's when it happens inside ``Probe.step`` (patched while
the watch is on, so a read anywhere under it counts), or when the nearest frame that is
neither torch's nor this module's lies in the probe's sources (its backward hooks, its
writer thread). Everything else is the user's: the script's own ``.item()``, a
``GradScaler.step``, an optimizer's; reported apart, never failing the check.
"""

from __future__ import annotations

import functools
import linecache
import os
import sys
import threading
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

import torch

SYNC_WARNING = "called a synchronizing CUDA operation"
CPU_GUARD = 'device.type == "cpu"'
_READS = (
    "item",
    "tolist",
    "__float__",
    "__int__",
    "__bool__",
    "__index__",
    "__complex__",
    "cpu",
    "numpy",
    "nonzero",
)


def _real_dir(module_file: str) -> str:
    return os.path.realpath(os.path.dirname(module_file)) + os.sep


def probe_dir() -> str:
    import dltop.probe

    return _real_dir(dltop.probe.__file__ or "")


_TORCH_DIR = _real_dir(torch.__file__ or "")
_SELF = os.path.realpath(__file__)
_WARNINGS = os.path.realpath(warnings.__file__ or "")


@dataclass(frozen=True)
class Sync:
    who: str  # "probe" or "user"
    what: str  # "cuda sync" (the debug mode) or the intercepted call ("Tensor.item")
    site: str  # "file.py:LINE in func" of the nearest frame outside torch
    thread: str
    cpu_branch: bool = False  # a CPU-only read behind a device.type test (CPU mode)


class SyncWatch:
    """``with SyncWatch(device_type) as w:`` ... then ``w.probe_syncs()``, ``w.user_syncs()``."""

    def __init__(self, device_type: str) -> None:
        self.device_type = device_type
        self.events: list[Sync] = []
        self._local = threading.local()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._undo: list[Callable[[], None]] = []
        self._probe_dir = probe_dir()
        self._real: dict[str, str] = {}

    # --- on and off -------------------------------------------------------------------
    def __enter__(self) -> SyncWatch:
        self._thread = threading.current_thread()
        self._flag_probe_step()
        if self.device_type == "cuda":
            self._debug_mode()
        else:
            self._intercept_reads()
        return self

    def __exit__(self, *exc: Any) -> None:
        while self._undo:
            self._undo.pop()()

    def _flag_probe_step(self) -> None:
        from dltop.probe.probe import Probe

        orig = Probe.step
        local = self._local

        @functools.wraps(orig)
        def step(probe: Any, *a: Any, **k: Any) -> Any:
            local.in_step = getattr(local, "in_step", 0) + 1
            try:
                return orig(probe, *a, **k)
            finally:
                local.in_step -= 1

        Probe.step = step  # type: ignore[method-assign,assignment]
        self._undo.append(lambda: setattr(Probe, "step", orig))

    def _debug_mode(self) -> None:
        catch = warnings.catch_warnings()
        catch.__enter__()
        self._undo.append(lambda: catch.__exit__(None, None, None))
        warnings.filterwarnings("always", message=f".*{SYNC_WARNING}")
        shown = warnings.showwarning

        def show(
            message: Warning | str,
            category: type[Warning],
            filename: str,
            lineno: int,
            file: Any = None,
            line: str | None = None,
        ) -> None:
            if SYNC_WARNING in str(message):
                self._record("cuda sync", sys._getframe(1))
                return
            shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        before = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("warn")
        self._undo.append(lambda: torch.cuda.set_sync_debug_mode(before))
        # the two host waits the debug mode does not check
        self._wrap(torch.cuda, "synchronize", "torch.cuda.synchronize", any_thread=True)
        event = getattr(torch.cuda, "Event", None)
        if event is not None:
            self._wrap(event, "synchronize", "torch.cuda.Event.synchronize", any_thread=True)

    def _intercept_reads(self) -> None:
        for name in _READS:
            self._wrap(torch.Tensor, name, f"Tensor.{name}")
        self._wrap(torch.cuda, "synchronize", "torch.cuda.synchronize")
        for cls in ("Event", "Stream"):
            klass = getattr(torch.cuda, cls, None)
            if klass is not None:
                self._wrap(klass, "synchronize", f"torch.cuda.{cls}.synchronize")

    def _wrap(self, owner: Any, name: str, what: str, any_thread: bool = False) -> None:
        orig = getattr(owner, name, None)
        if orig is None:
            return
        own = name in vars(owner)  # else inherited (torch._C.TensorBase): delete to undo
        local, watched = self._local, self._thread

        def read(*a: Any, **k: Any) -> Any:
            here = any_thread or threading.current_thread() is watched
            if here and not getattr(local, "busy", False):
                local.busy = True
                try:
                    self._record(what, sys._getframe(1))
                finally:
                    local.busy = False
            return orig(*a, **k)

        setattr(owner, name, read)
        self._undo.append(
            (lambda: setattr(owner, name, orig)) if own else (lambda: delattr(owner, name))
        )

    # --- attribution ----------------------------------------------------------------------
    def _realpath(self, filename: str) -> str:
        real = self._real.get(filename)
        if real is None:
            real = self._real[filename] = os.path.realpath(filename)
        return real

    def _site(self, frame: FrameType | None) -> FrameType | None:
        """The nearest frame that is neither torch's, the warnings module's nor ours."""
        while frame is not None:
            real = self._realpath(frame.f_code.co_filename)
            if real != _SELF and real != _WARNINGS and not real.startswith(_TORCH_DIR):
                return frame
            frame = frame.f_back
        return None

    def _record(self, what: str, frame: FrameType | None) -> None:
        # the training thread's reads only on the CPU (the writer reads host copies by
        # design); on a GPU the debug mode and the two waits count on every thread
        site = self._site(frame)
        in_step = getattr(self._local, "in_step", 0) > 0
        if site is None:
            where, probe_file, guarded = "?", False, False
        else:
            filename, lineno = site.f_code.co_filename, site.f_lineno
            real = self._realpath(filename)
            probe_file = real.startswith(self._probe_dir)
            where = f"{os.path.basename(filename)}:{lineno} in {site.f_code.co_name}"
            guarded = probe_file and any(
                CPU_GUARD in linecache.getline(filename, n) for n in (lineno, lineno - 1)
            )
        who = "probe" if in_step or probe_file else "user"
        cpu_branch = self.device_type == "cpu" and who == "probe" and guarded
        ev = Sync(who, what, where, threading.current_thread().name, cpu_branch)
        with self._lock:
            self.events.append(ev)

    # --- results ---------------------------------------------------------------------------
    def probe_syncs(self) -> list[Sync]:
        return [e for e in self.events if e.who == "probe" and not e.cpu_branch]

    def user_syncs(self) -> list[Sync]:
        return [e for e in self.events if e.who == "user"]

    def cpu_branch_reads(self) -> list[Sync]:
        return [e for e in self.events if e.cpu_branch]

    def summary(self, top: int = 8) -> dict[str, Any]:
        """Counts, and the busiest places of each kind (``site [what, thread]: n``)."""

        def places(evs: list[Sync]) -> dict[str, int]:
            c = Counter(f"{e.site} [{e.what}, {e.thread}]" for e in evs)
            return dict(c.most_common(top))

        probe, user, branch = self.probe_syncs(), self.user_syncs(), self.cpu_branch_reads()
        out: dict[str, Any] = {
            "probe_syncs": len(probe),
            "probe_sync_sites": places(probe),
            "user_syncs": len(user),
            "user_sync_sites": places(user),
        }
        if self.device_type == "cpu":
            out["cpu_branch_reads"] = len(branch)
            out["cpu_branch_sites"] = places(branch)
        return out

    def count_at(self, func: str) -> int:
        """Events whose site is in function ``func`` (the script's own deliberate sync)."""
        return sum(1 for e in self.events if e.site.endswith(f" in {func}"))
