"""Memory state at an out-of-memory error, for the ``memory`` object of an ``oom`` event.

Runs right after the allocator failed, so it reads what is already there: torch's
counters only when the script has initialised CUDA (torch is taken from
``sys.modules``, never imported), the process's sizes from ``/proc`` (no import, a
few small strings), RLIMIT_AS from ``resource``. Every piece is guarded and left out
when it cannot be read.
"""

from __future__ import annotations

import contextlib
import re
import sys
from typing import Any

CPU_OOM = "can't allocate memory"  # torch's DefaultCPUAllocator
CUDA_OOM = "CUDA out of memory"  # torch's CUDA caching allocator (also older RuntimeErrors)
_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
_CUDA_REQUEST = re.compile(r"Tried to allocate ([0-9.]+) ?(B|KiB|MiB|GiB|TiB)")
_CUDA_DEVICE = re.compile(r"GPU (\d+) has a total capacity")
_CPU_REQUEST = re.compile(r"tried to allocate (\d+) bytes", re.IGNORECASE)


def memory_state(exc: BaseException, text: str) -> dict[str, Any]:
    """Allocator and process state for an OOM: CUDA allocator counters when the error came
    from the GPU, else process RSS/VMS, RLIMIT_AS and system memory. Absent when unknown."""
    mem: dict[str, Any] = {}
    cuda = CUDA_OOM in text or (
        not isinstance(exc, MemoryError) and CPU_OOM not in text and _torch_oom_class(exc)
    )
    if cuda:
        mem["device"] = "cuda"
        m = _CUDA_REQUEST.search(text)
        if m:
            mem["requested"] = int(float(m.group(1)) * _UNITS[m.group(2)])
        m = _CUDA_DEVICE.search(text)
        index = int(m.group(1)) if m else None
        _cuda_state(mem, index)
    else:
        mem["device"] = "cpu"
        m = _CPU_REQUEST.search(text)
        if m:
            mem["requested"] = int(m.group(1))
    _process_state(mem)
    return mem


def _torch_oom_class(exc: BaseException) -> bool:
    return any(c.__name__ == "OutOfMemoryError" for c in type(exc).__mro__)


def _cuda_state(mem: dict[str, Any], index: int | None) -> None:
    torch = sys.modules.get("torch")
    if torch is None:
        return
    try:
        if not torch.cuda.is_initialized():
            return
        if index is None:
            index = int(torch.cuda.current_device())
        mem["device_index"] = index
    except Exception:
        return
    for key, fn in (
        ("allocated", torch.cuda.memory_allocated),
        ("reserved", torch.cuda.memory_reserved),
        ("max_allocated", torch.cuda.max_memory_allocated),
    ):
        with contextlib.suppress(Exception):
            mem[key] = int(fn(index))
    try:
        free, total = torch.cuda.mem_get_info(index)
        mem["free"], mem["total"] = int(free), int(total)
    except Exception:
        pass


def _process_state(mem: dict[str, Any]) -> None:
    """RSS/VMS from /proc (no import, little allocation), psutil if already loaded."""
    status = _read_proc("/proc/self/status", ("VmRSS:", "VmSize:"))
    if "VmRSS:" in status:
        mem["rss"] = status["VmRSS:"]
    if "VmSize:" in status:
        mem["vms"] = status["VmSize:"]
    psutil = sys.modules.get("psutil")
    if "rss" not in mem and psutil is not None:
        try:
            info = psutil.Process().memory_info()
            mem["rss"], mem["vms"] = int(info.rss), int(info.vms)
        except Exception:
            pass
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            mem["rlimit_as_soft"] = int(soft)
        if hard != resource.RLIM_INFINITY:
            mem["rlimit_as_hard"] = int(hard)
    except Exception:
        pass
    meminfo = _read_proc("/proc/meminfo", ("MemAvailable:", "MemTotal:"))
    if "MemAvailable:" in meminfo:
        mem["mem_available"] = meminfo["MemAvailable:"]
        if "MemTotal:" in meminfo:
            mem["mem_total"] = meminfo["MemTotal:"]
    elif psutil is not None:
        try:
            vm = psutil.virtual_memory()
            mem["mem_available"], mem["mem_total"] = int(vm.available), int(vm.total)
        except Exception:
            pass


def _read_proc(path: str, keys: tuple[str, ...]) -> dict[str, int]:
    """``key: N kB`` lines of a /proc file, in bytes."""
    out: dict[str, int] = {}
    try:
        with open(path, "rb") as f:
            for raw in f:
                line = raw.decode("ascii", "replace")
                for key in keys:
                    if line.startswith(key):
                        parts = line.split()
                        out[key] = int(parts[1]) * (1024 if parts[-1] == "kB" else 1)
                if len(out) == len(keys):
                    break
    except Exception:
        pass
    return out
