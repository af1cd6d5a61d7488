"""Talking to a live run's socket: addresses, connecting, and a quick peek.

Addresses are ``unix:PATH`` or ``tcp://HOST:PORT[?token=...]`` (the token may also
come from ``$DLTOP_TOKEN``). A TCP viewer sends its token as its first line; a
Unix-socket viewer needs none (the socket is 0600 in a 0700 directory).
"""

from __future__ import annotations

import json
import math
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from ....probe.schema import EV_REFUSED, Record, Records, as_step
from ....probe.viewerauth import is_loopback
from ..files.logbytes import decoder
from ..text.redact import redact
from .reader import ReaderThread

if TYPE_CHECKING:
    from ..store.run import RunModel
    from .filesource import FileSource


__all__ = [
    "Address",
    "SocketSource",
    "StreamError",
    "connect",
    "is_stream_spec",
    "parse_address",
    "peek",
    "redact",  # tui/core/text/redact.py: how an address may be said
    "refusal",
]


class StreamError(OSError):
    """A live source that cannot be reached or refused us; the message is one line."""


@dataclass(frozen=True)
class Address:
    kind: str  # "unix" or "tcp"
    path: str = ""
    host: str = ""
    port: int = 0
    token: str | None = None

    def __str__(self) -> str:
        if self.kind == "unix":
            return f"unix:{self.path}"
        host = f"[{self.host}]" if ":" in self.host else self.host  # IPv6, as it was typed
        return f"tcp://{host}:{self.port}"


def is_stream_spec(spec: str) -> bool:
    return spec.startswith(("unix:", "tcp://"))


def parse_address(spec: str) -> Address:
    """``unix:PATH`` or ``tcp://HOST:PORT?token=T``; raises StreamError with a hint."""
    if spec.startswith("unix:"):
        path = spec[len("unix:") :]
        if not path:
            raise StreamError("empty socket path: use unix:/path/to/run.sock (see `dltop ls`)")
        return Address("unix", path=os.path.expanduser(path))
    if spec.startswith("tcp://"):
        hint = "use tcp://HOST:PORT[?token=...], IPv6 as tcp://[::1]:PORT"
        try:
            parts = urlsplit(spec)  # ValueError on a broken IPv6 literal: tcp://[::1
            port = parts.port  # ValueError on a port that is not a number, or too big
            host = parts.hostname
        except ValueError:
            raise StreamError(f"bad address {redact(spec)!r}: {hint}") from None
        if not host or not port:
            raise StreamError(f"bad address {redact(spec)!r}: {hint}")
        token = parse_qs(parts.query).get("token", [None])[0] or os.environ.get("DLTOP_TOKEN")
        return Address("tcp", host=host, port=port, token=token)
    raise StreamError(f"not a stream address: {redact(spec)!r} (use unix:PATH or tcp://HOST:PORT)")


def connect(addr: Address, timeout: float = 2.0) -> socket.socket:
    """An open, blocking socket to the run, the TCP token already sent."""
    try:
        if addr.kind == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(addr.path)
        else:
            sock = socket.create_connection((addr.host, addr.port), timeout=timeout)
            sock.sendall(json.dumps({"token": addr.token or ""}).encode() + b"\n")
    except FileNotFoundError as exc:
        raise StreamError(f"no such socket: {addr} (the run has ended? try `dltop ls`)") from exc
    except ConnectionRefusedError as exc:
        raise StreamError(f"nothing listens at {addr} (the run has ended? try `dltop ls`)") from exc
    except OSError as exc:
        raise StreamError(f"cannot connect to {addr}: {exc.strerror or exc}") from exc
    return sock


def refusal(record: Record) -> str | None:
    """The server's refusal message, when ``record`` is one."""
    if record.get("kind") == "event" and record.get("type") == EV_REFUSED:
        return str(record.get("message") or "refused by the run")
    return None


def peek(addr: Address, timeout: float = 0.5) -> Records:
    """What a run serves a new viewer right away (meta + backlog), read for ``timeout`` s.

    The backlog ends where the live stream begins, and the server sends no mark between
    them: a pause of 50 ms ends the read, and so does the first record written after we
    connected (its ``t`` at or past our clock), where the run's clock is ours: a unix
    socket, a loopback address. Without the second test a run streaming faster than one
    record per 50 ms kept ``dltop ls`` and a bare ``dltop`` reading until the timeout; a
    remote clock running ahead would end the read inside the backlog."""
    same_clock = addr.kind == "unix" or is_loopback(addr.host)
    connected = time.time() if same_clock else math.inf
    sock = connect(addr, timeout=timeout)
    dec = decoder()
    out: Records = []
    deadline = time.monotonic() + timeout
    try:
        sock.settimeout(0.05)
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(1 << 20)
            except TimeoutError:
                if out:
                    break  # the backlog has arrived; live records are not needed here
                continue
            if not chunk:
                break
            fresh = dec.feed(chunk)
            out.extend(fresh)
            t = fresh[-1].get("t") if fresh else None
            if type(t) is float and t >= connected and len(out) > 1:
                break  # live records: the backlog is all here
    finally:
        sock.close()
    for rec in out[:1]:
        msg = refusal(rec)
        if msg:
            raise StreamError(f"{addr} refused the connection: {msg}")
    return out


class SocketSource(ReaderThread):
    """Follows a live run's socket into a RunModel on a reader thread.

    Shaped like :class:`~dltop.tui.core.sources.filesource.FileSource` (start / stop / run /
    caught_up / error), so the app does not care where records come from. When the
    connection drops it reconnects with backoff (a restarted run at the same address is
    a new run: the model is reset when its ``meta`` names another run id); when the
    run's log file is readable here it switches to the file instead, which holds the
    whole history, not just the socket's bounded backlog.
    """

    thread_name = "dltop-socket-reader"

    def __init__(
        self,
        address: Address | str,
        model: RunModel,
        on_update: Callable[[int], Any] | None = None,
        *,
        reconnect: bool = True,
        fallback_to_file: bool = True,
        poll_interval: float = 0.2,
        backoff_max: float = 5.0,
    ) -> None:
        self.address = parse_address(address) if isinstance(address, str) else address
        self.model = model
        self.on_update = on_update
        self.reconnect = reconnect
        self.fallback_to_file = fallback_to_file
        self.poll_interval = poll_interval
        self.backoff_max = backoff_max
        self.error: str | None = None
        self.connected = threading.Event()
        self._init_reader()  # caught_up: set once the backlog has been read
        self.connections = 0
        self.received = 0  # records read from the socket (before skipping replays)
        self.dropped = 0  # records the run skipped for us because we fell behind
        self.file_source: FileSource | None = None  # the FileSource we switched to, if any
        self._run_meta: Record | None = None  # the meta of the run we are showing
        # where we are in the run, so a reconnect can skip the backlog we already have
        self._last_rec: Record | None = None  # the newest record ingested
        self._max_t = float("-inf")  # the largest "t" ingested
        self._skipping = False  # reading a replayed backlog after a reconnect

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the reader, and the file source it switched to when the socket closed."""
        self._stop.set()
        if self.file_source is not None:
            self.file_source.stop(timeout)
        self._join(timeout)

    def run(self) -> None:
        delay = 0.1
        while not self._stop.is_set():
            try:
                sock = connect(self.address)
            except StreamError as exc:
                if self._switch_to_file():
                    return
                if not self.reconnect or self.connections == 0:
                    self._fail(str(exc))
                    return
                self._stop.wait(delay)
                delay = min(delay * 2, self.backoff_max)
                continue
            self.connections += 1
            self.connected.set()
            before = self.received
            try:
                if not self._stream(sock):
                    return
            finally:
                self.connected.clear()
                sock.close()
            if not self.reconnect or self._switch_to_file():
                return
            if self.received > before:
                delay = 0.1  # it streamed: a later drop starts the backoff over
            else:  # accepted, then closed at once (an ssh forward whose far end is gone)
                self._stop.wait(delay)
                delay = min(delay * 2, self.backoff_max)
        self.caught_up.set()

    def _stream(self, sock: socket.socket) -> bool:
        """Read until the connection ends; False when we must not reconnect (refused)."""
        dec = decoder()
        sock.settimeout(self.poll_interval)
        first = True
        while not self._stop.is_set():
            try:
                chunk = sock.recv(1 << 20)
            except TimeoutError:
                self.caught_up.set()
                continue
            except OSError:
                return True
            if not chunk:
                return True
            records = dec.feed(chunk)
            self.received += len(records)
            if first and records:
                first = False
                msg = refusal(records[0])
                if msg:
                    self._fail(f"{self.address} refused the connection: {msg}")
                    return False
                records = self._start_of_stream(records)
            records = self._fresh(records)
            if records:
                self.model.ingest(records, malformed=dec.malformed)
                self._notify(len(records))
        return False

    def _start_of_stream(self, records: Records) -> Records:
        """A new connection opens with the run's meta: same run (a reconnect) or a new one."""
        meta = records[0] if records[0].get("kind") == "meta" else None
        if meta is None:
            return records
        # the whole meta (pid and start time too), not just the run id: a training started
        # again with the same log path has the same run id, and is still a new run
        if self._run_meta is not None and meta == self._run_meta:
            self._skipping = self._last_rec is not None  # its backlog overlaps what we have
            return records[1:]
        if self._run_meta is not None:
            self.model.reset(f"a new run started at {self.address}")
        self._last_rec, self._max_t, self._skipping = None, float("-inf"), False
        self._run_meta = meta
        return records

    def _fresh(self, records: Records) -> Records:
        """Drop what we already have (a reconnect replays the backlog) and count drops.

        Records are not in ``t`` order (a ``sys`` record is stamped on the sampler thread
        before a step that is queued ahead of it), so ``t`` alone cannot tell old from
        new: after a reconnect we skip up to the last record we ingested, or up to the
        first one newer than anything we had when the backlog no longer reaches back
        that far.
        """
        if self._skipping:
            records = self._skip_replayed(records)
        for rec in records:
            if (
                rec.get("kind") == "event"
                and rec.get("type") == "dropped"
                and rec.get("scope") != "log"
            ):
                self.dropped += max(0, as_step(rec.get("records")) or 0)
                continue  # the server's note to this viewer only: never in a backlog
            t = rec.get("t")
            if isinstance(t, (int, float)) and t > self._max_t:
                self._max_t = t
            self._last_rec = rec
        return records

    def _skip_replayed(self, records: Records) -> Records:
        for i, rec in enumerate(records):
            if rec == self._last_rec:
                self._skipping = False
                return records[i + 1 :]
            t = rec.get("t")
            if isinstance(t, (int, float)) and t > self._max_t:
                self._skipping = False  # the replay starts after our last record: a gap
                return records[i:]
        return []

    def _switch_to_file(self) -> bool:
        """Follow the run's log file when the socket is gone and the file is here."""
        if not self.fallback_to_file or self._stop.is_set():
            return False
        meta = self.model.meta or {}
        path = meta.get("log_path")  # a peer's word: a path only when it is text
        if (
            not isinstance(path, str)
            or not path
            or meta.get("host") not in (None, socket.gethostname())
        ):
            return False
        if not os.path.isfile(path):
            return False
        from .filesource import FileSource, SourceError

        try:
            source = FileSource(path, self.model, self.on_update)
        except SourceError:
            return False
        # the same run with its fuller history: not a restart to flag ("restarted x1")
        self.model.reset(f"the run's socket closed; following its log {path}", restart=False)
        self.file_source = source
        self.caught_up.set()
        source.run()
        return True

    def _notify(self, n: int) -> None:
        if self.on_update is not None:
            try:
                self.on_update(n)
            except Exception:  # the UI is gone: stop quietly (no error to show anyone)
                self._stop.set()

    def _fail(self, message: str) -> None:
        super()._fail(message)
        self.caught_up.set()  # nothing more to wait for
