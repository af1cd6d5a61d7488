"""The listening sockets of the live server, bound so that a failure leaves nothing behind.

A socket file left by a failed bind would be found by ``dltop ls`` and refuse every
viewer, and a descriptor leaked per failed TCP bind adds up over restarts: each
function closes (and unlinks) what it made before the error goes on. The listen queue
is ``LISTEN_BACKLOG`` deep (it was 16: a burst of connections shut real viewers out while
it lasted); the kernel caps it at ``net.core.somaxconn``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket

from .admission import LISTEN_BACKLOG


def bind_unix(path: str) -> socket.socket:
    """A listening socket at ``path``, 0600 from birth; a file left by a dead run is replaced,
    one a live run still answers on is refused (``EADDRINUSE``)."""
    if os.path.exists(path):
        # a socket left by a dead process: refuse only if something still answers
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except OSError:
            os.unlink(path)
        else:
            probe.close()
            raise OSError(errno.EADDRINUSE, f"a live run already serves {path}")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # the socket is created 0600, never briefly wider
    try:
        sock.bind(path)
    except BaseException:
        sock.close()
        raise
    finally:
        os.umask(old)
    try:
        os.chmod(path, 0o600)
        sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    return sock


def bind_tcp(host: str, port: int) -> socket.socket:
    """A listening TCP socket; ``SO_REUSEADDR`` so that a restarted run gets its port back."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()  # no descriptor leaks from a port in use
        raise
    return sock
