"""A sharded job's gradient norm, joined from its ranks' shares: after the fact and live.

Under FSDP each rank holds a shard of every gradient and logs ``grad_sq_local`` (its
share of the squared norm, see ``probe/gradnorm.py``) instead of ``grad_norm``, because
the norm itself would take a collective in the training step. The whole model's norm at
a step is ``sqrt`` of the sum of every rank's share, written as ``grad_norm`` into the
step records of the rank the rules judge, so that they (NaN gradient, explosion,
vanishing) judge the whole model. A step is completed only when every rank of the job
gave its share: a missing rank would otherwise pass a fraction of the norm off as the
whole. A ``grad_norm`` the user passed wins. Two ways to the same join, one module:

- :class:`GradNormJoin` (``dltop check DIR``, the report): the rank files read one after
  the other, the job's first rank last, its steps joined as they stream by.
- :class:`PeerJoin` (the viewer following a folder): the followed rank's sharded records
  are held back, the other rank files read just far enough to find the same step, and
  each record goes on once every rank logged that step, or without a norm when a step
  never completes (a rank died, its file is missing, its writer is behind by more than
  ``HOLD_S``, or ``MAX_HELD`` records wait behind it). Order is kept. A job that is not
  sharded costs nothing (no peer file is opened); for a sharded one every peer's new
  lines are decoded once (``benchmarks/ranks.py`` measures it on 64 ranks).

Both read a share, a world size and a norm with the helpers below. No Textual, no torch.
"""

from __future__ import annotations

import math
import os
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from ....probe.schema import (
    GRAD_SQ_LOCAL,
    MAX_STEP,
    META,
    STEP,
    Record,
    Records,
    as_float,
    as_step,
)
from ..files.logbytes import decoder, read_range
from ..files.sourcefiles import SourceError, open_log, read_head
from .sharesums import Packed, ShareSums


def share_of(rec: Record) -> tuple[int, float] | None:
    """A step record's (step, share of the squared norm), or None when it has none."""
    v = rec.get(GRAD_SQ_LOCAL)
    if v is None:
        return None
    step, f = as_step(rec.get("step")), as_float(v)
    return None if step is None or f is None else (step, f)


def world_of(rec: Record) -> int | None:
    """A meta record's ``world_size``, when it is a believable one."""
    w = rec.get("world_size")
    return w if type(w) is int and 0 < w < 1 << 24 else None


def root(total: float) -> float | None:
    """The norm from the summed shares; None for a negative sum (junk in a log, no norm
    rather than an exception). NaN and infinity pass through: a NaN shard is a NaN norm."""
    return None if total < 0 else math.sqrt(total)


# ---------------------------------------------------------------- after the fact

MAX_SHARE_STEPS = 1_000_000  # steps whose shares a sharded job's join keeps (about 100 MB)


class GradNormJoin:
    """The whole model's grad norm of a sharded job, from its ranks' ``grad_sq_local``.

    Used in one pass over the rank files: every other rank first (:meth:`other`, each
    fed its records and then :meth:`RankShares.finish`-ed), the job's first rank last
    (:meth:`primary`), whose step records get ``grad_norm = sqrt(sum of every rank's
    share)`` as they stream by. Within a rank the last share of a step wins (an elastic
    restart redoes steps); a step some rank never logged gets no norm (``incomplete``
    counts them), and neither does a step whose record already has a ``grad_norm`` (a
    value the user passed wins). Memory: one float and one count per step
    (``MAX_SHARE_STEPS`` at most), plus one rank's shares while it is read.
    """

    def __init__(self) -> None:
        self.sums = ShareSums(MAX_SHARE_STEPS)
        self.ranks = 0  # other ranks that logged shares
        self.world: int | None = None  # the largest world_size a meta record gave
        self.joined = 0  # primary steps that got the whole model's norm
        self.incomplete = 0  # primary steps with a share but not every rank's

    def other(self) -> RankShares:
        return RankShares(self, primary=False)

    def primary(self) -> RankShares:
        return RankShares(self, primary=True)

    @staticmethod
    def detached() -> RankShares:
        """One rank other than the first, read apart from the job's join (in a worker
        process); :meth:`absorb` takes it in afterwards."""
        return RankShares(GradNormJoin(), primary=False, deferred=True)

    def absorb(self, rank: RankShares) -> None:
        """A :meth:`detached` rank's world size and shares: the same as that rank read
        through this join, when absorbed in the order the ranks would have been read (the
        sums are floats: their order is their value). Its shares are dropped here."""
        if rank.join.world is not None:
            self._see_meta({"world_size": rank.join.world})
        # a rank whose file failed halfway never gave its shares
        if rank.finished and rank.packed is not None and len(rank.packed):
            self.ranks += 1
            self.sums.add(rank.packed)
        rank.shares, rank.packed = {}, None

    def _see_meta(self, rec: Record) -> None:
        w = world_of(rec)
        if w is not None and (self.world is None or w > self.world):
            self.world = w

    def _merge(self, shares: dict[int, float]) -> None:
        if not shares:
            return
        self.ranks += 1
        self.sums.add_items(shares.items())

    def _expected(self) -> int:
        """Ranks whose share every step needs: the job's world size when a meta gave it,
        else the ranks seen with shares (the primary included)."""
        return self.world if self.world is not None else self.ranks + 1

    def norm(self, step: int, own: float) -> float | None:
        """The whole model's norm at ``step`` given the primary's own share, or None."""
        count, total = self.sums.get(step)
        if count + 1 != self._expected():
            return None
        return root(total + own)

    @property
    def summary(self) -> str | None:
        """One line on what was joined, for the check report; None for an unsharded job."""
        if not (self.joined or self.incomplete):
            return None
        line = (
            f"grad_norm of {self.joined} steps joined from {self._expected()} ranks' "
            "grad_sq_local (sharded gradients)"
        )
        if self.incomplete:
            line += f"; {self.incomplete} steps lack some rank's share and have no grad_norm"
        return line


@dataclass
class RankShares:
    """One rank's side of a :class:`GradNormJoin`, fed that rank's records in order."""

    join: GradNormJoin
    primary: bool
    shares: dict[int, float] = field(default_factory=dict)
    deferred: bool = False  # GradNormJoin.detached: finish() packs the shares for absorb()
    finished: bool = False
    packed: Packed | None = None  # a deferred rank's shares, finished: arrays to send back

    def feed(self, records: Iterable[Record]) -> None:
        # share_of, inline: every step of every rank passes here. The usual values (an int
        # step, a float share) are taken as they are; anything else goes through as_step /
        # as_float, which return those two unchanged, so the values are the same
        join = self.join
        shares, primary = self.shares, self.primary
        for rec in records:
            if GRAD_SQ_LOCAL not in rec:
                if rec.get("kind") == META:
                    join._see_meta(rec)
                continue
            if rec.get("kind") != STEP:
                continue
            v = rec[GRAD_SQ_LOCAL]
            if type(v) is not float and (v is None or (v := as_float(v)) is None):
                continue
            step = rec.get("step")
            if (type(step) is not int or not -MAX_STEP < step < MAX_STEP) and (
                step := as_step(step)
            ) is None:
                continue
            if not primary:
                if step in shares or len(shares) < MAX_SHARE_STEPS:
                    shares[step] = v
            elif "grad_norm" not in rec:
                norm = join.norm(step, v)
                if norm is None:
                    join.incomplete += 1
                else:
                    rec["grad_norm"] = norm
                    join.joined += 1

    def finish(self) -> None:
        """The rank is read: its last share per step goes into the job's sums."""
        self.finished = True
        if self.deferred:
            self.packed, self.shares = Packed(self.shares), {}
            return
        if not self.primary:
            self.join._merge(self.shares)
        self.shares = {}


# ---------------------------------------------------------------- live

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
        self.dec = decoder()
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
            for end, recs in read_range(self.fd, self.offset, None, READ, READ, self.dec):
                self.offset = end
                self._take(recs)
                if self.top is not None and self.top >= step:
                    break
        except OSError:  # an I/O error on this rank's file must not stop the followed rank
            self.gone = True
        finally:
            if not self.keep_open:
                self.close()

    def _take(self, records: Records) -> None:
        shares = self.shares
        for rec in records:
            kind = rec.get("kind")
            if kind == STEP:
                got = share_of(rec)
                if got is None:
                    continue
                step, f = got
                if shares and step <= shares[-1][0]:
                    shares.clear()  # a new segment (an elastic restart redid steps)
                if len(shares) < MAX_AHEAD:
                    shares.append((step, f))
                self.top = step
            elif kind == META and (w := world_of(rec)) is not None:
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
        self.held: deque[tuple[float, Record]] = deque()
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

    def offer(self, records: Records, now: float) -> Records:
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

    def release(self, now: float, force: bool = False) -> Records:
        """Held records whose step is complete, or waited ``hold_s``, or beyond ``MAX_HELD``
        (``force``: all)."""
        out: Records = []
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

    def _see_meta(self, rec: Record) -> None:
        w = world_of(rec)
        if w is not None:
            self.world = w

    def _norm(self, rec: Record) -> float | str:
        got = share_of(rec)
        if got is None:
            return _NEVER
        step, own = got
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
        norm = root(total)
        return _NEVER if norm is None else norm


def has_shares(path: str) -> bool:
    """Whether the log's first 64 KiB hold a sharded step (``grad_sq_local``)."""
    return f'"{GRAD_SQ_LOCAL}"'.encode() in (read_head(path) or b"")
