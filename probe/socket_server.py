"""Serves a run's records live to any number of viewers, without ever blocking training.

The writer thread hands each batch of complete JSON lines to :meth:`SocketServer.write`,
which only appends to a queue and pokes a wake-up pipe. Everything else happens on
the server's own thread with non-blocking sockets and a selector:

- a connecting viewer first receives the ``meta`` line and a bounded backlog of
  recent records (so a late viewer still sees history), then the live stream. Backlog
  and stream are one shared sequence of the writer's batches (``sharedlog.py``), never
  copied per viewer: a viewer is a position in it (``viewer_cursor.py``). One that falls
  further behind than the window (``client_max_bytes``) skips whole batches, for itself
  only, and is told how many records it missed right at the gap (a ``dropped`` event);
- TCP is optional: loopback by default; any other bind address requires a token,
  which the viewer sends as its first line (``{"token": "..."}``); a wrong or
  missing token gets one ``refused`` event and the connection closes. A token given
  for a loopback bind is required too (loopback TCP is open to every local user);
  without one, loopback needs none. The probe passes ``$DLTOP_TOKEN`` when it is set,
  for any bind address, and generates a token for a non-loopback one without it;
- who gets in is ``gatekeeper.py``'s (mixed in): the hello read before the viewer is
  trusted, and what a peer can make the server hold bounded (``admission.py``), each
  connection turned away counted by reason in ``refusals`` (the probe says them in the
  log); an unexpected error while serving one connection drops that connection only
  (``connection_errors``);
- a failure stays contained: a start that cannot bind everything it was asked to
  closes (and removes) what it had bound before raising; a server thread that dies
  marks the server dead (``error``) and ``write`` becomes a no-op, so nothing piles up
  in memory behind a thread that will never drain it.
"""

from __future__ import annotations

import collections
import os
import selectors
import socket
import threading
import time

from .admission import Bucket, FdHeadroom, Refusals
from .gatekeeper import Gatekeeper
from .listeners import bind_tcp, bind_unix
from .sharedlog import SharedLog
from .viewer_cursor import Client
from .viewerauth import is_loopback

CLOSE_GRACE = 0.5  # seconds reading viewers get at close to receive the last records
TICK = 0.5  # the longest the server thread sleeps with nothing to do
_SENDMSG = hasattr(socket.socket, "sendmsg")


class SocketServer(Gatekeeper):
    """A Unix-socket (and optionally TCP) fan-out of the log's lines to viewers."""

    def __init__(
        self,
        unix_path: str | None,
        *,
        tcp: tuple[str, int] | None = None,
        token: str | None = None,
        backlog_bytes: int = 4 << 20,
        client_max_bytes: int = 8 << 20,
    ) -> None:
        if unix_path is None and tcp is None:
            raise ValueError("SocketServer needs a unix path or a tcp address")
        if tcp is not None and not is_loopback(tcp[0]) and not token:
            raise ValueError(
                f"refusing to serve on {tcp[0]} without a token: pass token=... "
                "or set DLTOP_TOKEN (loopback addresses need none)"
            )
        self.unix_path = unix_path
        self.tcp_address = tcp
        self._token = token.encode() if token and tcp else None
        # backlog and live stream, one copy for every viewer; a viewer may be at most
        # client_max_bytes behind the live end
        self._log = SharedLog(backlog_bytes, client_max_bytes)
        self._queue: collections.deque[bytes] = collections.deque()
        self._meta = b""
        self._meta_pending = True  # the writer's first batch repeats the meta line: skip it
        self._clients: dict[int, Client] = {}
        self._listeners: list[socket.socket] = []
        self._buckets: dict[int, Bucket] = {}  # accept rate, per listener
        self._paused: dict[socket.socket, float] = {}  # listeners not watched until then
        self._fds = FdHeadroom()
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        self.total_dropped = 0
        self.served = 0  # viewers accepted over the server's life
        self.refusals = Refusals()  # connections turned away, by reason
        self.error: BaseException | None = None  # why the server thread died, if it did
        # unexpected errors contained to one connection (that connection was dropped)
        self.connection_errors = 0
        self.first_connection_error: Exception | None = None
        self.failed_on: str | None = None  # "unix" or "tcp": which bind a failed start hit

    # ---- called from other threads -------------------------------------------------

    def start(self, meta_line: bytes) -> None:
        """Bind, listen and start serving; ``meta_line`` opens every viewer's stream."""
        self._meta = meta_line
        bound_unix = False
        try:
            if self.unix_path is not None:
                self.failed_on = "unix"
                self._listeners.append(bind_unix(self.unix_path))
                bound_unix = True
            if self.tcp_address is not None:
                self.failed_on = "tcp"
                self._listeners.append(bind_tcp(*self.tcp_address))
            self.failed_on = None
            for lst in self._listeners:
                self._buckets[lst.fileno()] = Bucket()
                self._sel.register(lst, selectors.EVENT_READ, "listen")
            self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
            self._thread = threading.Thread(target=self._run, name="dltop-socket", daemon=True)
            self._thread.start()
        except BaseException:
            # nothing may outlive a failed start: a socket file left bound here would be
            # found by `dltop ls` and refuse every viewer (a TCP port in use, say)
            self._abandon(unlink=bound_unix)
            raise

    def _abandon(self, unlink: bool) -> None:
        self._close_sockets()
        self._listeners = []
        try:
            self._sel.close()
        except OSError:
            pass
        if unlink and self.unix_path is not None:
            try:
                os.unlink(self.unix_path)
            except OSError:
                pass
        self.unix_path = None  # not ours to remove at close: another run may own it now
        self._closing.set()

    def write(self, batch: bytes) -> None:
        """Queue a batch of complete lines for every viewer; O(1), never blocks.

        A no-op once the server thread has died (``error`` says why): nobody would
        drain the queue.
        """
        if not batch or self.error is not None:
            return
        self._queue.append(batch)
        self._poke()

    @property
    def dead(self) -> bool:
        """The server thread died of an error: nothing is served any more."""
        return self.error is not None

    def close(self, timeout: float = 1.0) -> None:
        """Send what can be sent without waiting, close every socket, remove the file."""
        self._closing.set()
        self._poke()
        if self._thread is not None:
            self._thread.join(timeout)
        if self.unix_path is not None:
            try:
                os.unlink(self.unix_path)
            except OSError:
                pass

    @property
    def viewers(self) -> int:
        return sum(1 for c in list(self._clients.values()) if c.active)

    @property
    def pending(self) -> int:
        """Connections still to show their token."""
        return sum(1 for c in list(self._clients.values()) if not c.active)

    @property
    def bound_port(self) -> int | None:
        for lst in self._listeners:
            if lst.family in (socket.AF_INET, socket.AF_INET6):
                return lst.getsockname()[1]
        return None

    # ---- the server thread -----------------------------------------------------------

    def _poke(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # a wake-up is already pending (or we are closing)

    def _run(self) -> None:
        try:
            while not self._closing.is_set():
                for key, mask in self._sel.select(timeout=self._timeout()):
                    try:
                        self._handle(key, mask)
                    except Exception as exc:  # one connection's problem, never the server's
                        if key.data != "client":
                            raise  # the listener or the wake-up pipe: the server's own
                        self._contain(key, exc)
                self._distribute()
                now = time.monotonic()
                self._expire_hellos(now)
                self._resume_listeners(now)
        except Exception as exc:  # the server must never take the training down
            self.error = exc  # write() stops queueing; the owner (LiveSink) reports it once
            self._queue.clear()
        finally:
            try:
                if self.error is None:
                    self._distribute()
                    self._flush_at_close(time.monotonic() + CLOSE_GRACE)
                for client in list(self._clients.values()):
                    if self.error is None and client.active:
                        self._send(client)
                    self._drop_client(client)
            except Exception as exc:  # not even a traceback on stderr from this thread
                self.error = self.error or exc
            self._close_sockets()

    def _close_sockets(self) -> None:  # the listeners and the wake-up pair
        for sock in (*self._listeners, self._wake_r, self._wake_w):
            try:
                sock.close()
            except OSError:
                pass

    def _timeout(self) -> float:
        """How long the selector may sleep: until the next hello deadline or listener
        resumption, at most ``TICK``."""
        soonest = time.monotonic() + TICK
        for client in self._clients.values():
            if not client.active:
                soonest = min(soonest, client.deadline)
        for until in self._paused.values():
            soonest = min(soonest, until)
        return max(0.0, soonest - time.monotonic())

    def _handle(self, key: selectors.SelectorKey, mask: int) -> None:
        if key.data == "listen":
            self._accept(key.fileobj)  # type: ignore[arg-type]
        elif key.data == "wake":
            self._drain_wake()
        else:
            self._serve(key, mask)

    def _serve(self, key: selectors.SelectorKey, mask: int) -> None:
        """Read from and write to one viewer as ``mask`` says (one gone meanwhile is dropped)."""
        client = self._clients.get(key.fd)
        if client is None:
            return
        if mask & selectors.EVENT_READ:
            self._on_readable(client)
        if mask & selectors.EVENT_WRITE and key.fd in self._clients:
            self._send(client)

    def _contain(self, key: selectors.SelectorKey, exc: Exception) -> None:
        """An unexpected error while serving one connection: drop that connection, count
        it, keep serving the others (the first such error is kept for the owner)."""
        self.connection_errors += 1
        if self.first_connection_error is None:
            self.first_connection_error = exc
        client = self._clients.get(key.fd)
        if client is not None:
            try:
                self._drop_client(client)
            except Exception:
                self._clients.pop(key.fd, None)

    def _flush_at_close(self, deadline: float) -> None:
        """Give reading viewers a moment to receive the run's last records (its ``exit``
        event above all) before their sockets close; a stuck one costs at most the grace."""
        log = self._log
        try:
            while any(c.active and c.behind(log) for c in list(self._clients.values())):
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                for key, mask in self._sel.select(timeout=min(left, 0.05)):
                    if key.data == "wake":
                        self._drain_wake()
                    elif key.data == "client":  # no new viewer is accepted while closing
                        self._serve(key, mask)
        except Exception:  # closing must never raise into the probe
            pass

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError, OSError):
            pass

    # ---- the stream ----------------------------------------------------------------------

    def _distribute(self) -> None:
        log = self._log
        appended = False
        while self._queue:
            batch = self._queue.popleft()
            if self._meta_pending:
                self._meta_pending = False
                if self._meta and batch.startswith(self._meta):
                    batch = batch[len(self._meta) :]
                    if not batch:
                        continue
            log.append(batch)
            appended = True
        clients = [c for c in self._clients.values() if c.active]
        if appended:
            # a viewer further behind than the window skips ahead (for itself only); the
            # batches no viewer and no backlog needs any more are freed
            keep = log.end
            for client in clients:
                self.total_dropped += client.skip_to(log, log.window_start)
                keep = min(keep, client.next_seq)
            log.trim(keep)
        for client in clients:
            if client.behind(log) and client.sock.fileno() in self._clients:
                self._send(client)

    def _send(self, client: Client) -> None:
        sock, log = client.sock, self._log
        while True:
            bufs = client.buffers(log)
            if not bufs:
                break
            try:
                n = sock.sendmsg(bufs) if _SENDMSG else sock.send(bufs[0])
            except (BlockingIOError, InterruptedError):
                if client.stuck_since is None:
                    client.stuck_since = time.monotonic()
                break
            except OSError:
                self._drop_client(client)
                return
            client.stuck_since = None
            client.sent(log, n)
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if client.behind(log) else 0)
        try:
            self._sel.modify(sock, events, "client")
        except (KeyError, ValueError, OSError):
            pass

    def _drop_client(self, client: Client) -> None:
        fd = client.sock.fileno()
        self._clients.pop(fd, None)
        try:
            self._sel.unregister(client.sock)
        except (KeyError, ValueError, OSError):
            pass
        try:
            client.sock.close()
        except OSError:
            pass
