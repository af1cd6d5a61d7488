"""RunModel: one run's Store + RuleEngine + counters, fed by a source, read by the UI.

The reader thread calls :meth:`RunModel.ingest` per parsed chunk; the UI's timer takes
``model.lock``, compares ``model.version`` with the version it last drew, and redraws
only what changed (``store.changed(since)``). A truncated or replaced log is a new run:
the source calls :meth:`reset`, which swaps in a fresh store and engine, counts the
restart and raises ``restarted`` so the UI can say so.

Huge replays: the source may show the tail of the log first (``ingest_preview``), build
the full run's charts in a private :class:`Staging` without holding the lock and
:meth:`adopt` it in one swap (``loading`` says how far that got), then re-read the log
to bring a fresh rules engine up to date (``diagnosing``) while live records queue for
it, and :meth:`adopt_engine`. The charts come first because the rules cost ~4x more per
record than the store (see ``benchmarks/replay.py``).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ....probe.schema import Record, Records
from ..diagnosis.status import RunState, explain_unrecorded_end, local_pid_alive, run_state
from ..rules import Config, RuleEngine
from ..rules.alerts import Alert
from ..rules.facts import Fact
from .pipeline import feed_engine, make_engine
from .runstore import Store

SETTLE_S = 1.0  # seconds without records before a crashed run's last block is judged


class Staging:
    """A store (and engine, unless ``rules`` is False) built off-lock, adopted in one swap."""

    def __init__(self, version: int, rules: bool = True, config: Config | None = None) -> None:
        self.store = Store(version=version)
        self.engine, self.engine_error = make_engine(config) if rules else (None, None)
        self.rules = rules
        self.records = 0

    def ingest(self, records: Records) -> None:
        self.store.ingest(records)
        if self.engine_error is None:
            self.engine_error = feed_engine(self.engine, records)
        self.records += len(records)


# what a viewer says of a log deleted while it follows it (the header of the run in view,
# the job header for another rank): the reader goes on from its open descriptor
DELETED_NOTE = "log file deleted: this viewer holds the only copy"


class RunModel:
    """Everything the viewer knows about one run. Hold ``lock`` while reading.

    ``config`` (a ``rules.Config``) sets the rule thresholds of every engine this model
    builds: now, after a reset, and in a backfill (``make_engine(model.config)``)."""

    def __init__(self, label: str, config: Config | None = None) -> None:
        self.label = label
        self.config = config
        self.lock = threading.RLock()
        self.version = 0  # bumps on every ingest, reset and adopt; never goes back
        # bumps when ``store`` is replaced (reset, tail preview, backfill adopted): redraw all
        self.generation = 0
        self.store = Store(version=0)
        self.engine, engine_error = make_engine(config)
        self.records = 0  # records ingested into this run
        self.malformed = 0  # lines the decoder skipped in this run
        self.resets = 0  # truncations / replacements seen since the viewer started
        self.restarted = False  # True after a reset until the UI calls acknowledge_restart()
        self.reset_reason = ""
        self.loading: float | None = None  # backfill progress 0..1; None when complete
        # rules backfill progress 0..1 while the charts are whole but alerts are not yet;
        # None when the rules have seen every record
        self.diagnosing: float | None = None
        self._backlog: Records | None = None
        self.source_error: str | None = None  # a one-line problem the reader thread hit
        # the followed log was deleted while open: the reader goes on from its descriptor,
        # but once this viewer closes, nothing of the run is left on disk: say so
        self.log_deleted = False
        self.log_path: str | None = None  # the file a FileSource follows (for its disk's state)
        self.engine_error: str | None = engine_error  # why there is no diagnosis (a rule raised)
        self._pid_cache: tuple[float, Any, bool | None] = (0.0, None, None)
        self._judged_engine: RuleEngine | None = None  # whose last partial block was judged
        self._fed_at = time.monotonic()  # when records last reached this run
        self.settle_s = SETTLE_S
        self._verdict: tuple[tuple[Any, ...], str] | None = None  # (what it was made from, line)

    # -- the reader thread -----------------------------------------------------------------
    def ingest(self, records: Records, malformed: int | None = None) -> None:
        """Add records to store and engine under the lock; ``malformed`` is the decoder's
        running count of skipped lines for this run."""
        with self.lock:
            if records:
                self.store.ingest(records)
                if self._backlog is not None:  # the rules are catching up: they get these later
                    self._backlog.extend(records)
                elif self.engine_error is None:
                    self.engine_error = feed_engine(self.engine, records)
                self.records += len(records)
                self._fed_at = time.monotonic()
                self._bump()
            if malformed is not None and malformed != self.malformed:
                self.malformed = malformed
                self._bump()

    def reset(
        self, reason: str = "the log was truncated or replaced", restart: bool = True
    ) -> None:
        """Start over as a new run (truncation / replacement), keeping the restart visible.

        ``restart=False``: the same run read again from a fuller source (the live socket
        closed, its log file follows): the history is rebuilt, nothing is flagged."""
        with self.lock:
            self._bump()
            self.store = Store(version=self.version)
            self.generation += 1
            self.engine, self.engine_error = make_engine(self.config)
            self.records = 0
            self.malformed = 0
            if restart:
                self.resets += 1
                self.restarted = True
            self.reset_reason = reason
            self.loading = None
            self.diagnosing = None
            self._backlog = None

    def set_log_deleted(self, deleted: bool) -> None:
        with self.lock:
            if deleted != self.log_deleted:
                self.log_deleted = deleted
                self._bump()

    def acknowledge_restart(self) -> None:
        with self.lock:
            self.restarted = False

    def ingest_preview(self, records: Records) -> None:
        """Start showing the tail of a huge log: a fresh store, no rules (they need the run
        in order); ``loading`` stays below 1 until :meth:`adopt` brings the whole run."""
        with self.lock:
            self.store = Store(version=self.version + 1)
            self.records = 0
            self.loading = 0.0
            self.generation += 1
            self._bump()
        self.extend_preview(records)

    def extend_preview(self, records: Records) -> None:
        """More of the preview: the rest of the tail, or records appended to a live log
        while its backfill runs (the backfill feeds them to the rules, in order)."""
        if not records:
            return
        with self.lock:
            self.store.ingest(records)
            self.records += len(records)
            self._bump()

    def staging(self, rules: bool = True) -> Staging:
        """A private store (+ engine) for a backfill; ``rules=False``: charts first, the
        rules follow via :meth:`begin_rules_backfill` / :meth:`adopt_engine`."""
        return Staging(self.version, rules, self.config)

    def set_loading(self, fraction: float) -> None:
        with self.lock:
            self.loading = min(1.0, max(0.0, fraction))

    def adopt(self, staged: Staging, malformed: int, rules_follow: bool = False) -> None:
        """Swap a finished backfill in: from now on the full run is shown and followed.
        ``rules_follow``: the rules are backfilled next (:meth:`begin_rules_backfill`, in
        the same step, so no reader sees the charts done and the rules not yet begun)."""
        with self.lock:
            if rules_follow:
                self.begin_rules_backfill()
            self.version = max(self.version, staged.store.version) + 1
            staged.store.touch_all(self.version)
            self.generation += 1
            self.store = staged.store
            if staged.rules:
                self.engine = staged.engine
                self.engine_error = staged.engine_error
            self.records = staged.records
            self._fed_at = time.monotonic()
            self.malformed = malformed
            self.loading = None

    def begin_rules_backfill(self) -> None:
        """The charts hold the whole run but the rules do not yet: until
        :meth:`adopt_engine`, records ingested live are queued for the new engine."""
        with self.lock:
            self._backlog = []
            self.diagnosing = 0.0

    def set_diagnosing(self, fraction: float) -> None:
        with self.lock:
            self.diagnosing = min(1.0, max(0.0, fraction))

    def adopt_engine(self, engine: RuleEngine | None, error: str | None) -> None:
        """Swap in an engine that has seen the run up to where live ingestion began; it
        takes the queued records first, so it has seen every record once, in order."""
        with self.lock:
            backlog, self._backlog = self._backlog or [], None
            if error is None and engine is not None and backlog:
                error = feed_engine(engine, backlog)
            self.engine, self.engine_error = engine, error
            self._fed_at = time.monotonic()
            self.diagnosing = None
            self._bump()

    def _bump(self) -> None:
        self.version = max(self.version + 1, self.store.version)
        self.store.version = self.version

    # -- the UI ----------------------------------------------------------------------------
    @property
    def meta(self) -> Record | None:
        return self.store.meta

    def pid_alive(self, now: float | None = None) -> bool | None:
        """Is the run's process alive? ``None`` when we cannot tell (another host, no meta).

        Checked at most once a second. A live pid that started after the run's ``meta``
        time is a reused pid, hence dead for us.
        """
        now = time.time() if now is None else now
        meta = self.store.meta
        cached_at, cached_meta, cached = self._pid_cache
        if cached_meta is meta and 0 <= now - cached_at < 1.0:
            return cached
        alive = local_pid_alive(meta)
        self._pid_cache = (now, meta, alive)
        return alive

    def status(self, now: float | None = None) -> RunState | None:
        """The engine's RunState (running / stalled / finished / crashed / unknown).

        A run seen crashed (its process gone without an exit record: SIGKILL, the kernel's
        OOM killer) writes no more steps, so its last partial block of steps is judged
        now, once, as ``dltop check`` judges it at the end of the file; but only once no
        record has come for ``SETTLE_S``: a dead pid whose log still grows (a copy being
        written, a reader still going through the file) is not over, and judging a block
        early would make the rules' later answers differ from ``check``'s."""
        with self.lock:
            if self.engine is None:
                return None
            state = explain_unrecorded_end(
                run_state(self.engine, now, self.pid_alive(now)), self.log_path
            )
            if (
                state.status == "crashed"
                and self._judged_engine is not self.engine
                and time.monotonic() - self._fed_at >= self.settle_s
            ):
                self._judged_engine = self.engine
                self.finish()
            return state

    def alerts(self) -> list[Alert]:
        with self.lock:
            return self.engine.alerts() if self.engine is not None else []

    def finish(self) -> None:
        """No more records will come (another tool's log replayed whole, a run seen crashed):
        the rules' end-of-run judgements, as ``dltop check`` makes them at the end of the file."""
        with self.lock:
            if self.engine is not None and self.engine_error is None and self._backlog is None:
                try:
                    self.engine.finish()
                except Exception as exc:  # a bug in one rule: diagnosis off, charts alive
                    self.engine_error = f"rules engine failed: {type(exc).__name__}: {exc}"
                self._bump()

    def verdict(self, now: float | None = None, lang: str = "en") -> str:
        """The one-line verdict (``dltop.tui.core.diagnosis.verdict``), made again only when the
        records or the status changed: the header asks at every tick."""
        with self.lock:
            state = self.status(now)
            if self.engine is None or self.engine_error is not None:
                why = self.engine_error or "no diagnosis"
                return f"{state.reason if state is not None else 'no records yet'}; {why}"
            key = (
                self.version,
                getattr(state, "status", None),
                getattr(state, "reason", None),
                lang,
            )
            if self._verdict is None or self._verdict[0] != key:
                from ..diagnosis.verdict import verdict  # noqa: PLC0415 - loads data files

                self._verdict = (key, verdict(self.engine, state, lang))
            return self._verdict[1]

    def facts(self) -> dict[str, Fact]:
        with self.lock:
            return self.engine.facts() if self.engine is not None else {}
