"""The live viewer's side of a sharded grad norm: the other rank files, read for their shares.

Under FSDP every rank logs ``grad_sq_local`` (its share of the squared norm, see
``probe/gradnorm.py``) and none logs ``grad_norm``. ``dltop check DIR`` joins the shares
after the fact (``gradjoin.GradNormJoin``); a viewer following the folder does it as the
records arrive: :class:`PeerJoin` holds back the followed rank's records from its first
sharded step on, reads the other rank files just far enough to find the same step, and
lets each record go with ``grad_norm = sqrt(own share + every peer's share)`` once every
rank of the job has logged that step. Order is kept: what follows a held record waits
behind it.

What it costs: nothing for a job that is not sharded (no peer file is opened). For a
sharded one, every peer's new lines are decoded once (a step every few hundred bytes),
and a peer keeps only the shares of steps the followed rank has not reached yet
(``benchmarks/ranks.py`` measures it on 64 ranks). A step that never completes (a rank
died, its file is missing, its writer is behind by more than ``HOLD_S``, or ``MAX_HELD``
records wait behind it) goes out without a norm rather than with part of one;
``incomplete`` counts those.

No Textual, no torch; the caller (``dirsource.DirectorySource``) owns the followed file.
"""

from __future__ import annotations

import math
import os
from collections import deque
from typing import Any

from ...probe.decoding import LineDecoder
from ...probe.schema import GRAD_SQ_LOCAL, META, STEP, as_float, as_step
from .sourcefiles import SourceError, open_log

HOLD_S = 3.0  # longest a sharded step waits for the other ranks' shares (the probe writes
# its queue every fraction of a second; a GPU read-back can delay a rank's line a little)
READ = 64 << 10  # bytes per read of a peer file
MAX_AHEAD = 100_000  # shares a peer keeps ahead of the followed rank (a bound, not a goal)
# records held back at most: a peer that stopped early (crashed) leaves every later step
# waiting HOLD_S, and a backlog read at full speed would hold seconds of it in memory
MAX_HELD = 50_000
# peer files kept open; the others are opened for each read and closed again, so that a
# job of thousands of ranks stays far below a 1024-descriptor limit (``ulimit -n``)
MAX_OPEN = 256

_WAIT, _NEVER = "wait", "never"


class Peer:
    """One other rank's file: its shares (step, value) in file order, read on demand."""

    def __init__(self, path: str, keep_open: bool = True) -> None:
        self.path = path
        self.keep_open = keep_open
        self.fd = -1
        self.offset = 0
        self.dec = LineDecoder()
        self.shares: deque[tuple[int, float]] = deque()
        self.top: int | None = None  # the latest step this rank logged a share for
        self.world: int | None = None  # from its meta
        self.gone = False  # could not be opened (a FIFO swapped in, no permission...)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def read_until(self, step: int) -> None:
        """Read on until this rank has logged a share at or past ``step`` or its file ends."""
        if self.gone or (self.top is not None and self.top >= step):
            return  # a file beyond MAX_OPEN is not opened again for a step already read
        if self.fd < 0:
            try:
                self.fd = open_log(self.path)
            except (OSError, SourceError):
                self.gone = True
                return
        try:
            while self.top is None or self.top < step:
                chunk = os.pread(self.fd, READ, self.offset)
                if not chunk:
                    return
                self.offset += len(chunk)
                self._take(self.dec.feed(chunk))
        except OSError:  # an I/O error on this rank's file must not stop the followed rank
            self.gone = True
        finally:
            if not self.keep_open:
                self.close()

    def _take(self, records: list[dict[str, Any]]) -> None:
        shares = self.shares
        for rec in records:
            kind = rec.get("kind")
            if kind == STEP:
                v = rec.get(GRAD_SQ_LOCAL)
                if v is None:
                    continue
                step, f = as_step(rec.get("step")), as_float(v)
                if step is None or f is None:
                    continue
                if shares and step <= shares[-1][0]:
                    shares.clear()  # a new segment (an elastic restart redid steps)
                if len(shares) < MAX_AHEAD:
                    shares.append((step, f))
                self.top = step
            elif kind == META:
                w = rec.get("world_size")
                if type(w) is int and 0 < w < 1 << 24:
                    self.world = w

    def share(self, step: int) -> float | str:
        """Its share at ``step``; ``_NEVER`` when it went past ``step`` without one (or
        its file cannot be read), ``_WAIT`` when it has not got there yet."""
        self.read_until(step)
        if self.gone:
            return _NEVER
        shares = self.shares
        while shares and shares[0][0] < step:  # steps the followed rank has passed
            shares.popleft()
        if shares and shares[0][0] == step:
            return shares[0][1]
        if shares or (self.top is not None and self.top > step):
            return _NEVER
        return _WAIT


class PeerJoin:
    """Joins the followed rank's sharded steps with its peers' shares (module docstring)."""

    def __init__(self, hold_s: float = HOLD_S) -> None:
        self.hold_s = hold_s
        self.peers: dict[str, Peer] = {}
        self.held: deque[tuple[float, dict[str, Any]]] = deque()
        self.world: int | None = None  # the followed rank's world_size
        self.joined = 0
        self.incomplete = 0

    def set_peers(self, paths: list[str]) -> None:
        """The other rank files of the folder (a listing refresh may add some)."""
        for p in paths:
            if p not in self.peers:
                self.peers[p] = Peer(p, keep_open=len(self.peers) < MAX_OPEN)

    def close(self) -> None:
        for p in self.peers.values():
            p.close()

    def reset(self) -> None:
        """The followed file was replaced or truncated: a new run, nothing held."""
        self.held.clear()
        self.world = None
        for p in self.peers.values():
            p.close()
        self.peers = {path: Peer(path, p.keep_open) for path, p in self.peers.items()}

    def offer(self, records: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
        """The records that may go to the model now, in order; the rest wait (``release``)."""
        if not self.held:
            for i, rec in enumerate(records):
                if rec.get("kind") == META:
                    self._see_meta(rec)
                elif GRAD_SQ_LOCAL in rec and "grad_norm" not in rec:
                    self.held.extend((now, r) for r in records[i:])
                    return records[:i] + self.release(now)
            return records
        for rec in records:
            if rec.get("kind") == META:
                self._see_meta(rec)
        self.held.extend((now, r) for r in records)
        return self.release(now)

    def release(self, now: float, force: bool = False) -> list[dict[str, Any]]:
        """Held records whose step is complete, or waited ``hold_s``, or beyond ``MAX_HELD``
        (``force``: all)."""
        out: list[dict[str, Any]] = []
        held = self.held
        while held:
            t0, rec = held[0]
            if GRAD_SQ_LOCAL in rec and "grad_norm" not in rec and rec.get("kind") == STEP:
                norm = self._norm(rec)
                waits = now - t0 < self.hold_s and len(held) <= MAX_HELD
                if norm == _WAIT and waits and not force:
                    break
                if isinstance(norm, float):
                    rec["grad_norm"] = norm
                    self.joined += 1
                else:
                    self.incomplete += 1
            out.append(rec)
            held.popleft()
        return out

    def _see_meta(self, rec: dict[str, Any]) -> None:
        w = rec.get("world_size")
        if type(w) is int and 0 < w < 1 << 24:
            self.world = w

    def _norm(self, rec: dict[str, Any]) -> float | str:
        step, own = as_step(rec.get("step")), as_float(rec.get(GRAD_SQ_LOCAL))
        if step is None or own is None:
            return _NEVER
        total = own
        waiting = False
        for p in self.peers.values():
            v = p.share(step)
            if v == _NEVER:
                return _NEVER
            if isinstance(v, float):
                total += v
            else:
                waiting = True
        world = max([self.world or 0] + [p.world or 0 for p in self.peers.values()])
        if waiting or (world and 1 + len(self.peers) < world):
            return _WAIT  # a rank's file may appear or its line may come within hold_s
        if total < 0:
            return _NEVER
        return math.sqrt(total)  # NaN and infinity pass through


def has_shares(path: str, head: int = 1 << 16) -> bool:
    """Whether the log's first ``head`` bytes hold a sharded step (``grad_sq_local``)."""
    try:
        fd = open_log(path)
    except (OSError, SourceError):
        return False
    try:
        return f'"{GRAD_SQ_LOCAL}"'.encode() in os.pread(fd, head, 0)
    except OSError:
        return False
    finally:
        os.close(fd)
