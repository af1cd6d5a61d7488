"""A sharded job's gradient norm, joined from its ranks' shares (``dltop check DIR``).

What is the whole model's gradient norm when it is sharded? Under FSDP each rank
holds a shard of every gradient and logs ``grad_sq_local`` (its share of the squared
norm, see ``probe/gradnorm.py``) instead of ``grad_norm``, because the norm itself
would take a collective in the training step. :class:`GradNormJoin` adds the shares of
every rank up per step and writes ``sqrt(sum)`` as ``grad_norm`` into the step records
of the job's first rank, so that its rules (NaN gradient, explosion, vanishing) judge
the whole model. A step is completed only when every rank of the job gave its share: a
missing rank file would otherwise pass a fraction of the norm off as the whole.

The live viewer does the same as the ranks' records arrive (``peers.PeerJoin``).
No Textual, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ...probe.schema import GRAD_SQ_LOCAL, META, STEP, as_float, as_step

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
        self.sums: dict[int, float] = {}
        self.counts: dict[int, int] = {}
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
        if rank.finished:  # a rank whose file failed halfway never gave its shares
            self._merge(rank.shares)
        rank.shares = {}

    def _see_meta(self, rec: dict[str, Any]) -> None:
        w = rec.get("world_size")
        if type(w) is int and 0 < w < 1 << 24 and (self.world is None or w > self.world):
            self.world = w

    def _merge(self, shares: dict[int, float]) -> None:
        if not shares:
            return
        self.ranks += 1
        sums, counts = self.sums, self.counts
        for step, v in shares.items():
            if step in sums:
                sums[step] += v
                counts[step] += 1
            elif len(sums) < MAX_SHARE_STEPS:
                sums[step] = v
                counts[step] = 1

    def _expected(self) -> int:
        """Ranks whose share every step needs: the job's world size when a meta gave it,
        else the ranks seen with shares (the primary included)."""
        return self.world if self.world is not None else self.ranks + 1

    def norm(self, step: int, own: float) -> float | None:
        """The whole model's norm at ``step`` given the primary's own share, or None."""
        if self.counts.get(step, 0) + 1 != self._expected():
            return None
        total = self.sums.get(step, 0.0) + own
        if total < 0:  # junk in a log: no norm, rather than an exception
            return None
        return math.sqrt(total)  # NaN and infinity pass through: a NaN shard is a NaN norm

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
    deferred: bool = False  # GradNormJoin.detached: finish() keeps the shares for absorb()
    finished: bool = False

    def feed(self, records: Iterable[dict[str, Any]]) -> None:
        join = self.join
        for rec in records:
            if GRAD_SQ_LOCAL not in rec:
                if rec.get("kind") == META:
                    join._see_meta(rec)
                continue
            if rec.get("kind") != STEP:
                continue
            step = as_step(rec.get("step"))
            v = as_float(rec[GRAD_SQ_LOCAL])
            if step is None or v is None:
                continue
            if not self.primary:
                if step in self.shares or len(self.shares) < MAX_SHARE_STEPS:
                    self.shares[step] = v
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
            return
        if not self.primary:
            self.join._merge(self.shares)
        self.shares = {}
