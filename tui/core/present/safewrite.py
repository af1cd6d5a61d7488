"""Writing files where someone else may have planted a symlink: refused, never followed.

Why: ``dltop report`` writes ``<log>.report.md`` and its charts in ``<log>.report/``,
beside a log that may sit in a shared folder. A ``<log>.report`` planted there as a
symlink to another folder made the report overwrite that folder's ``loss.svg`` and
company (issue 29); a symlink planted as one of the chart files would do the same to
its target. So the charts' folder is opened with ``O_NOFOLLOW | O_DIRECTORY`` (a
symlink there, or one swapped in after we made the folder, fails the open), every file
is created beside its final name with ``O_CREAT | O_EXCL | O_NOFOLLOW`` relative to that
open folder, and renamed over its name only when that name is absent or a regular
file: a symlink (or a FIFO, a device) in its place is refused with an ``OSError`` that
says so in one line. Each file is written whole or not at all.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
PLANTED = (
    "is a symbolic link (refused: writing through it would overwrite files elsewhere; remove it)"
)


def _refused(path: str, why: str, code: int = errno.ELOOP) -> OSError:
    return OSError(code, why, path)


def open_folder(path: str, create: bool) -> int:
    """A descriptor on the directory ``path`` itself, never on where a symlink there
    points; made (0o777 & ~umask) when absent and ``create``. The caller closes it."""
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise _refused(path, "no such directory", errno.ENOENT) from None
    if stat.S_ISLNK(st.st_mode):
        raise _refused(path, PLANTED)
    if not stat.S_ISDIR(st.st_mode):
        raise _refused(path, "not a directory", errno.ENOTDIR)
    try:
        return os.open(path, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # swapped for a link after the lstat
            raise _refused(path, PLANTED) from None
        raise


def check_target(folder_fd: int, name: str, shown: str) -> None:
    """Refuse ``name`` in the open folder unless it is absent or a regular file
    (``shown``: its path, for the message)."""
    try:
        st = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise _refused(shown, PLANTED)
    if not stat.S_ISREG(st.st_mode):
        raise _refused(shown, "not a regular file", errno.EINVAL)


def write_in(folder_fd: int, name: str, text: str, shown: str, mode: int = 0o644) -> None:
    """``text`` as the file ``name`` of the open folder: a new file beside it, renamed
    over it; refused when a symlink or special file is in its place."""
    check_target(folder_fd, name, shown)
    tmp = f".dltop-report-{secrets.token_hex(8)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
    fd = os.open(tmp, flags, mode & ~_umask(), dir_fd=folder_fd)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace", newline="\n") as f:
            f.write(text)
        check_target(folder_fd, name, shown)  # planted while we wrote: still refused
        os.replace(tmp, name, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=folder_fd)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
