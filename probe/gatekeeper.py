"""Who gets into the live server: the accept, the hello, and a connection turned away.

Mixed into ``socket_server.SocketServer`` and run on its thread only. Kept apart from the
selector loop and the stream because it is per-connection code, never per record: it
applies the bounds of ``admission.py`` at the accept (the accept rate, descriptors never
within ``FD_RESERVE`` of the process's limit, the connections waiting for their hello, in
all and per address, the viewers) and at the hello (at most ``HELLO_MAX`` bytes within
``HELLO_TIMEOUT`` seconds, refused if nested by ``viewerauth.parse_hello``, the token
compared in constant time). A connection turned away is told why in one ``refused`` event
and counted by reason in ``refusals``; a stuck viewer gives up its place only to one that
is let in.
"""

from __future__ import annotations

import hmac
import selectors
import socket
import time
from typing import TYPE_CHECKING

from . import admission as adm
from .admission import Bucket, FdHeadroom, Refusals, peer_address
from .encoding import encode_record
from .schema import EV_REFUSED
from .sharedlog import SharedLog
from .viewer_cursor import Client
from .viewerauth import HELLO_MAX, HELLO_TIMEOUT, parse_hello


class Gatekeeper:
    """Mixed into ``SocketServer``: who is let in, left to show a token, or turned away."""

    _clients: dict[int, Client]
    _sel: selectors.BaseSelector
    _buckets: dict[int, Bucket]
    _paused: dict[socket.socket, float]
    _fds: FdHeadroom
    _token: bytes | None
    _log: SharedLog
    _meta: bytes
    served: int
    refusals: Refusals

    if TYPE_CHECKING:  # what SocketServer provides

        @property
        def viewers(self) -> int: ...

        @property
        def pending(self) -> int: ...

        def _send(self, client: Client) -> None: ...

        def _drop_client(self, client: Client) -> None: ...

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
