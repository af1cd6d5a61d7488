"""The dashboard's job side: which rank the screen shows, and what a job adds to it.

A folder of rank files opens as one job (``dirsource.DirectorySource`` follows every rank);
the charts show the ranks together (``rankjob.job_chart``: median line, min–max band),
the rank table lists them, and ``f`` focuses one rank after the other, then all again.
Focusing a rank makes its model the app's ``model``: the header, the charts, the crash
banner, the alerts and their checklists are then that rank's, by the same code that
shows a single log. This mixin holds that wiring so ``app.py`` stays about the screen.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from textual.css.query import NoMatches
from textual.widgets import Static

from ..core.diagnosis.ticks import Ticks
from ..core.present import rankjob
from ..core.present import view_model as vm
from ..core.present.jobview import pick_rows
from ..core.text.i18n import tr
from ..core.text.safetext import visible
from .mixin_base import AppMixin
from .rank_table import RankTable

if TYPE_CHECKING:
    from ..core.diagnosis.status import RunState
    from ..core.present.crash_view import CrashInfo
    from ..core.rules.alerts import Alert
    from ..core.sources.filesource import FileSource
    from ..core.sources.foreign_source import ForeignSource
    from ..core.sources.overlay_source import OverlaySource
    from ..core.sources.socket_source import SocketSource
    from ..core.store.run import RunModel

HINT_RANKS = "q quit ? help 1-9 zoom m more l log s smooth g goto a alerts c list f rank"


class RankFocus(AppMixin):
    """Mixed into ``DltopApp``: the job view, the ``f`` key, the rank table."""

    model: RunModel
    source: str | None
    primary: RunModel  # the model the app was started with (rank 0 of a job)
    reader: FileSource | ForeignSource | SocketSource | OverlaySource | None
    state: vm.ViewState
    ticks: Ticks
    lang: str
    job: rankjob.JobView
    _drawn: dict[str, Any]
    _judged_end = False  # the verdict after the replay's last record was asked for
    _said_error = False
    _hinted = False  # the hint line names the rank key

    if TYPE_CHECKING:  # what DltopApp provides

        def redraw(self) -> None: ...

    def _rank_logs(self) -> tuple[rankjob.RankLog, ...]:
        ranks = getattr(self.reader, "ranks", None)
        return tuple(ranks) if ranks else (rankjob.RankLog(None, "", self.primary),)

    # ------------------------------------------------------------------ drawing
    def _chart(self, key: str, buckets: int) -> vm.ChartData:
        """A panel's data: across ranks (or overlaid runs), or the shown model's own."""
        if self.job.across:
            return self.job.chart(key, self.state, buckets)
        with vm.locked(self.model):
            return vm.panel_chart(self.model, key, self.state, buckets)

    def _signature(self, key: str) -> tuple[object, ...]:
        if self.job.across:
            return self.job.signature(key, self.state)
        return vm.panel_signature(self.model, key, self.state)

    def _alerts(self) -> list[Alert]:
        return self.job.alerts(self.model)

    def _ticks_for(self, alert: Alert | None) -> tuple[Ticks, str]:
        """Where an alert's ticks are kept: beside the log the alert came from, under its
        plain key (an overlaid run's badge is ``B:nan_loss@128``, its sidecar says
        ``nan_loss@128``), else beside the log shown."""
        if alert is None:
            return self.ticks, ""
        run = self.job.run_of(alert) if self.job.overlay else None
        if run is None:
            return self.ticks, vm.alert_key(alert)
        return self._ticks_beside(run.path), vm.alert_key(replace(alert, run=None))

    def _ticks_beside(self, path: str | None) -> Ticks:
        """The one :class:`Ticks` of a log's sidecar: the checklist pane, the focus key
        and the report key share it, so a tick made through one is seen by the others."""
        cache: dict[str | None, Ticks] = self.__dict__.setdefault("_run_ticks", {})
        kept = cache.get(path)
        if kept is None:
            kept = cache[path] = Ticks.beside(path)
        return kept

    def _shown_source(self, source: str | None) -> str | None:
        """What the screen shows came from: an overlay's focused run, else ``source``."""
        focused = self.job.focused() if self.job.overlay else None
        return focused.path if focused is not None else source

    def _checklist_model(self, alert: Alert) -> RunModel:
        return self.job.owner(alert, self.model)

    def _crash(self, now: float, run_state: RunState | None) -> CrashInfo | None:
        """The crash banner: across ranks, the rank that failed first tells it."""
        shown = self.job.crash_model(self.model)
        if shown is self.model:
            return vm.crash_info(self.model, run_state)
        with vm.locked(shown):
            return vm.crash_info(shown, shown.status(now))

    def _judge_ranks(self) -> None:
        """The cross-rank rules run on their own thread from a job's first tick; once the
        replay has been read to its end they are asked for their verdict at once."""
        if not self.job.multi:
            return
        self.job.start()
        if getattr(self, "ended", False) and not self._judged_end:
            self._judged_end = True
            self.job.poke()
        if self.job.error and not self._said_error:
            self._said_error = True
            self.notify(visible(self.job.error), severity="error", timeout=10)

    def _draw_ranks(self, now: float) -> None:
        """The rank table and the step-time panel's title, at every tick of a job (cheap:
        a few medians of 50 points per rank; the table is laid out only when it changed)."""
        if not self.job.multi:
            return
        rows = self.job.rows(now)
        try:
            table = self.query_one(RankTable)
        except NoMatches:
            return
        shown, more = pick_rows(rows)  # a big job: the ranks that matter, and a count
        table.show(shown, self.job.unit, more)
        self._set_titles(rows)
        self._show_rank_hint()  # a second rank's file may appear after the start

    def _set_titles(self, rows: list[rankjob.RankRow]) -> None:
        """Say in the titles what the charts show (the job view words them)."""
        for i, spec in enumerate(vm.PANELS, start=1):
            shown = replace(spec, title=tr(spec.title, self.lang))  # the person's language
            title = self.job.panel_title(i, shown, rows)
            widget = self.query_one(f"#panel-{spec.key}")
            if widget.border_title != title:
                widget.border_title = title

    def _rank_note(self) -> str:
        if self.job.multi:
            return self.job.note()
        reader = self.reader
        return vm.rank_note(getattr(reader, "files", []), getattr(reader, "chosen", None))

    def _rank_lines(self) -> list[str]:
        reader = self.reader
        files = getattr(reader, "files", [])
        chosen = getattr(reader, "chosen", None)
        focused = self.job.focused()
        if focused is not None:
            chosen = next((f for f in files if f.path == focused.path), chosen)
        return vm.rank_lines(files, chosen)

    def _show_rank_hint(self) -> None:
        if self.job.multi and not self._hinted:
            self._hinted = True
            self.query_one("#hint", Static).update(
                HINT_RANKS.replace("f rank", f"f {self.job.unit}")
            )

    # ------------------------------------------------------------------ the key
    def action_focus_rank(self) -> None:
        """``f``: the next rank alone; after the last, every rank again. The selected
        alert stays selected when the new view has it (same id and step)."""
        if not self.job.multi:
            self.notify("one log: no other rank to show", timeout=2)
            return
        shown = self.job.cycle()
        self.model = shown.model if shown is not None else self.primary
        reader = self.reader
        chosen = getattr(reader, "chosen", None)
        path = shown.path if shown is not None else getattr(chosen, "path", None)
        # ticks are saved beside the log whose checklist they tick (all runs of an
        # overlay again: run A's, as at the start)
        self.ticks = self._ticks_beside(path or self.source)
        keys = {vm.alert_key(a) for a in self.job.alerts(self.model)}
        selected = self.state.selected if self.state.selected in keys else None
        self.state = vm.replace_state(self.state, selected=selected, cursor=None, window=None)
        self._drawn.clear()
        self.notify(f"showing {self.job.note()}", timeout=2)
        self.redraw()
