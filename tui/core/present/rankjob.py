"""One job's ranks in the viewer: every rank followed, drawn across ranks or one at a time.

A folder of rank files (``dltop-runs/<job>/rank<R>.jsonl``) is one run to the person
watching it, but each rank is its own process: NaN, OOM, memory growth and crashes happen
per rank, so each rank keeps its own :class:`RunModel` (store + rules engine), fed by its
own reader thread (``dirsource.DirectorySource``). What only the ranks side by side can tell
is computed from those models at the UI's fixed rate, never per record; :class:`JobView`
here ties it together for the app, the parts live beside it:

- **charts across ranks** (``jobview.job_chart``): each rank's series is decimated to the
  chart's buckets by its own store (block summaries: O(width) per rank, not O(steps)),
  then per bucket the median across ranks is drawn as the line, with the min–max of
  the ranks as a band under the panel's main series. Cost per redraw: O(ranks × width)
  per series, only for the panels whose series changed (:func:`job_signature`);
- **the rank table** (``jobview``): per rank its step, step time, data wait,
  memory, status and alert count, from the last 50 points of its series;
- **the cross-rank rules** (``crossrank.CrossRank``, on the view's own thread): the straggler and the first failure of
  ``ranks.py``, the same code ``dltop check`` runs, judged again from scratch at most once
  a second over copies of the failure alerts, so it is idempotent and never writes into a
  rank's engine; its step timings are fed from the stores, a bounded number of rows per
  rank per judgement, so a huge replay catches up over a few ticks instead of freezing one;
- **alerts across ranks** (:meth:`JobView.alerts`): one badge per distinct alert (id and
  step), named with the ranks it fired on (``r0,2 Loss is NaN``); a focused rank shows
  its own alerts and checklist.

No Textual here (``tests/project/test_boundaries.py``): the app only draws what this returns.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..ranks.crossrank import JUDGE_EVERY, CrossRank
from ..ranks.jobs import RankLog
from ..rules.alerts import INFO, SEVERITY_RANK, Alert
from ..store.run import DELETED_NOTE
from ..text.safetext import visible
from . import panels
from .chartdata import ChartData
from .header_view import error_note
from .jobview import (
    BAND,
    RankRow,
    column,
    job_chart,
    job_signature,
    job_window,
    memory_text,
    recent,
    seconds_text,
    slowest_rank,
)
from .view_model import ViewState, alert_key, alerts_of, locked

if TYPE_CHECKING:
    from ..store.run import RunModel

JUDGE_SHARE = 0.2  # at most this share of a CPU: a judgement taking d waits d / share
MAX_NAMED = 4  # ranks named on a merged badge before "+N"

__all__ = [  # what other modules take from here (the job view's parts live beside it)
    "BAND", "CrossRank", "JobView", "RankLog", "RankRow", "column", "error_note",
    "job_chart", "job_signature", "job_window", "slowest_rank",
]  # fmt: skip

# ---------------------------------------------------------------------- the job view


def _named(ranks: list[RankLog]) -> str:
    """``r0,2``; ranks known only by their file are named by it."""
    numbered = all(r.rank is not None for r in ranks)
    names = [str(r.rank) if numbered else r.name for r in ranks]
    shown = ("r" if numbered else "") + ",".join(names[:MAX_NAMED])
    return shown + (f" +{len(names) - MAX_NAMED}" if len(names) > MAX_NAMED else "")


class JobView:
    """The viewer's handle on a job: which rank is in focus (``None``: all of them), the
    cross-rank verdicts, and the alerts and rows the app draws. ``source`` returns the
    ranks followed now (a directory source adds ranks whose files appear later)."""

    def __init__(self, source: Callable[[], Sequence[RankLog]]) -> None:
        self._source = source
        self.focus: str | None = None  # the focused rank's path
        self.cross = CrossRank()
        self.error: str | None = None  # why the cross-rank rules stopped (a bug), once
        self._owners: dict[str, RankLog] = {}  # merged alert key -> the rank it came from
        self._window_memo: tuple[Any, tuple[int, int]] | None = None
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        self._halt = False
        self._asked = 0  # judgements asked for now (poke), and given
        self._given = 0

    def ranks(self) -> tuple[RankLog, ...]:
        return tuple(self._source())

    @property
    def overlay(self) -> bool:
        """Overlaid runs (``overlay.OverlayView``), not the ranks of one job."""
        return False

    unit = "rank"  # what one row of the table is: a rank, or an overlaid run

    def window(self, state: ViewState) -> tuple[int, int]:
        """The steps every panel spans, found once per change of data or view (each
        panel's signature and chart asked every rank's bounds: 14 x 64 a tick)."""
        ranks = self.ranks()
        key = (tuple(int(r.model.version) for r in ranks), state.window)
        memo = self._window_memo
        if memo is None or memo[0] != key:
            memo = self._window_memo = (key, job_window(ranks, state))
        return memo[1]

    def chart(self, key: str, state: ViewState, buckets: int) -> ChartData:
        """A panel across ranks: the median line and the min–max band."""
        return job_chart(self.ranks(), key, state, buckets, self.window(state))

    def signature(self, key: str, state: ViewState) -> tuple[Any, ...]:
        return job_signature(self.ranks(), key, state, self.window(state))

    def panel_title(self, number: int, spec: panels.PanelSpec, rows: list[RankRow]) -> str:
        """Say in the title what the chart shows: the median across ranks (and the
        slowest rank on the step-time panel), or the one focused rank."""
        title = f"{number} {visible(spec.title)}"
        focused = self.focused()
        if focused is not None:
            return f"{title} · {focused.name}"
        if spec.key == "loss":
            return f"{title} · median of {len(rows)} ranks"
        slow = next((r.name for r in rows if r.slowest), None)
        if spec.key == "step_time" and slow is not None:  # first: a narrow panel cuts
            return f"{number} slowest {slow} · {visible(spec.title)}"
        return title

    @property
    def multi(self) -> bool:
        return len(self._source()) > 1

    def focused(self) -> RankLog | None:
        return next((r for r in self._source() if r.path == self.focus), None)

    @property
    def across(self) -> bool:
        """The charts show every rank (a job, nothing focused)."""
        return self.multi and self.focused() is None

    def cycle(self) -> RankLog | None:
        """Focus the next rank; after the last one, all ranks again (``None``)."""
        ranks = self.ranks()
        paths = [r.path for r in ranks]
        if self.focus not in paths:
            self.focus = paths[0] if len(paths) > 1 else None
        else:
            i = paths.index(self.focus) + 1
            self.focus = paths[i] if i < len(paths) else None
        return self.focused()

    def update(self, now: float, force: bool = False) -> None:
        """The cross-rank rules, when due (cheap when not: a clock comparison); what the
        judge thread runs, callable directly where no thread is wanted (tests)."""
        self.cross.update(self.ranks(), now, force)

    # -- the judge thread: the cross-rank rules off the UI thread ------------------------
    def start(self) -> None:
        """Judge on a daemon thread from now on: feeding a long replay's timings and the
        straggler's pass over every block cost far more than a UI tick may take."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="dltop-ranks", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._halt = True
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def poke(self) -> None:
        """Judge now, whatever the clock (the replay has been read to its end)."""
        self._asked += 1
        self._wake.set()

    def settled(self) -> bool:
        """Every judgement asked for with :meth:`poke` has been given."""
        return self._asked > 0 and self._given >= self._asked

    def _run(self) -> None:
        while not self._halt:
            asked = self._asked
            t0 = time.monotonic()
            try:
                self.cross.update(self.ranks(), t0, force=asked > self._given)
            except Exception as exc:  # a bug: the charts and per-rank rules go on without it
                self.error = f"cross-rank rules failed: {type(exc).__name__}: {exc}"
                return
            self._given = asked
            spent = time.monotonic() - t0
            self._wake.wait(max(JUDGE_EVERY, spent / JUDGE_SHARE))
            self._wake.clear()

    def version(self) -> tuple[int, ...]:
        """Changes when any rank's data or a cross-rank verdict changed."""
        return (*(int(r.model.version) for r in self._source()), self.cross.version)

    def who(self, r: RankLog) -> str:
        """A rank as the header names it: ``rank 3`` (a rank known by its file: its name)."""
        return f"rank {r.rank}" if r.rank is not None else r.name

    def error_note(self, shown: RunModel) -> str:
        """The header's note on the reader errors of the ranks not shown (``shown``'s own
        error is the header's already): a rank whose reader failed (an I/O error, its
        path now a directory) while another one is in view must not just stop drawing, and
        one whose file was deleted must not go unnoticed (the viewer holds its only copy)."""
        failed = []
        for r in self.ranks():
            if r.model is shown:
                continue
            with r.model.lock:
                err = r.model.source_error
                if not err and r.model.log_deleted:  # still read, from its open descriptor
                    err = DELETED_NOTE
            if err:  # its file by name only: the folder's path would leave no room for why
                base = os.path.basename(r.path.rstrip("/"))
                failed.append((self.who(r), err.replace(r.path, base) if base else err))
        return error_note(failed, self.unit)

    def rank_alerts(self, r: RankLog) -> list[Alert]:
        """One rank's alerts: its engine's (worded by the first-failure verdict) and the
        cross-rank ones that name it (straggler)."""
        with r.model.lock:
            engine = r.model.engine
            own = list(engine.alerts()) if engine is not None else []
        return [self.cross.annotate(a) for a in own] + self.cross.extra.get(r.path, [])

    def alerts(self, model: RunModel) -> list[Alert]:
        """What the badges show: a single log's alerts; a focused rank's; or across the
        ranks one badge per alert id and step, prefixed with the ranks it fired on."""
        ranks = self.ranks()
        if len(ranks) < 2:
            with locked(model):
                return alerts_of(model)
        focused = self.focused()
        if focused is not None:
            return self.rank_alerts(focused)
        groups: dict[str, list[tuple[RankLog, Alert]]] = {}
        for r in ranks:
            for a in self.rank_alerts(r):
                groups.setdefault(alert_key(a), []).append((r, a))
        out: list[Alert] = []
        owners: dict[str, RankLog] = {}
        for key, members in groups.items():
            # the rank that failed first tells the story, then the worst, then rank order
            owner, rep = min(
                members,
                key=lambda m: (
                    m[1].evidence.get("secondary") is True,
                    -SEVERITY_RANK.get(m[1].severity, 0),
                ),
            )
            owners[key] = owner
            named = list({id(r): r for r, _ in members}.values())
            out.append(replace(rep, title=f"{_named(named)} {rep.title}"))
        self._owners = owners
        return out

    def verdict(self, model: RunModel, now: float, lang: str = "en") -> tuple[str, str]:
        """(the verdict line, the severity of the fault it names) as ``dltop check`` says
        it: a single log's; a focused rank's; across the ranks, the first fault of the
        job (its rank named), with the cross-rank judgements (straggler, first failure,
        the rank a hung job waits for)."""
        from ..diagnosis.verdict import fault_line, primary_fault  # noqa: PLC0415

        ranks = self.ranks()
        focused = self.focused()
        chosen = [focused] if focused is not None else list(ranks)
        if len(ranks) < 2:
            chosen = []
        found: list[tuple[Alert, RankLog]] = [(a, r) for r in chosen for a in self.rank_alerts(r)]
        if not found:
            with locked(model):
                engine = model.engine
                fault = primary_fault(engine.alerts()) if engine is not None else None
                return model.verdict(now, lang), fault.severity if fault is not None else ""
        fault = primary_fault([a for a, _ in found])
        if fault is None:
            with locked(model):
                return model.verdict(now, lang), ""
        owner = next(r for a, r in found if a is fault)
        with locked(owner.model):
            engine = owner.model.engine
            facts = engine.facts() if engine is not None else {}
            steps = engine.steps if engine is not None else 0
        rank = owner.rank if focused is None else None
        line = fault_line(fault, facts, steps, lang, rank)
        return self.credit(line, owner if focused is None else None), fault.severity

    def credit(self, line: str, owner: RankLog | None) -> str:
        """The verdict as said across ranks (a rank names itself in ``fault_line``)."""
        return line

    def run_of(self, alert: Alert | None) -> RankLog | None:
        """The overlaid run an alert belongs to (``overlay.OverlayView``); a job: none."""
        return None

    def owner(self, alert: Alert | None, model: RunModel) -> RunModel:
        """The model whose facts explain ``alert``: the rank it came from."""
        focused = self.focused()
        if focused is not None:
            return focused.model
        if alert is not None:
            r = self._owners.get(alert_key(alert))
            if r is not None:
                return r.model
        return model

    def crash_model(self, model: RunModel) -> RunModel:
        """Whose crash the banner tells across ranks: the rank that failed first."""
        focused = self.focused()
        if focused is not None:
            return focused.model
        first = self.cross.first_rank
        for r in self.ranks():
            if first is not None and r.rank == first:
                return r.model
        return model

    def rows(self, now: float) -> list[RankRow]:
        """The rank table, in rank order; ``[]`` for a single log."""
        ranks = self.ranks()
        if len(ranks) < 2:
            return []
        slow = self.slowest(ranks)
        out = []
        for r in ranks:
            alerts = [a for a in self.rank_alerts(r) if a.active and a.severity != INFO]
            worst = max((a.severity for a in alerts), key=SEVERITY_RANK.__getitem__, default="")
            first = any(
                a.evidence.get("first_rank") is not None and a.evidence.get("secondary") is False
                for a in alerts
            )
            with r.model.lock:
                store = r.model.store
                meta = store.meta or {}
                state = r.model.status(now)
                out.append(
                    RankRow(
                        name=r.name,
                        host=visible(
                            meta.get("host") or "", 24
                        ),  # cut before escaping: never half an escape
                        step=str(store.last_step) if store.last_step is not None else "—",
                        step_time=seconds_text(recent(store, "step_time")),
                        data_wait=seconds_text(recent(store, "data_time")),
                        memory=memory_text(store),
                        status=state.status if state is not None else "unknown",
                        alerts=str(len(alerts)) if alerts else "—",
                        worst=worst,
                        slowest=slow is not None and slow.path == r.path,
                        focused=r.path == self.focus,
                        first_failure=first,
                        read_error=bool(r.model.source_error),
                    )
                )
        return out

    def slowest(self, ranks: Sequence[RankLog]) -> RankLog | None:
        """The rank the table marks ``slowest`` (``jobview.slowest_rank``)."""
        return slowest_rank(ranks, self.cross)

    def note(self) -> str:
        """The header's rank note: which rank the screen shows."""
        ranks = self.ranks()
        if len(ranks) < 2:
            return ""
        focused = self.focused()
        if focused is None:
            return f"all {len(ranks)} ranks"
        return f"{focused.name} of {len(ranks)} ranks"
