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
- the hello is read before the viewer is trusted: at most ``HELLO_MAX`` bytes within
  ``HELLO_TIMEOUT`` seconds, refused if nested (``viewerauth.parse_hello``); an unexpected error
  while serving one connection drops that connection only (``connection_errors``);
- what a peer can make the server hold is bounded (``admission.py``): connections
  waiting for their hello (in all and per address), viewers, descriptors (never within
  ``FD_RESERVE`` of the process's limit) and the accept rate; each connection turned
  away is counted by reason in ``refusals`` (the probe says them in the log);
- a failure stays contained: a start that cannot bind everything it was asked to
  closes (and removes) what it had bound before raising; a server thread that dies
  marks the server dead (``error``) and ``write`` becomes a no-op, so nothing piles up
  in memory behind a thread that will never drain it.
"""

from __future__ import annotations

import collections
import hmac
import os
import selectors
import socket
import threading
import time

from . import admission as adm
from .admission import Bucket, FdHeadroom, Refusals, peer_address
from .encoding import encode_record
from .listeners import bind_tcp, bind_unix
from .schema import EV_REFUSED
from .sharedlog import SharedLog
from .viewer_cursor import Client
from .viewerauth import HELLO_MAX, HELLO_TIMEOUT, is_loopback, parse_hello

CLOSE_GRACE = 0.5  # seconds reading viewers get at close to receive the last records
TICK = 0.5  # the longest the server thread sleeps with nothing to do
_SENDMSG = hasattr(socket.socket, "sendmsg")


class SocketServer:
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
        for sock in (*self._listeners, self._wake_r, self._wake_w):
            try:
                sock.close()
            except OSError:
                pass
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
                        continue
                    client = self._clients.get(key.fd) if key.data == "client" else None
                    if client is None:
                        continue
                    if mask & selectors.EVENT_READ:
                        self._on_readable(client)  # a viewer gone meanwhile is dropped here
                    if mask & selectors.EVENT_WRITE and key.fd in self._clients:
                        self._send(client)
        except Exception:  # closing must never raise into the probe
            pass

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError, OSError):
            pass

    # ---- who gets in (the bounds are admission.py's) -----------------------------------

    def _accept(self, listener: socket.socket) -> None:
        """Accept what waits, within the rate and the descriptors the process can spare;
        past either, stop watching the listener for a while (the kernel queues the rest)."""
        bucket = self._buckets[listener.fileno()]
        while True:
            now = time.monotonic()
            free = self._fds.free(now)
            if free is not None and free < adm.FD_STOP:
                self._pause(listener, now + adm.FD_PAUSE_S)
                return
            if not bucket.take(now):
                self._pause(listener, now + max(bucket.wait(), adm.ACCEPT_PAUSE_S))
                return
            try:
                sock, addr = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # EMFILE, ENFILE, ENOBUFS...: the listener stays readable
                self.refusals.accept_errors += 1
                self.refusals.version += 1
                self._pause(listener, now + adm.FD_PAUSE_S)  # never a busy loop
                return
            self._admit(sock, addr, listener.family, now)

    def _pause(self, listener: socket.socket, until: float) -> None:
        if listener not in self._paused:
            try:
                self._sel.unregister(listener)
            except (KeyError, ValueError):
                pass
        self._paused[listener] = until

    def _resume_listeners(self, now: float) -> None:
        for listener, until in list(self._paused.items()):
            if now >= until:
                del self._paused[listener]
                self._sel.register(listener, selectors.EVENT_READ, "listen")

    def _admit(self, sock: socket.socket, addr: object, family: int, now: float) -> None:
        """A connection just accepted: turned away at once (counted, with the reason),
        left to show its token, or streamed to."""
        free = self._fds.free(now, sock.fileno())
        if free is not None and free < adm.FD_RESERVE:
            self._turn_away(sock, adm.DESCRIPTORS)
            return
        is_tcp = family != socket.AF_UNIX
        needs_token = is_tcp and self._token is not None
        address = peer_address(addr) if is_tcp else ""
        if needs_token:
            waiting = [c for c in self._clients.values() if not c.active]
            if len(waiting) >= adm.MAX_PENDING:
                self._turn_away(sock, adm.BUSY)
                return
            if sum(c.address == address for c in waiting) >= adm.MAX_PENDING_PER_ADDRESS:
                self._turn_away(sock, adm.ADDRESS)
                return
        # a full run turns a newcomer away at once; a stuck viewer gives up its place
        # only to one that is let in (never to a peer that has not shown its token)
        if self.viewers >= adm.MAX_VIEWERS:
            room = bool(self._stuck(now)) if needs_token else self._evict_stuck(now)
            if not room:
                self._turn_away(sock, adm.VIEWERS)
                return
        try:
            sock.setblocking(False)
            client = Client(sock=sock, name=str(addr), active=False, address=address)
            client.deadline = now + HELLO_TIMEOUT
            self._clients[sock.fileno()] = client
            self._sel.register(sock, selectors.EVENT_READ, "client")
        except (OSError, ValueError):
            self._clients.pop(sock.fileno(), None)
            sock.close()
            return
        if not needs_token:
            self._activate(client)
            return
        if self.pending >= adm.BUSY_PENDING:  # under pressure: every hello gets less time
            soon = now + adm.HELLO_TIMEOUT_BUSY
            for other in self._clients.values():
                if not other.active:
                    other.deadline = min(other.deadline, soon)

    def _stuck(self, now: float) -> list[Client]:
        """Viewers whose socket took nothing for ``STUCK_S`` while we had data for them."""
        return [
            c
            for c in self._clients.values()
            if c.active and c.stuck_since is not None and now - c.stuck_since >= adm.STUCK_S
        ]

    def _evict_stuck(self, now: float) -> bool:
        """Make room for a new viewer: close the viewer stuck longest, if any."""
        stuck = self._stuck(now)
        if not stuck:
            return False
        self._drop_client(min(stuck, key=lambda c: c.stuck_since or now))
        self.refusals.evicted += 1
        self.refusals.version += 1
        return True

    def _turn_away(self, sock: socket.socket, reason: str) -> None:
        """Refuse a connection we hold no state for: say why in one line, close."""
        self.refusals.add(reason)
        try:
            sock.setblocking(False)
            sock.send(self._refusal(reason))
            sock.recv(HELLO_MAX)  # a hello left unread would turn our close into a reset
        except OSError:
            pass
        finally:
            sock.close()

    @staticmethod
    def _refusal(reason: str) -> bytes:
        return encode_record(
            {
                "kind": "event",
                "type": EV_REFUSED,
                "t": time.time(),
                "reason": reason,
                "message": adm.WHY[reason],
            }
        )

    def _activate(self, client: Client) -> None:
        if self.viewers >= adm.MAX_VIEWERS and not self._evict_stuck(time.monotonic()):
            self._refuse(client, adm.VIEWERS)
            return
        client.active = True
        self.served += 1
        client.start(self._log, self._meta)
        self._send(client)

    def _on_readable(self, client: Client) -> None:
        try:
            data = client.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop_client(client)
            return
        if client.active:
            return  # viewers have nothing to say once streaming
        client.hello += data
        if b"\n" not in client.hello and len(client.hello) < HELLO_MAX:
            return
        given = parse_hello(client.hello.split(b"\n", 1)[0][:HELLO_MAX])
        if (
            self._token is not None
            and given is not None
            and hmac.compare_digest(given, self._token)
        ):
            self._activate(client)
        else:
            self._refuse(client, adm.TOKEN)

    def _refuse(self, client: Client, reason: str) -> None:
        self.refusals.add(reason)
        try:
            client.sock.send(self._refusal(reason))
        except OSError:
            pass
        self._drop_client(client)

    def _expire_hellos(self, now: float) -> None:
        for client in list(self._clients.values()):
            if not client.active and now > client.deadline:
                self._refuse(client, adm.TIMEOUT)

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
