"""The keys that move the view: zoom, log scale, smoothing, x axis, pause, cursor, go-to,
escape.

They change only the ``ViewState`` (or which panel is maximized) and ask for a redraw:
the window, the cursor and the scale are the person's, the data stays the model's, so the
same tick code draws a followed run and a paused, zoomed one. This mixin keeps those keys
out of ``app.py``, which wires the source, the model and the screen together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.widgets import Input

from ..core.present import view_model as vm
from ..core.present.timeaxis import STEP, TIME, has_wall_clock, move_cursor
from ..core.store.smoothing import lag_bound, step_weight
from .cards import GpuPanel
from .chart import Chart
from .mixin_base import AppMixin

if TYPE_CHECKING:
    from textual.widget import Widget

    from ..core.present.rankjob import JobView
    from ..core.store.run import RunModel


class ViewKeys(AppMixin):
    """Mixed into ``DltopApp``: the view's keys and the go-to box."""

    model: RunModel
    state: vm.ViewState
    job: JobView
    _zoomed: str | None

    if TYPE_CHECKING:  # what DltopApp and the other mixins provide

        def set_state(self, **changes: Any) -> None: ...
        def _chart(self, key: str, buckets: int) -> vm.ChartData: ...
        def _panel_keys(self) -> list[str]: ...
        def _panel_widget(self, key: str) -> Widget: ...

    def action_zoom(self, n: int) -> None:
        keys = self._panel_keys()
        if n > len(keys):
            self.notify(f"there are {len(keys)} panels (m adds more)", timeout=2)
            return
        key = keys[n - 1]
        widget = self._panel_widget(key)
        was = self._zoomed
        self._zoomed = None
        for panel in self.query(".panel.-zoomed"):  # one zoomed panel at most
            panel.remove_class("-zoomed")
        if was == key:
            self.screen.minimize()
            return
        self._zoomed = key
        widget.add_class("-zoomed")
        self.screen.maximize(widget, container=False)
        if isinstance(widget, (Chart, GpuPanel)):
            self.call_after_refresh(widget.update)

    def action_toggle_log(self) -> None:
        # the other way from what is drawn (by choice or by itself): the chart across ranks
        # or runs when that is what the panel shows, not the shown model's own
        shown = self._chart("loss", 120).log
        self.set_state(log_loss=not shown)

    def action_smoothing(self, direction: int = 1) -> None:
        """``s`` / ``S``: the next smoothing weight up / down (0, 0.6 ... 0.99, wrapping)."""
        weight = step_weight(self.state.smoothing, direction)
        self.set_state(smoothing=weight)
        if weight:
            lag = lag_bound(weight)
            self.notify(
                f"smoothing {weight:g} (lags a steady trend by ≤ {lag:.3g} steps)", timeout=2
            )
        else:
            self.notify("smoothing off", timeout=2)

    def action_toggle_x_axis(self) -> None:
        """Steps, or elapsed wall time; a log without clock times keeps steps and says why."""
        if self.state.x_axis == TIME:
            self.set_state(x_axis=STEP)
            return
        models = [r.model for r in self.job.ranks()] if self.job.across else [self.model]
        timed = False
        for model in models:
            with vm.locked(model):
                timed = timed or has_wall_clock(model.store)
        if not timed:
            self.notify("x axis stays on steps: no wall-clock times in this log", timeout=4)
            return
        self.set_state(x_axis=TIME)

    def action_toggle_pause(self) -> None:
        if self.state.paused:  # resume: back to following the whole run
            self.set_state(paused=False, window=None)
            return
        with vm.locked(self.model):
            window = vm.window_of(self.model, self.state)
        self.set_state(paused=True, window=window)

    def action_cursor(self, direction: int) -> None:
        data = self.query_one("#panel-loss", Chart).data
        cursor: int | None
        if data is not None and data.edges:  # a wall-time axis: one column of time
            cursor = move_cursor(data.edges, self.state.cursor, direction, self._plot_columns())
        else:
            with vm.locked(self.model):
                cursor = vm.move_cursor(self.model, self.state, direction, self._plot_columns())
        self.set_state(cursor=cursor)

    def action_cursor_home(self) -> None:
        with vm.locked(self.model):
            start, _ = vm.window_of(self.model, self.state)
        self.set_state(cursor=start)

    def action_cursor_off(self) -> None:
        self.set_state(cursor=None)

    def action_goto(self) -> None:
        box = self.query_one("#goto", Input)
        box.disabled = False
        box.add_class("-shown")
        box.value = ""
        box.focus()

    def _hide_goto(self) -> None:
        """Hidden and disabled, so neither tab nor the start-up focus can land in it."""
        box = self.query_one("#goto", Input)
        box.remove_class("-shown")
        box.disabled = True
        self.screen.set_focus(self.query_one("#panel-loss"))

    def _go_to(self, value: str) -> None:
        """The go-to box was submitted (``DltopApp`` routes ``Input.Submitted`` here)."""
        self._hide_goto()
        try:
            step = int(value)
        except ValueError:
            self.notify("go to: type a step number", severity="warning", timeout=3)
            return
        with vm.locked(self.model):
            clamped = vm.clamp_step(self.model, step)
            window = vm.window_around(self.model, step)
        if clamped is None:
            self.notify("go to: no steps yet", severity="warning", timeout=3)
            return
        step, note = clamped
        if note:
            self.notify(note, severity="warning", timeout=5)
        self.set_state(cursor=step, window=window)

    def action_reset_view(self) -> None:
        box = self.query_one("#goto", Input)
        if box.has_class("-shown"):
            self._hide_goto()
            return
        if self._zoomed is not None:
            keys = self._panel_keys()
            if self._zoomed in keys:
                self.action_zoom(keys.index(self._zoomed) + 1)
                return
            self._zoomed = None  # its panel was unpicked meanwhile
            self.screen.minimize()
            return
        self.set_state(window=None, cursor=None, paused=False)

    def _plot_columns(self) -> int:
        chart = self.query_one("#panel-loss", Chart)
        return chart.plot_columns
