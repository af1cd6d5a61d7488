"""Who the live server lets in, and the most of the process it may ever hold.

Why: everything a network peer can make the probe hold is the training's to lose. A
flood of connections that each waited out the hello timeout took the training's file
descriptors (its own ``open()`` failed with EMFILE), and a hundred viewers that never
read took hundreds of MB of its memory. So every count an outsider can grow has a
bound here, and each refusal is counted by reason (``Refusals``) so that the probe can
say it in the log (``live.LiveSink``), never silently:

- connections still to show their token: at most ``MAX_PENDING`` in all and
  ``MAX_PENDING_PER_ADDRESS`` per peer address (an IPv6 peer's /64, an IPv4-mapped one
  as IPv4); the extras are refused at once. While half the slots are taken, the hello
  timeout is ``HELLO_TIMEOUT_BUSY`` instead of ``viewerauth.HELLO_TIMEOUT``;
- viewers: at most ``MAX_VIEWERS`` per run; the next one is refused with a reason, unless
  a viewer has not read anything for ``STUCK_S`` seconds, which then gives up its place;
- descriptors: the server holds at most ``FD_BUDGET`` (its listeners, its wake-up pair,
  the viewers, the connections waiting, one being refused), and accepts nothing that
  would leave the process fewer than ``FD_RESERVE`` descriptors below its
  ``RLIMIT_NOFILE`` soft limit; below ``FD_STOP`` free it does not even accept to refuse;
- its own time: accepts are rate-limited per listener (``ACCEPT_RATE`` per second,
  bursts of ``ACCEPT_BURST``), so a flood costs the training's CPU (and GIL) a bounded
  share; the rest waits in the kernel's listen queue (``LISTEN_BACKLOG``), or is
  dropped there, for the peer's kernel to retry.

Standard library only; ``resource`` is absent on some platforms, then the descriptor
headroom is not checked (the fixed budget still holds).
"""

from __future__ import annotations

import ipaddress
import os
import time

try:
    import resource
except ImportError:  # pragma: no cover - not a POSIX system
    resource = None  # type: ignore[assignment]

LISTEN_BACKLOG = 128  # connections the kernel queues for us before accept()
MAX_VIEWERS = 16  # viewers streaming from one run at once
MAX_PENDING = 8  # connections waiting to show their token, in all
MAX_PENDING_PER_ADDRESS = 2  # and from one peer address
BUSY_PENDING = MAX_PENDING // 2  # from this many waiting on, the hello timeout is short
HELLO_TIMEOUT_BUSY = 1.0  # seconds a TCP viewer has to show its token while under pressure
STUCK_S = 30.0  # a viewer whose socket took nothing for this long may be replaced
FD_RESERVE = 64  # descriptors left to the training: accept nothing that would take them
FD_STOP = 8  # fewer free than this: leave connections in the kernel's queue
FD_PAUSE_S = 0.5  # how long accepting stops when descriptors run short
FD_RECOUNT_S = 0.25  # the process's open descriptors are counted at most this often
LIMIT_RECHECK_S = 1.0  # and its RLIMIT_NOFILE read again (the training may raise it)
# accepts per second per listener, sustained: each costs the server thread ~100-250 us
# (accept, a refusal line, close) on a 2-core VM, so a flood costs it at most ~5 % of a
# core; a burst covers 16 viewers and 8 hellos arriving at once
ACCEPT_RATE = 200.0
ACCEPT_BURST = 32.0
# once the rate is spent, accepting stops for at least this long: the accepts then come
# in batches (~10 at 200/s) rather than one per wake-up of the server thread
ACCEPT_PAUSE_S = 0.05
# the most descriptors the server holds: 2 listeners, the wake-up pair, viewers, waiting
# connections, one accepted to be refused
FD_BUDGET = 4 + MAX_VIEWERS + MAX_PENDING + 1

# why a connection was turned away (the keys of ``Refusals.counts``)
BUSY = "busy"  # MAX_PENDING connections already wait for their hello
ADDRESS = "address"  # this address already has MAX_PENDING_PER_ADDRESS waiting
VIEWERS = "viewers"  # MAX_VIEWERS already stream
DESCRIPTORS = "descriptors"  # the process is within FD_RESERVE of its descriptor limit
TOKEN = "token"  # a wrong or missing token
TIMEOUT = "timeout"  # no hello in time
REASONS = (BUSY, ADDRESS, VIEWERS, DESCRIPTORS, TOKEN, TIMEOUT)

WHY = {
    BUSY: "too many connections are waiting to authenticate; try again",
    ADDRESS: "too many connections from your address are waiting to authenticate",
    VIEWERS: f"this run already has {MAX_VIEWERS} viewers",
    DESCRIPTORS: "the training is short of file descriptors; no viewer is taken now",
    TOKEN: "wrong or missing token: give the viewer $DLTOP_TOKEN",
    TIMEOUT: "no token received in time",
}


# how each reason reads in the probe's note in the log ("turned away 882 connection(s): 882 ...")
NOTE = {
    BUSY: "with too many waiting to authenticate",
    ADDRESS: "with too many waiting from one address",
    VIEWERS: f"beyond {MAX_VIEWERS} viewers",
    DESCRIPTORS: "with the process short of file descriptors",
    TOKEN: "with a wrong or missing token",
    TIMEOUT: "with no token in time",
}


class Refusals:
    """Connections turned away, by reason, and the other things a peer made happen.

    Written by the server thread only; read by the writer thread (ints, and a dict whose
    keys never change, so a copy taken meanwhile is safe).
    """

    def __init__(self) -> None:
        self.counts: dict[str, int] = dict.fromkeys(REASONS, 0)
        self.evicted = 0  # stuck viewers closed to make room for a new one
        self.accept_errors = 0  # accept() itself failed (EMFILE...): accepting paused
        self.version = 0  # bumped on every change: "anything new to say?"

    def add(self, reason: str) -> None:
        self.counts[reason] += 1
        self.version += 1


def peer_address(addr: object) -> str:
    """The address a per-address cap counts: the host of a TCP peer, an IPv6 peer's /64
    (one host holds a whole /64), an IPv4 peer seen through a dual-stack socket as IPv4."""
    host = addr[0] if isinstance(addr, tuple) and addr else addr
    text = str(host).split("%", 1)[0]
    if ":" not in text:
        return text  # IPv4 (or a name): as it is
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return text
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


def _count_fds() -> int | None:
    """Descriptors open in this process now, or None where that cannot be listed."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(folder)) - 1  # the listing's own descriptor is in it
        except OSError:
            continue
    return None


def _soft_limit() -> int | None:
    if resource is None:
        return None
    try:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY or soft <= 0 else int(soft)


class FdHeadroom:
    """How many descriptors the process may still open under its soft limit, cheaply.

    The count is taken from the descriptor listing at most every ``FD_RECOUNT_S``; a
    descriptor just accepted gives a free lower bound meanwhile (the kernel hands out
    the lowest free number, so every number below it is in use).
    """

    def __init__(self) -> None:
        self._count: int | None = None
        self._at = float("-inf")
        self._soft: int | None = None
        self._soft_at = float("-inf")

    def free(self, now: float, newest_fd: int = -1) -> int | None:
        """Descriptors still free, or None when there is no limit to keep to."""
        if now - self._soft_at >= LIMIT_RECHECK_S:
            self._soft, self._soft_at = _soft_limit(), now
        soft = self._soft
        if soft is None:
            return None
        if now - self._at >= FD_RECOUNT_S:
            self._count, self._at = _count_fds(), now
        return soft - max(self._count or 0, newest_fd + 1)


class Bucket:
    """A token bucket: ``rate`` accepts per second, ``burst`` at once."""

    def __init__(self, rate: float = ACCEPT_RATE, burst: float = ACCEPT_BURST) -> None:
        self.rate, self.burst = rate, burst
        self.tokens = burst
        self._at = time.monotonic()

    def take(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self._at) * self.rate)
        self._at = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True

    def wait(self) -> float:
        """Seconds until the next token."""
        return max(0.0, (1.0 - self.tokens) / self.rate)
