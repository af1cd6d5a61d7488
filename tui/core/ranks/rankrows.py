"""The rank table of a job: one row per rank, every field ready to print, and which rank
is the slowest. No Textual here (``tests/test_boundaries.py``); ``app/rank_table.py``
lays the rows out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..present.fmt import compact, compact_bytes
from ..rules.alerts import SEVERITY_RANK
from ..rules.window import median_of
from .compare import EXCESS_SHARE, MIN_EXCESS_S
from .crossrank import CrossRank
from .ranklog import RankLog

if TYPE_CHECKING:
    from ..store.runstore import Store

RECENT = 50  # points of a rank's series its table row summarises (as the header's steps/s)
SLOW_STEP = 1.1  # without a verdict, a rank this much slower than the median is "slowest"


@dataclass(frozen=True)
class RankRow:
    """One rank's line in the rank table, every field ready to print."""

    name: str
    host: str
    step: str
    step_time: str
    data_wait: str
    memory: str
    status: str
    alerts: str
    worst: str  # the severity of its worst active alert ("" when none): the row's colour
    slowest: bool
    focused: bool
    first_failure: bool
    # its reader hit a problem: the table marks the row "read error", the header
    # (``JobView.error_note``) says what it is
    read_error: bool = False


def recent(store: Store, name: str) -> float | None:
    """Median of the last ``RECENT`` finite, non-negative points: one slow step does not
    make a rank look slow."""
    s = store.series(name)
    if s is None or not len(s):
        return None
    vals = [v for v in s.ys[-RECENT:] if v == v and 0 <= v < math.inf]
    return median_of(vals)


@dataclass
class _Timing:
    step: float | None
    data: float | None
    forward: float | None


def _timings(r: RankLog) -> _Timing:
    with r.model.lock:
        store = r.model.store
        return _Timing(
            recent(store, "step_time"), recent(store, "data_time"), recent(store, "forward_time")
        )


def slowest_rank(
    ranks: Sequence[RankLog], cross: CrossRank | None = None, *, by_step: bool = False
) -> RankLog | None:
    """The rank holding the job back: the straggler verdict when there is one; else the
    rank whose own share of the step (data wait + forward) stands out against the others'
    median by the straggler's bar; else one whose step time is 10 % over the median. In
    data-parallel training every rank's step takes as long (they wait for each other), so
    a rank is only named when something stands out; ``None`` otherwise.

    Whichever rule names it, the rank named is never one another rank takes 10 % longer
    per step than: the table shows both step times, and "slowest" on a 54 ms row beside a
    78 ms one was a lie. ``by_step``: only the step time counts (overlaid runs are
    unrelated runs: none waits for another, the slowest is the one whose steps are)."""
    if len(ranks) < 2:
        return None
    times = [(r, _timings(r)) for r in ranks]
    own = [(r, (t.data or 0.0) + (t.forward or 0.0), t.step) for r, t in times if t.step]
    if len(own) < 2:
        return None
    top = max(s or 0.0 for _, _, s in own)
    contenders = [x for x in own if (x[2] or 0.0) * SLOW_STEP >= top]
    if not by_step:
        if cross is not None and cross.straggler is not None:
            for r, _, _ in contenders:
                if r.path == cross.straggler:
                    return r
        slow, busy, step_t = max(contenders, key=lambda x: x[1])
        others = median_of(b for r, b, _ in own if r is not slow) or 0.0
        if busy - others >= max(MIN_EXCESS_S, EXCESS_SHARE * (step_t or 0.0)):
            return slow
    slow, _, step_t = max(own, key=lambda x: x[2] or 0.0)
    if step_t and step_t >= SLOW_STEP * (median_of(s or 0.0 for _, _, s in own) or 0.0):
        return slow
    return None


def memory_text(store: Store) -> str:
    for name in ("mem_allocated", "sys.rss"):
        v = store.latest(name)
        if v is not None:
            return compact_bytes(v)
    return "—"


def seconds_text(v: float | None) -> str:
    return compact(v, "s") if v is not None else "—"


TABLE_ROWS = 8  # rows the rank table shows (its height above the charts is 9 lines)


def pick_rows(rows: list[RankRow], limit: int = TABLE_ROWS) -> tuple[list[RankRow], str]:
    """The rows worth a line when a job has more ranks than the table has lines, in rank
    order, and a note on the rest ("+56 ranks: 56 running").

    Which first: the focused rank, the rank that failed first, those whose log can no
    longer be read, the slowest, then the ranks with the worst alerts, then crashed or
    stalled ones, then the lowest ranks. A 64-row
    table scrolled in 8 lines showed ranks 0-7, where nothing was happening, and laying
    out 64 rows on every tick cost more than reading the 64 files.
    """
    if len(rows) <= limit:
        return rows, ""

    def rank(i_row: tuple[int, RankRow]) -> tuple[int, ...]:
        i, r = i_row
        return (
            not r.focused,
            not r.first_failure,
            not r.read_error,
            not r.slowest,
            -SEVERITY_RANK.get(r.worst, 0),
            r.status not in ("crashed", "stalled"),
            i,
        )

    chosen = sorted(i for i, _ in sorted(enumerate(rows), key=rank)[:limit])
    shown = [rows[i] for i in chosen]
    taken = set(chosen)
    rest = [r for i, r in enumerate(rows) if i not in taken]
    counts: dict[str, int] = {}
    for r in rest:
        counts[r.status] = counts.get(r.status, 0) + 1
    what = ", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda sn: -sn[1]))
    return shown, f"+{len(rest)} more: {what}"
