"""The probe's live socket: serve the run to viewers and announce it for discovery.

Opened once at ``Probe.start``: stale sockets of dead runs are swept, the server binds
``<rendezvous>/<run_id>.<pid>.sock`` (0600 in a 0700 directory), and a small JSON beside it
tells ``dltop`` / ``dltop ls`` whose run it is. It is a writer sink like the log file:
the writer thread hands it each batch; it never blocks. Any failure here costs the
live view, never the training: the caller warns once and goes on with the file.
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
import time
from typing import Any

from dltop.probe import rendezvous
from dltop.probe.schema import encode_record
from dltop.probe.socket_server import SocketServer, is_loopback

TOKEN_ENV = "DLTOP_TOKEN"


def parse_tcp(spec: str) -> tuple[str, int]:
    """``"HOST:PORT"`` (``[::1]:PORT`` for IPv6) to a bind address; ValueError with a hint."""
    host, sep, port = spec.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"tcp={spec!r}: use 'HOST:PORT', e.g. '127.0.0.1:7007'")
    return host.strip("[]") or "127.0.0.1", int(port)


class LiveSink:
    """A :class:`SocketServer` plus its rendezvous entry, shaped as a writer sink."""

    def __init__(self, key: str, meta: dict[str, Any], tcp: str | None = None) -> None:
        self.key = key  # unique per process: two runs may share a log name
        self.token: str | None = None
        rendezvous.cleanup_stale()
        self.path = str(rendezvous.socket_path(key))
        address = None
        if tcp:
            address = parse_tcp(tcp)
            if not is_loopback(address[0]):
                self.token = os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(16)
        self.server = SocketServer(self.path, tcp=address, token=self.token)
        self.server.start(encode_record(meta))
        self._registered = True
        rendezvous.register(
            key,
            {
                "run_id": meta.get("run_id") or key,
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "started": meta.get("t") or time.time(),
                "log_path": meta.get("log_path"),
                "argv": meta.get("argv"),
                "tcp": tcp,
            },
        )
        if address is not None:
            port = self.server.bound_port
            query = f"?token={self.token}" if self.token else ""
            sys.stderr.write(f"dltop: serving this run on tcp://{address[0]}:{port}{query}\n")

    def write(self, batch: bytes) -> None:
        self.server.write(batch)

    def close(self) -> None:
        self.server.close()
        if self._registered:
            self._registered = False
            rendezvous.unregister(self.key)

    def __repr__(self) -> str:
        return f"LiveSink({self.path!r})"
