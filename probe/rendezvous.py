"""Where live runs announce themselves, so that a bare ``dltop`` can find them.

Each run with a live socket owns two files in a per-user private directory:
``<name>.sock`` (the Unix socket, mode 0600) and ``<name>.json`` (who and where: the
full run id, pid, host, log path, start time). ``<name>`` is the run's key
(``<run_id>.<pid>``), cut and suffixed with a hash when the socket's path would pass
the AF_UNIX limit (about 107 bytes): a long log name still gets its live socket. The directory is
``$XDG_RUNTIME_DIR/dltop`` when that exists, else ``/tmp/dltop-<uid>``, created
0700; a directory that is not ours or is open to others is refused rather than
used, since a socket there could be read or replaced by another user.

Nothing here ever opens a special file: an entry is read only when it is a regular
file (``lstat`` first, then opened with ``O_NONBLOCK`` and checked again with ``fstat``)
and at most ``ENTRY_MAX`` bytes; a FIFO named ``*.json`` in the directory hung every new
probe's start (and ``dltop ls``) in ``open()``, waiting for a writer. Our own files are
created afresh (``O_EXCL``), never opened over whatever has the name.

The viewer imports this module too (it is stdlib-only, like the schema).
"""

from __future__ import annotations

import hashlib
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
# sun_path is 108 bytes on Linux and 104 on macOS, the terminating NUL included
MAX_SOCKET_PATH = 100
ENTRY_MAX = 64 << 10  # bytes of a run's .json read at most (ours are a few hundred)

# entries this process announced: (json path, socket path, pid), for removal at a fatal
# signal, when no ``close`` will run (see ``remove_own``)
_OWN: dict[str, tuple[str, int]] = {}


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


def entry_name(key: str, directory: Path) -> str:
    """The file name (without suffix) of ``key``'s socket and ``.json`` in ``directory``.

    ``key`` itself when ``<directory>/<key>.sock`` fits in an AF_UNIX address; else a
    prefix of it plus a hash of all of it (unique per key, stable, readable at a glance).
    The ``.json`` holds the full run id either way.
    """
    # a run id is the user's text: "exp/seed1" named a folder that does not exist, and the
    # run had no socket; a separator or NUL becomes "_" (the .json keeps the real id)
    key = key.replace("/", "_").replace("\0", "_").replace(os.sep, "_")
    if key in ("", ".", ".."):
        key = f"_{key}"
    room = MAX_SOCKET_PATH - len(os.fsencode(directory)) - len(b"/.sock")
    raw = key.encode("utf-8", "surrogateescape")
    if len(raw) <= min(room, 200):
        return key
    digest = hashlib.sha256(raw).hexdigest()[:16]
    keep = max(0, min(room, 200) - len(digest) - 1)
    prefix = raw[:keep].decode("utf-8", "ignore")  # never cut a character in half
    return f"{prefix}~{digest}"


def socket_path(key: str, directory: Path | None = None) -> Path:
    d = directory or runtime_dir()
    return d / f"{entry_name(key, d)}.sock"


def read_regular(path: Path | str, limit: int = ENTRY_MAX) -> bytes | None:
    """The content of ``path`` when it is a regular file of at most ``limit`` bytes, else
    None; never blocks. A FIFO, socket or device is skipped without being opened (and,
    should it replace the file between the ``lstat`` and the ``open``, closed unread:
    ``O_NONBLOCK`` makes the open of a FIFO return at once); a symlink is not followed."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(path, flags | getattr(os, "O_NOCTTY", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        data = os.read(fd, limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= limit else None  # it grew meanwhile


def _create(path: Path, mode: int) -> int:
    """A new file at ``path`` for writing, whatever was there before (a FIFO left under
    our name would block an ``O_WRONLY`` open until a reader came): it is removed first,
    and ``O_EXCL`` makes sure the file written is the one just created."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)


def register(key: str, info: dict[str, Any], directory: Path | None = None) -> Path:
    """Write the run's ``.json`` beside its socket (atomically) and return its path."""
    d = directory or runtime_dir()
    name = entry_name(key, d)
    target = d / f"{name}.json"
    tmp = d / f".{name}.json.tmp"
    fd = _create(tmp, SOCK_MODE)
    with os.fdopen(fd, "w") as f:
        json.dump(info, f)
    os.replace(tmp, target)
    _OWN[str(target)] = (str(d / f"{name}.sock"), os.getpid())
    return target


def write_token(key: str, token: str, directory: Path | None = None) -> Path:
    """The run's generated TCP token in a 0600 file beside its socket (the directory is
    0700): the way to hand it to a viewer without printing it. Removed with the entry."""
    d = directory or runtime_dir()
    target = d / f"{entry_name(key, d)}.token"
    fd = _create(target, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return target


def unregister(key: str, directory: Path | None = None) -> None:
    """Remove the run's socket and ``.json``; missing files are fine."""
    d = directory or runtime_dir(create=False)
    _remove(d, entry_name(key, d))


def _remove(d: Path, name: str) -> None:
    _OWN.pop(str(d / f"{name}.json"), None)
    for suffix in (".sock", ".json", ".token"):
        try:
            (d / f"{name}{suffix}").unlink()
        except OSError:
            pass


def remove_own() -> None:
    """Remove the sockets and entries this process announced, now.

    For a death that skips every ``close``: a fatal signal re-delivered by the crash
    hooks, which ends the process without unwinding. The sockets stop being found; the
    servers, if the process lived on, would keep serving viewers already connected. A
    forked child (a DataLoader worker) inherits the table, not the entries: it removes
    nothing. Signal-handler safe: no allocation beyond a few strings, no locks.
    """
    pid = os.getpid()
    for meta, (sock, owner) in list(_OWN.items()):
        if owner != pid:
            continue
        _OWN.pop(meta, None)
        for path in (sock, meta, meta[: -len(".json")] + ".token"):
            try:
                os.unlink(path)
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


def finite_number(value: Any) -> float | None:
    """A finite int or float (not a bool), else None: entries are checked, never trusted."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value == value and abs(value) != float("inf") else None


def list_runs(directory: Path | None = None, cleanup: bool = True) -> list[dict[str, Any]]:
    """Live runs on this host, newest first; stale entries of dead processes are removed.

    Each entry is the registered info plus ``socket`` (path), ``key`` and ``run_id``.
    An entry that is not what the probe writes (a pid that is not a positive int, say)
    is skipped, never fatal: ``pid`` is an int and ``started`` a number or None in what
    this returns.
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
        name = meta_file.stem
        raw = read_regular(meta_file)  # a FIFO or a device here is skipped, never opened
        if raw is None:
            continue
        try:
            info = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        if not isinstance(info, dict):
            continue
        pid = info.get("pid")
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
            continue  # not written by a probe: nothing to judge it by, leave it be
        info["started"] = finite_number(info.get("started"))
        if not isinstance(info.get("run_id"), str):
            info.pop("run_id", None)
        sock = d / f"{name}.sock"
        local = info.get("host") in (None, host)
        alive = pid_alive(pid) if local else True
        if not alive or not sock.exists():
            if cleanup and local and not alive:
                _remove(d, name)
            continue
        info.setdefault("run_id", name)
        info.update(key=name, socket=str(sock))
        runs.append(info)
    runs.sort(key=lambda r: r["started"] or 0.0, reverse=True)
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
