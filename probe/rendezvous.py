"""Where live runs announce themselves, so that a bare ``dltop`` can find them.

Each run with a live socket owns two files in a per-user private directory:
``<run_id>.sock`` (the Unix socket, mode 0600) and ``<run_id>.json`` (who and
where: pid, host, log path, start time). The directory is
``$XDG_RUNTIME_DIR/dltop`` when that exists, else ``/tmp/dltop-<uid>``, created
0700; a directory that is not ours or is open to others is refused rather than
used, since a socket there could be read or replaced by another user.

The viewer imports this module too (it is stdlib-only, like the schema).
"""

from __future__ import annotations

import json
import os
import socket
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

DIR_MODE = 0o700
SOCK_MODE = 0o600


class RendezvousError(OSError):
    """The private run directory cannot be used safely."""


def runtime_dir(create: bool = True) -> Path:
    """The per-user private directory for live runs, made 0700 if needed.

    Raises :class:`RendezvousError` when the directory exists but is not ours or is
    accessible to others.
    """
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base and os.path.isdir(base) and os.access(base, os.W_OK | os.X_OK):
        path = Path(base) / "dltop"
    else:
        path = Path(tempfile.gettempdir()) / f"dltop-{os.getuid()}"
    if create:
        try:
            path.mkdir(mode=DIR_MODE, exist_ok=True)
        except OSError as exc:
            raise RendezvousError(f"cannot create {path}: {exc.strerror}") from exc
    if path.exists():
        st = path.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            raise RendezvousError(f"{path} is not a directory owned by you; remove it")
        if st.st_mode & 0o077:
            raise RendezvousError(f"{path} is accessible to other users; chmod 700 it")
    return path


def socket_path(run_id: str, directory: Path | None = None) -> Path:
    return (directory or runtime_dir()) / f"{run_id}.sock"


def register(run_id: str, info: dict[str, Any], directory: Path | None = None) -> Path:
    """Write the run's ``.json`` beside its socket (atomically) and return its path."""
    d = directory or runtime_dir()
    target = d / f"{run_id}.json"
    tmp = d / f".{run_id}.json.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, SOCK_MODE)
    with os.fdopen(fd, "w") as f:
        json.dump(info, f)
    os.replace(tmp, target)
    return target


def unregister(run_id: str, directory: Path | None = None) -> None:
    """Remove the run's socket and ``.json``; missing files are fine."""
    d = directory or runtime_dir(create=False)
    for suffix in (".sock", ".json"):
        try:
            (d / f"{run_id}{suffix}").unlink()
        except OSError:
            pass


def pid_alive(pid: int) -> bool:
    """Whether a local process with this pid exists (permission denied counts as alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def list_runs(directory: Path | None = None, cleanup: bool = True) -> list[dict[str, Any]]:
    """Live runs on this host, newest first; stale entries of dead processes are removed.

    Each entry is the registered info plus ``socket`` (path) and ``run_id``.
    """
    try:
        d = directory or runtime_dir(create=False)
    except RendezvousError:
        return []
    if not d.is_dir():
        return []
    host = socket.gethostname()
    runs: list[dict[str, Any]] = []
    for meta_file in d.glob("*.json"):
        run_id = meta_file.stem
        try:
            info = json.loads(meta_file.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(info, dict):
            continue
        sock = d / f"{run_id}.sock"
        local = info.get("host") in (None, host)
        alive = pid_alive(int(info.get("pid") or 0)) if local else True
        if not alive or not sock.exists():
            if cleanup and local and not alive:
                unregister(run_id, d)
            continue
        info.setdefault("run_id", run_id)
        info.update(key=run_id, socket=str(sock))
        runs.append(info)
    runs.sort(key=lambda r: r.get("started") or 0, reverse=True)
    return runs


def cleanup_stale(directory: Path | None = None) -> int:
    """Remove sockets and entries left by dead processes; returns how many files went."""
    try:
        d = directory or runtime_dir(create=False)
    except RendezvousError:
        return 0
    if not d.is_dir():
        return 0
    before = {p.name for p in d.iterdir()}
    live = {r["key"] for r in list_runs(d, cleanup=True)}
    # a socket with no .json at all (a crash between bind and register) is stale too,
    # unless it is young: its run may be registering right now
    for sock in d.glob("*.sock"):
        if sock.stem in live or (d / f"{sock.stem}.json").exists():
            continue
        try:
            if time.time() - sock.lstat().st_mtime >= 30:
                sock.unlink()
        except OSError:
            pass
    return len(before - {p.name for p in d.iterdir()})
