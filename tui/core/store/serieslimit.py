"""How many series one run's store may hold, and what it says of the fields it refused.

Why: every numeric field of a record becomes a series, named by the writer. A log that
writes a new field name on every step (``sample_123``, a metric keyed by an id, a list
of 100 k floats) made the store create a series per name: 20 k steps of such a log
took 7 s to ingest (each batch reads every column it has seen) and every chart list
grew with it. A log's shape must not decide how long we work: past ``MAX_SERIES`` new
names are refused, counted, and the header says so; no value of an admitted series is
ever dropped.
"""

from __future__ import annotations

from ....probe.schema import STEP_FIELDS

MAX_SERIES = 1024  # far above a real run: ~15 step fields, eval sets, 8 GPUs x ~10 sys fields
_REMEMBERED = 4096  # refused names kept to count each once; past it the count says "+"
# always admitted, whatever came first: the log format's own step fields and every series
# the dashboard's panels draw (a log whose first batch holds 5 000 fields in hash order,
# or fills the limit before its first sys sample, still charts its loss and memory;
# tests/store/test_store.py checks that every panel's series is here)
RESERVED = frozenset(STEP_FIELDS) | {
    "eval.loss", "sys.rss", "sys.gpus.0.util", "sys.gpus.0.mem_used",
}  # fmt: skip


class SeriesBudget:
    """The store's admission of new series names (the store asks before creating one)."""

    __slots__ = ("limit", "refused", "more", "_names")

    def __init__(self, limit: int = MAX_SERIES) -> None:
        self.limit = limit
        self.refused = 0  # distinct names refused (up to _REMEMBERED of them)
        self.more = False  # more were refused than counted
        self._names: set[str] = set()

    def admits(self, have: int, name: str = "") -> bool:
        """Whether a store holding ``have`` series may create ``name`` (a reserved name
        always; the limit is exceeded by those at most)."""
        return have < self.limit or name in RESERVED

    def refuse(self, name: str) -> None:
        if name in self._names:
            return
        if len(self._names) >= _REMEMBERED:
            self.more = True
            return
        self._names.add(name)
        self.refused += 1

    def note(self) -> str:
        """The header's word on it ('' when nothing was refused): digits only, no log text."""
        if not self.refused and not self.more:
            return ""
        plus = "+" if self.more else ""
        return f"{self.refused}{plus} fields not charted (a run keeps {self.limit} series)"
