"""Where the writer's lines end up: the ``Sink`` protocol and the log file.

Kept apart from the writer thread because a sink knows nothing of queues, builders
or threads: it takes one batch of complete lines and either writes it or raises, and
the writer decides what a failure costs (see ``writer.py``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import Protocol, runtime_checkable


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a directory" if stat.S_ISDIR(mode) else "a special file"


@runtime_checkable
class Sink(Protocol):
    """Where lines go: the log file, the live socket (``live.LiveSink``), a user's own sink.

    ``write`` receives complete lines only and may raise; the writer then drops
    the sink and warns once. ``flush(fsync)`` is optional.
    """

    def write(self, batch: bytes) -> None: ...

    def close(self) -> None: ...


class FileSink:
    """Append-only log file written with one ``os.write`` per batch (no user-space buffer).

    Because nothing is buffered in the process, a batch is on its way to disk as
    soon as it is written, and a SIGKILL loses at most what the writer had not
    yet picked up. A batch cut short (file size limit, disk full) keeps the
    complete lines that fitted and never ends in a partial line. Before each write the
    descriptor is checked to still be our file: user code that closes it (and
    perhaps opens something else on the same number) must not get our lines.
    """

    def __init__(self, path: str) -> None:
        folder = os.path.dirname(os.path.abspath(path))
        os.makedirs(folder, exist_ok=True)
        self.path = path
        # O_NONBLOCK: a FIFO at the log's path (no reader) would block this open, and with
        # it Probe.start, forever; a log is a regular file, anything else is refused
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK, 0o644)
        except OSError as e:
            if e.errno == errno.ENXIO:  # what a FIFO without a reader answers
                raise OSError(errno.ENXIO, "not a regular file (a FIFO)") from None
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(errno.EINVAL, f"not a regular file ({_kind(st.st_mode)})")
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        self.fd: int | None = fd
        self._ident = (st.st_dev, st.st_ino)

    def __repr__(self) -> str:
        return f"FileSink({self.path!r})"

    def _own_fd(self) -> tuple[int, int]:
        """Our descriptor and the file's size; raises when it is closed or no longer ours."""
        fd = self.fd
        if fd is None:
            raise OSError(errno.EBADF, "the log file is closed")
        try:
            st = os.fstat(fd)
        except OSError:
            self.fd = None  # closed by someone else: never touch that number again
            raise
        if (st.st_dev, st.st_ino) != self._ident:
            self.fd = None
            raise OSError(errno.EBADF, "the log's file descriptor was closed and reused")
        return fd, st.st_size

    def write(self, batch: bytes) -> None:
        fd, start = self._own_fd()
        view = memoryview(batch)
        done = 0
        try:
            while done < len(batch):
                done += os.write(fd, view[done:])
        except OSError:
            if done:
                # take back the partial line; the complete lines that fitted stay
                keep = batch.rfind(b"\n", 0, done) + 1
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, start + keep)
            raise

    def flush(self, fsync: bool = False) -> None:
        if fsync and self.fd is not None:
            fd, _ = self._own_fd()
            os.fsync(fd)

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is None:
            return
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) == self._ident:
                os.close(fd)
        except OSError:
            pass
