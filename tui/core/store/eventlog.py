"""The ``event`` records one run's store keeps: bounded, whatever a log or a socket sends.

Why: the store kept every event it was given. A socket sending ``note`` events drove the
viewer to 1.3 GB in 15 s, and ``dltop report`` held 514 MB for an 88 MB log of them
(issue 29), while ``dltop check``, which keeps none, stayed at 27 MB. The rules take
every event as it streams past (exceptions, OOMs, signals, exits, phases, drops, set-up:
``rules/engine.py``, ``ending.py``) and keep what they judge by themselves; what the
store holds is for people and the report: how the run began and ended, and the events
that say how it went. So :class:`EventLog`

- counts every event by type (at most ``MAX_TYPES`` type names, the rest as ``OTHER``);
- keeps the first and the last ``KEEP`` (100) events of the types nothing judges
  (``note``, anything unknown), together;
- keeps, of each type in ``KEY_TYPES`` (what the rules, the status, the crash banner and
  the report read), the first and the last ``KEY_KEEP`` (1 000): a million-step run with
  an evaluation phase every 1 000 steps has them all;
- holds at most ``MAX_BYTES`` of them, measured as their JSON text: a line may be
  ``schema.MAX_LINE`` (8 MiB), so counts alone bound nothing. The first ones take at
  most half of it (an event that would pass it ends the first ones), the last ones the
  rest (they give way oldest first), so the end of a run is always there;

and :meth:`EventLog.note` says where a limit bit ("12345 note events, the first and last
100 kept"), in the viewer's header and the report. The log itself is never touched: what
is not kept here is still there for ``dltop check`` and a later replay.
"""

from __future__ import annotations

from collections import Counter, deque

import msgspec

from ....probe import schema
from ....probe.schema import Record, Records
from ..text.fmt import nbytes
from ..text.safetext import visible

KEEP = 100  # first and last events of the types nothing judges (notes, unknown types)
KEY_KEEP = 1000  # first and last events of each type in KEY_TYPES
MAX_BYTES = 16 << 20  # JSON text of every event kept, in all
KEY_TYPES = frozenset(
    {
        schema.EV_EXCEPTION,
        schema.EV_OOM,
        schema.EV_SIGNAL,
        schema.EV_EXIT,
        schema.EV_PHASE,
        schema.EV_DROPPED,
        schema.EV_CONFIG,
        schema.EV_WARNING,
    }
)
MAX_TYPES = 64  # type names counted by name; a log inventing one per event fills no memory
MAX_TYPE_TEXT = 40  # characters of a type name kept as its count's key
OTHER = "(other types)"
_NOTE_TYPES = 3  # types named in the note; the rest are counted


_encode = msgspec.json.Encoder().encode


def _size(rec: Record) -> int:
    """The record's JSON text length: what one event costs the budget (C speed, linear in
    the record, as decoding it was). A record that will not encode counts as a whole line."""
    try:
        return len(_encode(rec))
    except Exception:
        return schema.MAX_LINE


_Item = tuple[int, int, str, Record]


class _Keep:
    """The first ``n`` and the last ``n`` events of one stream, as (order, size, type,
    record)."""

    __slots__ = ("n", "first", "last", "opening")

    def __init__(self, n: int) -> None:
        self.n = n
        self.opening = True  # still taking first events (until n, or half the budget)
        self.first: list[_Item] = []
        self.last: deque[_Item] = deque()


class EventLog:
    """Counts, the first and last events, and the events that say how a run went."""

    __slots__ = (
        "counts",
        "total",
        "held",
        "held_first",
        "_seq",
        "_other",
        "_key",
        "_kept_of",
        "_over",
    )

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()  # events per type (``OTHER`` past MAX_TYPES)
        self.total = 0  # events seen
        self.held = 0  # bytes (JSON text) of the events kept
        self.held_first = 0  # of which the first ones (at most half of MAX_BYTES)
        self._seq = 0
        self._other = _Keep(KEEP)  # the types nothing judges, together
        self._key: dict[str, _Keep] = {}  # one per type of KEY_TYPES seen
        self._kept_of: Counter[str] = Counter()  # events kept, per type key
        self._over = 0  # events not kept (or let go early) because of MAX_BYTES

    # -- writing -------------------------------------------------------------------------
    def add(self, rec: Record) -> None:
        """One event record, in log order (per event: a dict update, one encode)."""
        self.total += 1
        typ = rec.get("type")
        if type(typ) is not str:
            typ = "?"
        elif len(typ) > MAX_TYPE_TEXT:
            typ = typ[:MAX_TYPE_TEXT]
        counts = self.counts
        if typ in counts:
            counts[typ] += 1
        elif len(counts) < MAX_TYPES:
            counts[typ] = 1
        else:
            typ = OTHER
            counts[OTHER] += 1
        keep = self._other
        if typ in KEY_TYPES:
            found = self._key.get(typ)
            keep = found if found is not None else self._key.setdefault(typ, _Keep(KEY_KEEP))
        self._seq += 1
        size = _size(rec)
        last = keep.last
        if keep.opening and self.held_first + size > MAX_BYTES // 2:
            keep.opening = False  # the last ones keep the other half of the budget
        if keep.opening:
            keep.first.append((self._seq, size, typ, rec))
            self.held_first += size
            keep.opening = len(keep.first) < keep.n
        else:
            if len(last) == keep.n:
                _, gone, was, _ = last.popleft()
                self.held -= gone
                self._kept_of[was] -= 1
            last.append((self._seq, size, typ, rec))
        self.held += size
        self._kept_of[typ] += 1
        if self.held > MAX_BYTES:
            self._trim(keep)

    def _trim(self, keep: _Keep) -> None:
        """Let the oldest of the last events go until the budget holds: this stream's
        first, then the others' (a first event taken may have passed it)."""
        for k in (keep, self._other, *self._key.values()):
            last = k.last
            while self.held > MAX_BYTES and last:
                _, gone, was, _ = last.popleft()
                self.held -= gone
                self._kept_of[was] -= 1
                self._over += 1
            if self.held <= MAX_BYTES:
                return

    # -- reading -------------------------------------------------------------------------
    def events(self) -> Records:
        """The events kept, in log order."""
        keeps = [self._other, *self._key.values()]
        items = [it for k in keeps for part in (k.first, k.last) for it in part]
        items.sort(key=lambda it: it[0])
        return [rec for _, _, _, rec in items]

    def note(self) -> str:
        """Where a limit bit, in one line ('' when every event is kept): "12345 note
        events, the first and last 100 kept". Type names come from the log: escaped."""
        cut = [(n, t) for t, n in self.counts.items() if n > self._kept_of[t]]
        if not cut:
            return ""
        cut.sort(key=lambda c: -c[0])
        parts = []
        for n, t in cut[:_NOTE_TYPES]:
            limit = KEY_KEEP if t in KEY_TYPES else KEEP
            kept = self._kept_of[t]
            said = f"the first and last {limit} kept" if kept == 2 * limit else f"{kept} kept"
            parts.append(f"{n} {visible(t)} events, {said}")
        more = len(cut) - _NOTE_TYPES
        if more > 0:
            parts.append(f"{more} more types cut")
        if self._over:
            parts.append(f"events held are capped at {nbytes(MAX_BYTES)}")
        return "; ".join(parts)
