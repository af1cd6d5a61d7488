"""Where a run's log goes: the default path (one file per run, or one folder per job and
one file per rank), the run id it gives (:func:`default_run_id`), and the error when a
probe has nowhere to write (:func:`nowhere_to_write`, shared by ``Probe`` and the adapters).

A single process writes ``dltop-runs/<YYYYmmdd-HHMMSS>-<pid>.jsonl``. Under torchrun (or
any launcher that sets ``RANK`` and ``WORLD_SIZE`` with ``WORLD_SIZE > 1``) every rank
writes ``dltop-runs/<job>/rank<R>.jsonl``, and the ranks of one job must agree on
``<job>`` without talking to each other (the probe may start before the process group,
and must never wait on it). ``<job>`` is, in order:

1. ``TORCHELASTIC_RUN_ID`` when it is set and not ``"none"``: torchrun's ``--rdzv-id``
   (a fresh UUID with ``--standalone``), the same on every rank and every node, and kept
   across elastic restarts.
2. ``<YYYYmmdd-HHMMSS>-<ppid>``: the start time of the parent process (read from
   ``/proc/<ppid>/stat`` and the boot time in ``/proc/stat``, local time) and its pid.
   All the ranks that one launcher (the torchrun agent, ``mp.spawn``) starts on one
   machine are its children, so they read the same parent; the agent outlives an
   elastic restart, so a restarted rank finds the same folder. The start time keeps
   two jobs apart even when the pid is recycled.
3. where ``/proc`` cannot be read (macOS): ``<MASTER_ADDR>-<MASTER_PORT>-<ppid>`` (the
   parts that are set), still shared by the children of one launcher.

The name is reduced to ``[A-Za-z0-9._-]`` (other characters become ``_``), at most 100
characters. Ranks on several machines agree only through rule 1: multi-node jobs should
pass ``--rdzv-id`` (e.g. ``$SLURM_JOB_ID``), or a ``path``, to share one folder.

An elastic restart reopens the same ``rank<R>.jsonl`` in append mode (the log file is
never truncated), so the restarted attempt is a new segment (a new ``meta``) of the same
file. Standard library only, like the rest of the probe.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

RUNS_DIR = "dltop-runs"
_NAME_MAX = 100
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def stamp() -> str:
    """``<YYYYmmdd-HHMMSS>-<pid>`` of now and this process."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


def env_int(name: str) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def rank_world() -> tuple[int, int] | None:
    """``(rank, world_size)`` from the launcher's environment when this process is one
    rank of several (``0 <= RANK < WORLD_SIZE``, ``WORLD_SIZE > 1``), else ``None``."""
    rank, world = env_int("RANK"), env_int("WORLD_SIZE")
    if rank is None or world is None or world <= 1 or not 0 <= rank < world:
        return None
    return rank, world


def restart_count() -> int | None:
    """``TORCHELASTIC_RESTART_COUNT`` (0 on the first attempt), ``None`` when not set."""
    return env_int("TORCHELASTIC_RESTART_COUNT")


def safe_name(name: str) -> str:
    """A single, harmless path component made of ``name``."""
    name = _UNSAFE.sub("_", name)[:_NAME_MAX]
    return name if name.strip(".") else "job" + name


def elastic_run_id() -> str | None:
    """``TORCHELASTIC_RUN_ID`` when set and not torchrun's ``"none"`` (no ``--rdzv-id``)."""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "").strip()
    return run_id if run_id and run_id.lower() != "none" else None


def job_name() -> str:
    """The job's folder name, the same on every rank of the job (see the module's rules)."""
    run_id = elastic_run_id()
    if run_id is not None:
        return safe_name(run_id)
    ppid = os.getppid()
    started = _start_time(ppid)
    if started is not None:
        return safe_name(f"{time.strftime('%Y%m%d-%H%M%S', time.localtime(started))}-{ppid}")
    parts = [os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", ""), str(ppid)]
    return safe_name("-".join(p for p in parts if p))


def _start_time(pid: int) -> float | None:
    """When process ``pid`` started (Unix seconds, whole ticks), from ``/proc``; ``None``
    where that cannot be read. Every reader gets the same value: the start is counted in
    clock ticks since boot and the boot time is a whole second that moves only when the
    wall clock is set."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
        # the command name (field 2) is in parentheses and may hold spaces or ')'
        fields = stat[stat.rindex(")") + 2 :].split()
        ticks = int(fields[19])  # field 22, starttime, counted from field 3 (state)
        with open("/proc/stat", "rb") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
        hz = os.sysconf("SC_CLK_TCK")
        return btime + ticks // hz
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def default_path(prefix: str | None = None) -> str:
    """The probe's log path when the user gives none (in the working directory):
    ``dltop-runs/[<prefix>-]<job>/rank<R>.jsonl`` for one rank of a multi-process job,
    else ``dltop-runs/[<prefix>-]<YYYYmmdd-HHMMSS>-<pid>.jsonl``."""
    ranks = rank_world()
    if ranks is None:
        name = f"{prefix}-{stamp()}" if prefix else stamp()
        return os.path.join(RUNS_DIR, name + ".jsonl")
    job = job_name()
    folder = safe_name(f"{prefix}-{job}") if prefix else job
    return os.path.join(RUNS_DIR, folder, f"rank{ranks[0]}.jsonl")


# the default ``path`` of Probe and the adapters: ``default_path()`` (a sentinel, since
# ``None`` means "no file")
AUTO: Any = object()


def default_run_id(path: str | None, default: bool) -> str:
    """The log's file name without ``.jsonl``; ``<job>.rank<R>`` for a default rank file
    (``rank0`` alone would name every job's rank 0 alike in ``dltop ls``)."""
    if not path:
        return stamp()
    name = os.path.splitext(os.path.basename(path))[0]
    if default and rank_world() is not None:
        name = f"{os.path.basename(os.path.dirname(path))}.{name}"
    return name


def nowhere_to_write(owner: str, path: Any, socket: Any, tcp: Any, sinks: Any) -> ValueError | None:
    """The error for a probe with no log file (``None`` or ``""``), no socket and no sink;
    ``None`` when it writes somewhere."""
    if path is AUTO or (path is not None and os.fspath(path)) or socket or tcp or sinks:
        return None
    return ValueError(
        f"{owner}(path=None) with socket=False has nowhere to write "
        "(an empty path is no path): "
        "give a log path (or leave the default), or socket=True"
    )
