"""NVML access that answers "not available" instead of raising.

The probe runs inside someone's training: a missing driver, a lost GPU or an NVML
call that starts failing halfway through a week-long run must cost one note, never
an exception and never a stream of warnings. So, in the spirit of nvitop's libnvml
wrapper, every call here is guarded: a field the GPU does not support is dropped
for that GPU, and any other NVML error marks NVML dead for the rest of the process
(the sampler then reports GPU metrics as N/A, i.e. absent).

``pynvml`` (from the ``nvidia-ml-py`` distribution) is imported lazily, on the first
call, so that importing the probe stays cheap. Nothing here imports torch or any UI.
"""

from __future__ import annotations

import os
import threading
from typing import Any

# Per-GPU fields of a ``sys`` record and the reading that produces each.
_FIELDS = ("mem_used", "mem_total", "util", "temp", "power_w")


class Nvml:
    """One NVML session for the process: init once, sample many times, fail once.

    ``lib`` is the ``pynvml`` module (imported on first use when not given); tests pass
    a stand-in to make NVML fail mid-run on a machine without a GPU.
    """

    def __init__(self, lib: Any = None) -> None:
        self._lib = lib
        self._lock = threading.Lock()
        self._tried = False
        self._handles: list[tuple[int, Any, str]] = []  # (cuda ordinal, handle, name)
        self._unsupported: set[tuple[int, str]] = set()
        self.ok = False
        self.reason: str | None = None  # why GPU metrics are N/A, once they are

    # -- set-up ---------------------------------------------------------------------

    def init(self) -> bool:
        """Initialise NVML and find the visible GPUs, once; later calls return the verdict."""
        with self._lock:
            if not self._tried:
                self._tried = True
                self._init_locked()
            return self.ok

    def _init_locked(self) -> None:
        try:
            if self._lib is None:
                import pynvml

                self._lib = pynvml
        except Exception as e:  # ImportError, or a broken install
            self.reason = f"pynvml not importable: {_describe(e)}"
            return
        lib = self._lib
        try:
            lib.nvmlInit()
            self._handles = self._visible_handles(lib)
        except Exception as e:
            self.reason = f"NVML unavailable ({_describe(e)})"
            return
        if not self._handles:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            self.reason = (
                f"NVML sees no visible GPU (CUDA_VISIBLE_DEVICES={visible!r})"
                if visible is not None
                else "NVML reports 0 GPUs"
            )
            return
        self.ok = True

    @staticmethod
    def _visible_handles(lib: Any) -> list[tuple[int, Any, str]]:
        """GPUs in CUDA ordinal order: what ``cuda:N`` means to the training process.

        NVML numbers every GPU on the machine; CUDA_VISIBLE_DEVICES selects and reorders
        them (by index or UUID; CUDA stops at the first entry it cannot resolve).
        """
        count = lib.nvmlDeviceGetCount()
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is None:
            handles = [lib.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        else:
            handles = []
            for entry in (e.strip() for e in visible.split(",")):
                try:
                    if entry.isdigit():
                        if int(entry) >= count:
                            break
                        handles.append(lib.nvmlDeviceGetHandleByIndex(int(entry)))
                    elif entry.startswith(("GPU-", "MIG-")):
                        handles.append(lib.nvmlDeviceGetHandleByUUID(entry))
                    else:
                        break
                except Exception:
                    break
        out = []
        for ordinal, handle in enumerate(handles):
            name = lib.nvmlDeviceGetName(handle)
            if isinstance(name, bytes):  # older bindings return bytes
                name = name.decode(errors="replace")
            out.append((ordinal, handle, str(name)))
        return out

    # -- readings -------------------------------------------------------------------

    def devices(self) -> list[dict[str, Any]]:
        """Static description of each visible GPU for the ``meta`` record."""
        if not self.init():
            return []
        out = []
        for gpu in self.sample():
            dev = {"type": "cuda", "index": gpu["index"], "name": gpu["name"]}
            if "mem_total" in gpu:
                dev["mem_total"] = gpu["mem_total"]
            out.append(dev)
        return out

    def sample(self) -> list[dict[str, Any]]:
        """One reading per visible GPU; ``[]`` once NVML is unavailable or has failed."""
        if not self.ok:
            return []
        lib = self._lib
        out = []
        try:
            for ordinal, handle, name in self._handles:
                gpu: dict[str, Any] = {"index": ordinal, "name": name}
                for field in _FIELDS:
                    if (ordinal, field) in self._unsupported:
                        continue
                    try:
                        _read(lib, handle, field, gpu)
                    except Exception as e:
                        if not _is_not_supported(lib, e):
                            raise
                        self._unsupported.add((ordinal, field))
                out.append(gpu)
        except Exception as e:
            self.fail(e)
            return []
        return out

    def fail(self, error: BaseException) -> None:
        """Give up on NVML for the rest of the run (the caller reports it once)."""
        self.ok = False
        self.reason = f"NVML failed ({_describe(error)})"


def _read(lib: Any, handle: Any, field: str, gpu: dict[str, Any]) -> None:
    if field in ("mem_used", "mem_total"):
        if "mem_total" in gpu:  # one call answers both
            return
        mem = lib.nvmlDeviceGetMemoryInfo(handle)
        gpu["mem_used"] = int(mem.used)
        gpu["mem_total"] = int(mem.total)
    elif field == "util":
        gpu["util"] = float(lib.nvmlDeviceGetUtilizationRates(handle).gpu)
    elif field == "temp":
        gpu["temp"] = float(lib.nvmlDeviceGetTemperature(handle, lib.NVML_TEMPERATURE_GPU))
    elif field == "power_w":
        gpu["power_w"] = lib.nvmlDeviceGetPowerUsage(handle) / 1000.0  # milliwatts


def _is_not_supported(lib: Any, error: BaseException) -> bool:
    """A field this GPU lacks (power on some boards, MIG slices) is not a broken NVML."""
    cls = getattr(lib, "NVMLError_NotSupported", None)
    return isinstance(cls, type) and isinstance(error, cls)


def _describe(error: BaseException) -> str:
    try:
        text = str(error)
    except Exception:
        text = ""
    return (text or type(error).__name__)[:200]


_shared: Nvml | None = None
_shared_lock = threading.Lock()


def shared() -> Nvml:
    """The process-wide session: ``meta`` and the sampler pay for ``nvmlInit`` once."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Nvml()
        return _shared
