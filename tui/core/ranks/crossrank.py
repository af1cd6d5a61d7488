"""The cross-rank rules in the viewer: the straggler, the first failure and the rank a
hung job waits for of ``ranks.py`` (the same code ``dltop check`` runs), judged again
from scratch over copies of the failure and stall alerts, so a judgement is idempotent
and never writes into a rank's engine; its step timings are fed from the stores, a bounded number of rows per rank per
judgement, so a huge replay catches up over a few judgements instead of freezing one.
No Textual here (``tests/project/test_boundaries.py``).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

from ..rules.alerts import Alert, AlertSink
from .compare import FAILURES, Rank, RankTimes, judge
from .jobs import RankLog

JUDGED = FAILURES + ("stall",)  # the alerts the cross-rank judgement may annotate

if TYPE_CHECKING:
    from ..rules import RuleEngine
    from ..store.runstore import Store

FEED_ROWS = 200_000  # step rows per rank fed to the straggler timings per judgement
FEED_SLICE = 5_000  # ...copied out per hold of the rank's lock (a few ms)
JUDGE_EVERY = 1.0  # seconds between cross-rank judgements (only when something changed)


@dataclass
class _Fed:
    """How far a rank's store has been fed to its straggler timings."""

    generation: int = -1
    resumes: int = 0
    rows: int = 0
    times: RankTimes = field(default_factory=RankTimes)


class _Judged:
    """What ``ranks.judge`` reads of an engine (``alerts()``, ``sink``, ``last_t``,
    ``last_step``, ``where``), over a sink of its own that starts with a rank's failure and
    stall alerts: the judgement revises and adds there, never in the rank's engine, so it
    can be repeated as the run goes on. (Alerts are frozen: the rank's are shared, not copied.)"""

    def __init__(
        self,
        failures: list[Alert],
        last_t: float | None,
        last_step: int | None = None,
        where: str | None = None,
    ) -> None:
        self.sink = AlertSink()
        for a in failures:
            self.sink.adopt(a)
        self.adopted = len(failures)  # slots below this: the rank's alerts, in order
        self.last_t = last_t
        self.last_step = last_step
        self.where = where

    def alerts(self) -> list[Alert]:
        return self.sink.alerts

    def judged(self, slot: int) -> Alert | None:
        """The judgement's version of the rank's alert in ``slot`` (below ``adopted``)."""
        return self.sink.get(slot)

    def added(self) -> list[Alert]:
        """The alerts the judgement raised (a straggler, a hung rank's stall)."""
        return [a for _, a in self.sink.since(self.adopted)]


@dataclass(frozen=True)
class _Note:
    """What the cross-rank judgement adds to one rank's alert: evidence (the first rank,
    the rank a hung job waits for), its checklist, a prefix to its message, its title."""

    evidence: tuple[tuple[str, Any], ...]
    checklist: str | None
    prefix: str
    title: str

    @property
    def first_rank(self) -> int | None:
        return dict(self.evidence).get("first_rank")


class CrossRank:
    """The straggler and first-failure verdicts of ``ranks.py`` for a live job."""

    def __init__(self) -> None:
        self.version = 0  # bumps when a verdict changed
        self.straggler: str | None = None  # the slow rank's path
        self.extra: dict[str, list[Alert]] = {}  # path -> cross-rank alerts on that rank
        self.first_rank: int | None = None
        self._notes: dict[int, tuple[Alert, _Note]] = {}  # id(original) -> (original, note)
        self._fed: dict[str, _Fed] = {}
        self._last = -math.inf
        self._seen: tuple[Any, ...] | None = None

    def update(self, ranks: Sequence[RankLog], now: float, force: bool = False) -> bool:
        """Judge again when due (``force``: now) and something changed; True when a
        verdict changed. ``now``: a monotonic clock, seconds."""
        if len(ranks) < 2 or (now - self._last < JUDGE_EVERY and not force):
            return False
        self._last = now
        seen = tuple(self._feed(r) for r in ranks)
        if seen == self._seen:
            return False
        self._seen = seen
        return self._judge(ranks)

    def _feed(self, r: RankLog) -> tuple[Any, ...]:
        """Feed the rank's new step rows (at most ``FEED_ROWS``) to its timings, copied
        out ``FEED_SLICE`` rows per hold of the rank's lock, so its reader is never held
        up long; returns what the judgement depends on: rows fed, failures, the store's
        generation and the engine (a backfill swaps in one whose alerts are new objects)."""
        fed = self._fed.setdefault(r.path, _Fed())
        budget = FEED_ROWS
        while True:
            with r.model.lock:
                store = r.model.store
                st = store.series("step_time")
                n = len(st) if st is not None else 0
                gen = r.model.generation
                if gen != fed.generation or len(store.resumes) != fed.resumes or n < fed.rows:
                    fed = self._fed[r.path] = _Fed(gen, len(store.resumes))
                if st is None or fed.rows >= n or budget <= 0:
                    engine = r.model.engine
                    fails = (
                        sum(
                            a.id in FAILURES or (a.id == "stall" and a.active)
                            for a in engine.alerts()
                        )
                        if engine
                        else 0
                    )
                    where = (engine.where, engine.last_step) if engine else None
                    return fed.rows, fails, gen, id(engine), where
                i, j = fed.rows, min(n, fed.rows + min(FEED_SLICE, budget))
                xs, ys = st.xs(i, j), st.ys[i:j]
                dt = _by_step(store, "data_time", xs[0], xs[-1])
                ft = _by_step(store, "forward_time", xs[0], xs[-1])
            fed.times.feed(
                {"kind": "step", "step": x, "step_time": y, "data_time": dt.get(x),
                 "forward_time": ft.get(x)}
                for x, y in zip(xs, ys, strict=True)
            )  # fmt: skip
            fed.rows = j
            budget -= j - i

    def _judge(self, ranks: Sequence[RankLog]) -> bool:
        job: list[Rank] = []
        originals: list[list[Alert]] = []
        for r in ranks:
            with r.model.lock:
                engine = r.model.engine
                mine = [
                    a for a in (engine.alerts() if engine is not None else []) if a.id in JUDGED
                ]
                last_t = engine.last_t if engine is not None else None
                last_step = engine.last_step if engine is not None else None
                where = engine.where if engine is not None else None
            # the block in progress counts too, as at the end of `dltop check`; a shallow
            # copy: finishing it writes that block's medians where the closed block's go
            times = copy.copy(self._fed[r.path].times)
            times.finish()
            judged = _Judged(mine, last_t, last_step, where)
            job.append(Rank(r.rank, cast("RuleEngine", judged), times))
            originals.append(mine)
        judge(job)
        notes: dict[int, tuple[Alert, _Note]] = {}
        extra: dict[str, list[Alert]] = {}
        straggler: str | None = None
        first: int | None = None
        for r, rank, alerts in zip(ranks, job, originals, strict=True):
            judged = cast("_Judged", rank.engine)
            for slot, a in enumerate(alerts):
                c = judged.judged(slot)
                if c is None or c is a:
                    continue  # the judgement left it as it was
                added = tuple(
                    (k, v) for k, v in c.evidence.items() if a.evidence.get(k, _MISSING) != v
                )
                if not added:
                    continue
                cut = len(c.message) - len(a.message)
                note = _Note(
                    added,
                    c.checklist,
                    c.message[:cut] if cut > 0 else "",
                    c.title,
                )
                notes[id(a)] = (a, note)
                if note.first_rank is not None:
                    first = note.first_rank
            mine = judged.added()
            if mine:
                extra[r.path] = mine
                if any(a.id == "straggler" for a in mine):
                    straggler = r.path
        changed = (
            straggler != self.straggler
            or first != self.first_rank
            or _sig(extra) != _sig(self.extra)
            or {k: n for k, (_, n) in notes.items()} != {k: n for k, (_, n) in self._notes.items()}
        )
        self._notes, self.extra, self.straggler, self.first_rank = notes, extra, straggler, first
        if changed:
            self.version += 1
        return changed

    def annotate(self, a: Alert) -> Alert:
        """The rank's alert as the first-failure judgement words it (a copy), else itself."""
        found = self._notes.get(id(a))
        if found is None or found[0] is not a:
            return a
        note = found[1]
        return replace(
            a,
            evidence={**a.evidence, **dict(note.evidence)},
            checklist=note.checklist,
            message=note.prefix + a.message,
            title=note.title,
        )


_MISSING = object()


def _by_step(store: Store, name: str, lo: int, hi: int) -> dict[int, float]:
    s = store.series(name)
    if s is None:
        return {}
    i, j = s.index_of(lo), s.index_of(hi, after=True)
    return dict(zip(s.xs(i, j), s.ys[i:j], strict=True))


def _sig(extra: dict[str, list[Alert]]) -> tuple[Any, ...]:
    return tuple(
        (p, a.id, a.severity, a.step, a.last_step, a.message)
        for p, alerts in sorted(extra.items())
        for a in alerts
    )
