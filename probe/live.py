"""The probe's live socket: serve the run to viewers and announce it for discovery.

Opened once at ``Probe.start``: stale sockets of dead runs are swept, the server binds
``<rendezvous>/<run_id>.<pid>.sock`` (0600 in a 0700 directory; the name is shortened
when the path would not fit in an AF_UNIX address), and a small JSON beside it tells
``dltop`` / ``dltop ls`` whose run it is. It is a writer sink like the log file: the
writer thread hands it each batch; it never blocks. Any failure here costs the live
view, never the training: the caller warns once and goes on with the file.

The Unix socket and the TCP listener are separate choices (``unix=``, ``tcp=``): a TCP
spec that is malformed, or a port that cannot be bound, costs the TCP listener only,
with one warning; the Unix socket still serves the run. The socket and its entry are
removed at ``close``, and by the crash hooks (``rendezvous.remove_own``) when a fatal
signal ends the process before any ``close`` can run.

What the server turns away (a flood of connections, a 17th viewer, wrong tokens, a
process short of descriptors) and the errors it contained to one connection are said,
never silently: a ``warning`` event (``source: "live"``, with the counts) in the log the
first time (and once on stderr), again at most every ``NOTE_EVERY_S`` while the counts
grow, and a last one at close. Tokens: one shorter than ``MIN_TOKEN_CHARS`` is refused
(one warning, no TCP listener); a token is never printed, nor put in a command line we
suggest (``ps`` shows every process's argv to every local user).
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import rendezvous
from .admission import NOTE
from .encoding import encode_record
from .schema import EV_WARNING, EVENT
from .socket_server import SocketServer
from .viewerauth import MIN_TOKEN_CHARS, is_loopback, mask_secret

TOKEN_ENV = "DLTOP_TOKEN"
NOTE_EVERY_S = 60.0  # the live socket's counts go to the log at most this often


def parse_tcp(spec: str) -> tuple[str, int]:
    """``"HOST:PORT"`` (``[::1]:PORT`` for IPv6) to a bind address; ValueError with a hint."""
    host, sep, port = str(spec).rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"tcp={spec!r}: use 'HOST:PORT', e.g. '127.0.0.1:7007'")
    return host.strip("[]") or "127.0.0.1", int(port)


def _warn(message: str) -> None:
    try:
        sys.stderr.write(f"dltop: warning: {message}\n")
    except Exception:
        pass


class LiveSink:
    """A :class:`SocketServer` plus its rendezvous entry, shaped as a writer sink.

    Raises (and leaves nothing behind) only when nothing at all can be served.
    """

    def __init__(
        self, key: str, meta: dict[str, Any], tcp: str | None = None, unix: bool = True
    ) -> None:
        self.key = key  # unique per process: two runs may share a log name
        self.token: str | None = None
        self._token_from_env = False
        self.path: str | None = None
        self._dir: Path | None = None
        self._registered = False
        self._reported = False
        # where the socket's notes go (the writer's emit, set by lifecycle.attach_notes)
        self.notify: Callable[[dict[str, Any]], None] | None = None
        self._noted: tuple[int, int] = (0, 0)  # the counts last said
        self._noted_at: float | None = None
        self.notes = 0  # notes written
        self._note_lock = threading.Lock()  # the writer thread and close() both may note
        address = self._tcp_address(tcp, unix)
        if unix:
            rendezvous.cleanup_stale()
            try:
                self._dir = rendezvous.runtime_dir()
            except rendezvous.RendezvousError as exc:
                if address is None:
                    raise
                _warn(f"no Unix socket for this run ({exc}); serving on TCP only")
            else:
                self.path = str(rendezvous.socket_path(key, self._dir))
        if self.path is None and address is None:
            raise ValueError("neither a Unix socket nor a TCP address to serve on")
        self.server = self._serve(meta, address)
        address = self.server.tcp_address
        served = None  # "HOST:PORT" as bound (port 0 asks for any free one)
        if address is not None:
            host = f"[{address[0]}]" if ":" in address[0] else address[0]
            served = f"{host}:{self.server.bound_port}"
        if self.path is not None:
            try:
                rendezvous.register(
                    key,
                    {
                        "run_id": meta.get("run_id") or key,
                        "pid": os.getpid(),
                        "host": socket.gethostname(),
                        "started": meta.get("t") or time.time(),
                        "log_path": meta.get("log_path"),
                        "argv": meta.get("argv"),
                        "tcp": served,
                    },
                    self._dir,
                )
                self._registered = True
            except BaseException:
                self.server.close(timeout=0.2)  # an unannounced socket is of no use
                raise
        if served is not None:
            sys.stderr.write(f"dltop: serving this run on tcp://{served}{self._token_note()}\n")

    def _token_note(self) -> str:
        """Where the viewer gets the token: never the token itself on a terminal or in a
        log (stderr often lands in a shared job log). A generated one goes to a 0600 file
        in the private run directory; one from ``$DLTOP_TOKEN`` the user already has."""
        if not self.token:
            return ""
        if self._token_from_env:
            return f" (token from ${TOKEN_ENV}: {mask_secret(self.token)})"
        if self._dir is not None:
            try:
                path = rendezvous.write_token(self.key, self.token, self._dir)
            except OSError as exc:
                _warn(f"could not write the token file ({exc})")
            else:
                # the viewer reads it from its environment: never from its argv (``ps``)
                return (
                    f" (token {mask_secret(self.token)} in {path}; view with: "
                    f"DLTOP_TOKEN=$(cat {path}) dltop tcp://HOST:PORT)"
                )
        return (
            f" (generated token {mask_secret(self.token)}, not shown: set ${TOKEN_ENV} "
            "before the run to choose one)"
        )

    def _tcp_address(self, tcp: str | None, unix: bool) -> tuple[str, int] | None:
        """The TCP bind address and its token; a bad spec costs the TCP listener only."""
        if not tcp:
            return None
        try:
            address = parse_tcp(tcp)
        except ValueError as exc:
            if not unix:
                raise
            _warn(f"{exc}; no TCP listener, the Unix socket still serves this run")
            return None
        # a token set explicitly is enforced on any address, loopback included; without
        # one, loopback needs none and any other address gets a generated one
        self.token = os.environ.get(TOKEN_ENV) or None
        self._token_from_env = self.token is not None
        if self.token is not None and len(self.token) < MIN_TOKEN_CHARS:
            # a short token is a guessable one: no TCP rather than a weak lock
            message = (
                f"${TOKEN_ENV} is too short ({len(self.token)} characters, at least "
                f"{MIN_TOKEN_CHARS}; e.g. python -c 'import secrets; "
                "print(secrets.token_urlsafe(16))'): no TCP listener"
            )
            self.token = None
            self._token_from_env = False
            if not unix:
                raise ValueError(message)
            _warn(f"{message}; the Unix socket still serves this run")
            return None
        if self.token is None and not is_loopback(address[0]):
            self.token = secrets.token_urlsafe(16)
        return address

    def _serve(self, meta: dict[str, Any], address: tuple[str, int] | None) -> SocketServer:
        """Start the server; when both were asked for and one of the two binds fails (a
        TCP port in use, a socket path refused), serve on the other, with one warning."""
        meta_line = encode_record(meta)
        server = SocketServer(self.path, tcp=address, token=self.token)
        try:
            server.start(meta_line)  # a failed start has closed and removed what it bound
        except OSError as exc:
            if address is None or self.path is None:
                raise
            why = exc.strerror or str(exc)
            if server.failed_on == "tcp":
                _warn(
                    f"cannot serve on tcp://{address[0]}:{address[1]} ({why}); "
                    "the Unix socket still serves this run"
                )
                self.token = None
                server = SocketServer(self.path)
            else:
                _warn(f"no Unix socket for this run ({why}); serving on TCP only")
                self.path = None
                server = SocketServer(None, tcp=address, token=self.token)
            server.start(meta_line)
        return server

    def write(self, batch: bytes) -> None:
        server = self.server
        if server.error is not None:
            # the server thread died: raising makes the writer drop this sink, warn once
            # and close it (which removes the socket and its entry); nothing piles up
            if self._reported:
                return
            self._reported = True
            raise OSError(f"the live socket server stopped ({server.error!r})")
        server.write(batch)
        if self.notify is not None:
            self._note(final=False)

    def _note(self, final: bool) -> dict[str, Any] | None:
        """Say what the server turned away or dropped since the last note: at once the
        first time, then at most every ``NOTE_EVERY_S`` (``final``: now, at close)."""
        server = self.server
        counts = (server.refusals.version, server.connection_errors)
        if counts == self._noted:
            return None
        now = time.monotonic()
        if not final and self._noted_at is not None and now - self._noted_at < NOTE_EVERY_S:
            return None
        with self._note_lock:
            if counts == self._noted:
                return None
            self._noted, self._noted_at = counts, now
            record = self.note_record()
            self.notes += 1
        if self.notes == 1:
            _warn(f"{record['message']} (more in the log)")
        if not final and self.notify is not None:
            try:
                self.notify(record)
            except Exception:
                pass
        return record

    def notes_to(self, emit: Callable[[dict[str, Any]], None]) -> None:
        """Where the notes go from now on: the writer's ``emit`` (``lifecycle.attach_notes``)."""
        self.notify = emit

    def closing_note(self) -> dict[str, Any] | None:
        """The counts not yet said, for the log just before its ``exit`` record."""
        try:
            return self._note(final=True)
        except Exception:
            return None

    def note_record(self) -> dict[str, Any]:
        """The ``warning`` event with the server's counts so far (``source: "live"``)."""
        server = self.server
        ref = server.refusals
        counts = dict(ref.counts)
        total = sum(counts.values())
        parts = [f"{n} {NOTE[reason]}" for reason, n in counts.items() if n]
        said = []
        if total:
            said.append(f"turned away {total} connection(s): " + ", ".join(parts))
        if ref.evicted:
            said.append(f"closed {ref.evicted} stuck viewer(s) to make room")
        if ref.accept_errors:
            said.append(f"could not accept {ref.accept_errors} time(s) (out of descriptors)")
        errors = server.connection_errors
        if errors:
            first = server.first_connection_error
            said.append(
                f"dropped {errors} connection(s) after an unexpected error"
                + (f" (first: {type(first).__name__})" if first is not None else "")
            )
        return {
            "kind": EVENT,
            "type": EV_WARNING,
            "t": time.time(),
            "source": "live",
            "message": "the live socket " + "; ".join(said) + "; the training goes on",
            "connections_refused": total,
            "refused": counts,
            "viewers_evicted": ref.evicted,
            "accept_errors": ref.accept_errors,
            "connection_errors": errors,
        }

    def close(self) -> None:
        self.server.close()
        if self._registered:
            self._registered = False
            rendezvous.unregister(self.key, self._dir)

    def __repr__(self) -> str:
        where = self.path or "tcp://%s:%s" % (self.server.tcp_address or ("?", "?"))
        return f"LiveSink({where!r})"
