"""DltopApp: the live dashboard of one run.

Data flow (docs/dev/architecture.md): the source's reader thread ingests chunks into the
RunModel and posts ONE ``Ingested`` message per chunk; nothing is drawn then. A timer at
``refresh_hz`` (2-4 Hz) compares the model's version with what was last drawn and asks
only the panels whose data (or view) changed to pull fresh decimated data. Every number
shown comes from ``dltop.tui.core.present.view_model``; the widgets only draw it.

This module wires the source, the model and the screen together (layout, reader, timer);
the keys live in mixins, one concern each: ``view_keys.py`` (zoom, scale, pause, cursor,
go-to), ``alert_pane.py`` (alert selection and the checklist), ``exports.py`` (screenshot
and report) and ``rank_focus.py`` (a job's ranks or overlaid runs); ``mixin_base.py`` makes
each of them an ``App`` to the type checker.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, ClassVar

from textual import events, on
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Container, Horizontal
from textual.css.query import NoMatches
from textual.geometry import Size
from textual.widgets import Input, Static

from ..core.present import rankjob
from ..core.present import view_model as vm
from ..core.present.overlay import OverlayView
from ..core.sources.filesource import FileSource
from ..core.sources.foreign_source import ForeignSource
from ..core.sources.overlay_source import OverlaySource
from ..core.sources.socket_source import SocketSource, redact
from ..core.text.i18n import tr
from ..core.text.safetext import visible
from .alert_pane import AlertPane
from .badges import Badge, BadgeBar
from .cards import GpuPanel
from .chart import Chart
from .chart_thread import ChartThread
from .checklist import ChecklistPane, StepList
from .crash_banner import CrashBanner
from .exports import Exports
from .header import Header
from .help import HelpScreen
from .messages import Ingested, SourceEnded, SourceFailed
from .panel_set import ALWAYS, PanelSet
from .picker import PanelPicker
from .rank_focus import RankFocus
from .rank_table import RankTable
from .source_feed import SourceFeed
from .toast import notify_wrapped
from .view_keys import ViewKeys

if TYPE_CHECKING:
    from ..core.rules.config import Config
    from ..core.store.run import RunModel

COMPACT_WIDTH, COMPACT_HEIGHT = 110, 32
# fits 80 columns (the smallest supported terminal); the rest (e: svg) is in the help
HINT = "q quit ? help 1-9 zoom m more l log s smooth p pause ←→ g goto a alerts c list"
# ranks (or overlaid runs) from which the charts' data are worked out beside the event
# loop (see DltopApp._update_panels)
OFFLOOP_RANKS = 8
# seconds between GIL hand-overs while the dashboard runs (Python's: 5 ms): with a reader
# thread per rank and the charts' thread busy, the loop waited intervals for it at each key
SWITCH_INTERVAL = 0.001
FIXED_NOW_ENV = "DLTOP_FIXED_NOW"  # Unix seconds: freeze "now" (ages) for snapshots and demos


class DltopApp(RankFocus, ViewKeys, PanelSet, AlertPane, Exports, SourceFeed, App[int]):
    """The dashboard. ``source`` is a log path; ``model`` may be given instead (tests).
    ``config`` (``rules.Config``: ``--config FILE`` / ``--set KEY=VALUE``) sets the rule
    thresholds of every rules engine the viewer builds for this run."""

    CSS_PATH = "dltop.tcss"
    TITLE = "dltop"
    ENABLE_COMMAND_PALETTE = False
    # Textual's own escape would un-maximize behind our back (zoom state left behind):
    # escape is ours (action_reset_view), and restores a zoomed panel first.
    ESCAPE_TO_MINIMIZE = False
    AUTO_FOCUS = "#panel-loss"  # start on the loss chart; tab walks badges, panels, checklist
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "quit"),
        Binding("question_mark", "help", "help"),
        *[Binding(str(i), f"zoom({i})", f"panel {i}", show=False) for i in range(1, 10)],
        Binding("l", "toggle_log", "log scale"),
        Binding("s", "smoothing(1)", "smoothing +"),
        Binding("S", "smoothing(-1)", "smoothing -", show=False),
        Binding("t", "toggle_x_axis", "step / time axis"),
        Binding("p", "toggle_pause", "pause/follow"),
        Binding("left", "cursor(-1)", "cursor left", show=False),
        Binding("right", "cursor(1)", "cursor right", show=False),
        Binding("home", "cursor_home", show=False),
        Binding("end", "cursor_off", show=False),
        Binding("g", "goto", "go to step"),
        Binding("a", "next_alert", "next alert"),
        Binding("c", "toggle_checklist", "checklist"),
        Binding("m", "pick_panels", "more panels"),
        Binding("f", "focus_rank", "next rank / all ranks"),
        Binding("escape", "reset_view", show=False),
        Binding("e", "screenshot_svg", "screenshot"),
        Binding("r", "report", "report"),
    ]

    def __init__(
        self,
        source: str | None = None,
        *,
        follow: bool = True,
        refresh_hz: float = 3.0,
        lang: str = "en",
        model: RunModel | None = None,
        now: float | None = None,
        screenshot_dir: str | None = None,
        poll_interval: float = 0.1,
        config: Config | None = None,
        overlay: list[str] | None = None,
        panels: tuple[str, ...] = (),
        smoothing: float | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.chart_thread = ChartThread()  # the charts' data across many ranks (_update_panels)
        self._switch_was = sys.getswitchinterval()
        # ``dltop A B [C...]``: the runs overlaid (``source`` is then run A)
        self.overlay = list(overlay) if overlay and len(overlay) > 1 else None
        if self.overlay is not None:
            source = self.overlay[0]
        self.source = source
        self.follow = follow
        self.refresh_hz = min(4.0, max(2.0, refresh_hz))
        self.lang = lang
        fixed = now if now is not None else _env_float(FIXED_NOW_ENV)
        self.clock = vm.Clock(fixed)
        label = redact(source) if source else "run"  # a tcp://...?token= never on screen
        self.model = model if model is not None else vm.new_model(label, config)
        self.primary = self.model  # a job's rank 0; ``model`` is the rank shown (rank_focus.py)
        self.job = (
            OverlayView(self._rank_logs)
            if self.overlay is not None
            else rankjob.JobView(self._rank_logs)
        )
        self.state = vm.ViewState(panels=tuple(panels))
        if smoothing is not None:
            self.state = vm.replace_state(self.state, smoothing=smoothing)
        self._extra_widgets: dict[str, Chart] = {}  # picked panels (panel_set.py)
        self.ticks = self._ticks_beside(source)  # one Ticks per sidecar (rank_focus.py)
        self.screenshot_dir = screenshot_dir
        self.poll_interval = poll_interval
        self.reader: FileSource | ForeignSource | SocketSource | OverlaySource | None = None
        self.chunks = 0  # Ingested messages seen (one per chunk, never per record)
        self.ticks_drawn = 0  # timer ticks that found something to draw
        self.source_error: str | None = None
        self.ended = False
        self._drawn: dict[str, Any] = {}
        self._pane_user: bool | None = None  # None: follow the selection
        self._auto_explained = False  # the first critical alert's checklist was opened
        self._zoomed: str | None = None
        self.last_screenshot: str | None = None  # path of the latest `e` screenshot

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        yield Header(id="header")
        yield BadgeBar(id="badges")
        yield CrashBanner(id="crash")
        yield RankTable(id="ranks")
        with Horizontal(id="body"):
            with Container(id="panels"):
                for i, spec in enumerate(vm.PANELS, start=1):
                    provider = self._provider(spec.key)
                    widget: Chart | GpuPanel
                    if spec.key == "gpu":
                        widget = GpuPanel(provider, id=f"panel-{spec.key}")
                    else:
                        widget = Chart(provider, id=f"panel-{spec.key}")
                    widget.add_class("panel")
                    # a small terminal keeps three panels and one more (panel_set.py)
                    widget.set_class(spec.key not in ALWAYS and spec.key != "step_time", "-minor")
                    widget.border_title = f"{i} {visible(tr(spec.title, self.lang))}"
                    yield widget
            yield ChecklistPane(id="checklist")
        yield Input(
            placeholder="go to step (enter; escape cancels)",
            id="goto",
            type="integer",
            disabled=True,
        )
        yield Static(HINT, id="hint", markup=False)

    def on_mount(self) -> None:
        sys.setswitchinterval(min(self._switch_was, SWITCH_INTERVAL))  # given back on unmount
        self._apply_size_classes()
        if self.source is not None and self.reader is None:
            self._start_source(self.source)
            self._show_rank_hint()
        if self.ticks.error:  # a bad sidecar, said once; toggles say their own errors
            notify_wrapped(self, visible(self.ticks.error), severity="warning", timeout=8)
        self.set_interval(1.0 / self.refresh_hz, self.redraw, name="redraw")
        self.redraw()

    def on_unmount(self) -> None:
        sys.setswitchinterval(self._switch_was)
        self.chart_thread.close()
        self.job.stop()
        if self.reader is not None:
            self.reader.stop()

    def on_resize(self, event: events.Resize) -> None:
        # the event's size: ``self.size`` still holds the old one here, which left the
        # layout one resize behind (all panels squeezed into 80 columns after 160 -> 80)
        self._apply_size_classes(event.size)

    def _apply_size_classes(self, size: Size | None = None) -> None:
        w, h = size if size is not None else self.size
        compact = w < COMPACT_WIDTH or h < COMPACT_HEIGHT
        self.screen.set_class(compact, "-compact")

    # ------------------------------------------------------------- messages
    def on_ingested(self, message: Ingested) -> None:
        self.chunks += 1  # the timer draws; a message only says "there is news"

    def on_source_failed(self, message: SourceFailed) -> None:
        self.source_error = message.text
        notify_wrapped(self, visible(message.text), severity="error", timeout=10)

    def on_source_ended(self, message: SourceEnded) -> None:
        self.ended = True

    # ------------------------------------------------------------- drawing
    def _provider(self, key: str) -> Any:
        def provide(buckets: int) -> vm.ChartData:
            return self._chart(key, buckets)

        return provide

    def redraw(self) -> None:
        """The timer: draw what changed since the last tick, nothing else.

        Pause freezes the charts only: badges, the crash banner, the header and the
        checklist keep following the run, so an alert that fires meanwhile still shows."""
        try:
            header_widget = self.query_one(Header)
        except NoMatches:  # the screen is being torn down (quit): a late tick draws nothing
            return
        model = self.model
        restart = vm.take_restart(model)  # the reason, made terminal-safe
        if restart is not None:
            self._show_restart(restart)
        self._judge_ranks()
        now = self.clock.now()
        # the other ranks' reader errors, each under its own lock, before the shown one's
        run_errors = self.job.error_note(model) if self.job.multi else ""
        said = self.job.verdict(model, now, self.lang) if self.job.multi else None
        with vm.locked(model):
            run_state = model.status(now)
            header = vm.header_info(
                model,
                now,
                self.state,
                self.follow,
                # the source's own error is the first run's (a job's rank 0, run A):
                # another one in focus has its own, and rank 0's is then among the others
                self.source_error if model is self.primary else None,
                run_state=run_state,
                ranks=self._rank_note(),
                run_errors=run_errors,
                lang=self.lang,
                verdict=said,
                overlay=self.job.overlay,
                verdict_run=self.job.overlay and self.job.across,
            )
            version = (vm.model_version(model), self.job.version())
            # what the banner depends on beyond the data: a crash the log does not record
            # (a vanished pid); a stalled run's reason counts seconds, so it is left out
            st = getattr(run_state, "status", None)
            status = (st, getattr(run_state, "reason", None) if st == "crashed" else None)
            changed_state = self._drawn.get("state") != self.state
            new_data = self._drawn.get("version") != version
            info_due = new_data or changed_state or self._drawn.get("status") != status
            # paused: the window is frozen and new data waits, but the person's keys still act
            charts_due = changed_state or (new_data and not self.state.paused)
            if info_due:
                alerts = self._alerts()
                self._explain_first_critical(alerts)
                crash = self._crash(now, run_state)
                gpu_na = vm.gpu_na_reason(model)
                checklist = self._checklist_view(alerts) if self._pane_shown() else None
            if charts_due:
                sigs = {key: self._signature(key) for key in self._panel_keys()}
        header_widget.show(header, self.screen.has_class("-compact"))
        self._draw_ranks(now)
        if not (info_due or charts_due):
            return
        if info_due:
            self._sync_panels(alerts)
        self.ticks_drawn += 1
        if info_due:
            self.query_one(BadgeBar).show(alerts, self.state.selected, self.lang)
            self.query_one(CrashBanner).show(crash)
            self.query_one("#panel-gpu", GpuPanel).show_na(gpu_na)
            pane = self.query_one(ChecklistPane)
            pane.set_class(self._pane_shown(), "-shown")
            self.query_one("#body").set_class(self._pane_shown(), "-pane")
            if checklist is not None:
                alert, title, steps = checklist
                ticks, key = self._ticks_for(alert)
                ticked = ticks.ticked(key) if alert else set()
                pane.show(alert, title, steps, ticked)
            self._drawn["version"] = version
            self._drawn["status"] = status
        if charts_due:
            due: list[Chart | GpuPanel] = []
            for key, sig in sigs.items():
                if self._drawn.get(key) == sig:
                    continue
                self._drawn[key] = sig
                widget = self._panel_widget(key)
                if isinstance(widget, (Chart, GpuPanel)):  # cheap: charts pull when painted
                    due.append(widget)
            self._update_panels(due)
        self._drawn["state"] = self.state

    def _update_panels(self, due: list[Chart | GpuPanel]) -> None:
        """Repaint the panels whose data changed; across many ranks, with their data
        worked out beside the event loop.

        Why: a chart pulls its data when painted, and Textual paints every dirty widget
        in one pass of the event loop. Across 64 ranks one panel is ~130 decimations
        (20-60 ms), so seven panels in one pass blocked the keys for ~200 ms a tick, and
        one panel per pass still for 60-130 ms (``benchmarks/ranks.py --only app``). On
        :mod:`chart_thread`'s thread the loop gets the GIL back every 5 ms meanwhile."""
        chart_thread = None
        if self.job.across and len(self.job.ranks()) >= OFFLOOP_RANKS:
            chart_thread = self.chart_thread
        for widget in due:
            widget.update(chart_thread)

    def set_state(self, **changes: Any) -> None:
        self.state = vm.replace_state(self.state, **changes)
        self.redraw()

    # ------------------------------------------------------------- actions
    def action_help(self) -> None:
        self.push_screen(HelpScreen(self._rank_lines(), self.lang))

    # Textual collects ``@on`` handlers from the App's own class body only, not from its
    # mixins: these stay here and hand the event to the mixin that owns the behaviour.
    @on(Input.Submitted, "#goto")
    def _goto_submitted(self, event: Input.Submitted) -> None:
        self._go_to(event.value)

    @on(Badge.Selected)
    def _badge_selected(self, event: Badge.Selected) -> None:
        self._select_alert(event.key)

    @on(StepList.Ticked)
    def _ticked(self, event: StepList.Ticked) -> None:
        self._tick(event.step_id)

    @on(PanelPicker.Toggled)
    def _picked(self, event: PanelPicker.Toggled) -> None:
        self._panels_picked(event.keys)


def _env_float(name: str) -> float | None:
    try:
        return float(os.environ[name])
    except (KeyError, ValueError):
        return None
