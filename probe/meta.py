"""The ``meta`` record: the first line of every log, saying what run this is and where it ran.

Built once when the probe opens, on the training thread, so it must be quick and must
never raise: every piece is read under its own guard and simply left out (or set to
``None``) when it cannot be had. It never imports torch: a training script that uses
torch has imported it already, and one that does not should not pay 1.6 s for a
version string. CUDA is only asked about when the script has initialised it, so that
the probe never creates a CUDA context (or breaks a later ``fork``) on its own.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
import time
from typing import Any

from .jobpath import env_int, restart_count
from .schema import META, SCHEMA_VERSION
from .system import gpu_status

_ARGV_MAX = 64  # arguments kept
_ARG_CHARS = 1024  # characters kept per argument


def build_meta(run_id: str, log_path: str | None) -> dict[str, Any]:
    """The complete ``meta`` record for this process."""
    notes: list[str] = []
    torch = sys.modules.get("torch")
    rank, world_size, local_rank = _ranks(torch)
    rec: dict[str, Any] = {
        "kind": META,
        "v": SCHEMA_VERSION,
        "run_id": str(run_id),
        "t": time.time(),
        "host": _guard(socket.gethostname),
        "pid": os.getpid(),
        "argv": [str(a)[:_ARG_CHARS] for a in sys.argv[:_ARGV_MAX]],
        "cwd": _guard(os.getcwd),
        "python": platform.python_version(),
        "platform": _guard(lambda: f"{platform.system()}-{platform.machine()}"),
        "dltop": _guard(_dltop_version),
        "torch": _guard(lambda: str(torch.__version__)) if torch is not None else None,
        "cuda": _guard(lambda: torch.version.cuda) if torch is not None else None,
        "devices": _devices(torch, notes),
        "rank": rank,
        "world_size": world_size,
        "local_rank": local_rank,
        "log_path": _guard(lambda: os.path.abspath(log_path)) if log_path else None,
        "notes": notes,
    }
    restarts = restart_count()
    if restarts is not None:  # torchrun's attempt number (0 first); absent outside torchrun
        rec["restart_count"] = restarts
    return rec


def _guard(fn: Any) -> Any:
    try:
        return fn()
    except Exception:
        return None


def _dltop_version() -> str:
    from importlib.metadata import version

    return version("dltop-monitor")


def _ranks(torch: Any) -> tuple[int, int, int | None]:
    """(rank, world_size, local_rank): an initialised process group wins over the env vars
    that torchrun sets; a plain single process is rank 0 of 1 (local rank 0). The local
    rank of a multi-process run without LOCAL_RANK is unknown (``None``)."""
    rank, world, local = env_int("RANK"), env_int("WORLD_SIZE"), env_int("LOCAL_RANK")
    if torch is not None:
        try:
            dist = torch.distributed
            if dist.is_available() and dist.is_initialized():
                rank, world = int(dist.get_rank()), int(dist.get_world_size())
        except Exception:
            pass
    rank = 0 if rank is None else rank
    world = 1 if world is None else world
    if local is None and world == 1:
        local = 0
    return rank, world, local


def _devices(torch: Any, notes: list[str]) -> list[dict[str, Any]]:
    """CUDA devices from torch when the script has initialised CUDA, else from NVML;
    a ``cpu`` entry when there is no GPU, with the one note saying why GPU metrics are N/A."""
    devices: list[dict[str, Any]] = []
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                for i in range(torch.cuda.device_count()):
                    p = torch.cuda.get_device_properties(i)
                    devices.append(
                        {
                            "type": "cuda",
                            "index": i,
                            "name": str(p.name),
                            "mem_total": int(p.total_memory),
                            "capability": f"{p.major}.{p.minor}",
                        }
                    )
        except Exception:
            devices = []
    nvml_devices, note = gpu_status()
    if not devices:
        devices = nvml_devices
    if note is not None:
        if devices:  # CUDA works but NVML does not: memory is still recorded per step
            note = (
                note.replace("no NVIDIA GPU: ", "", 1) + " (CUDA memory is still recorded per step)"
            )
        notes.append(note)
    if not devices:
        devices = [{"type": "cpu", "cpus": os.cpu_count()}]
    return devices
