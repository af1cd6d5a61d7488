"""Which panels the dashboard shows: the built-in ones, the ones picked with ``m``, and
which of them a small terminal keeps.

The built-in panels are composed once; a picked series (``+acc``) gets a chart mounted
into the same grid, numbered after them (1-9 zoom the first nine). At 80x24 four panels
fit: the loss, the grad norm and the learning rate always (the cause of most failures is
on one of them), and a fourth that follows what is going on: the panel last picked, else
the one the most severe alert is about (memory for a leak or an OOM, step time for a
data-bound run or a stall), else the step time. With the checklist open the three stay,
stacked beside it. This mixin keeps that out of ``app.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.present import view_model as vm
from ..core.present.extra_panels import pickable
from ..core.present.panels import spec_for
from ..core.rules.alerts import CRITICAL, WARNING
from .chart import Chart
from .mixin_base import AppMixin
from .picker import PanelPicker

if TYPE_CHECKING:
    from textual.widget import Widget

    from ..core.rules.alerts import Alert
    from ..core.store.run import RunModel

ALWAYS = ("loss", "grad_norm", "lr")  # kept on the smallest terminal
# the panel an alert is about, for the fourth place on a small terminal
ALERT_PANEL = {
    "memory_growth": "memory",
    "oom": "memory",
    "data_bound": "step_time",
    "stall": "step_time",
    "straggler": "step_time",
}
_RANK = {CRITICAL: 2, WARNING: 1}


def fourth_panel(extras: tuple[str, ...], alerts: list[Alert]) -> str:
    """The fourth panel a small terminal shows (see the module docstring)."""
    if extras:
        return extras[-1]
    about = [a for a in alerts if a.active and a.id in ALERT_PANEL and a.severity in _RANK]
    if about:
        worst = max(about, key=lambda a: (_RANK[a.severity], a.step or 0))
        return ALERT_PANEL[worst.id]
    return "step_time"


def panel_title(index: int, title: str) -> str:
    """``3 learning rate``; past the ninth, no number (no key zooms it)."""
    return f"{index} {title}" if index <= 9 else f"· {title}"


class PanelSet(AppMixin):
    """Mixed into ``DltopApp``: the panel list, picked panels, the small-terminal choice."""

    model: RunModel
    state: vm.ViewState
    _extra_widgets: dict[str, Chart]
    _zoomed: str | None

    if TYPE_CHECKING:  # what DltopApp and the other mixins provide

        def set_state(self, **changes: Any) -> None: ...
        def _provider(self, key: str) -> Any: ...

    def _panel_keys(self) -> list[str]:
        return [p.key for p in vm.PANELS] + list(self.state.panels)

    def _panel_widget(self, key: str) -> Widget:
        extra = self._extra_widgets.get(key)
        return extra if extra is not None else self.query_one(f"#panel-{key}")

    def _sync_panels(self, alerts: list[Alert]) -> None:
        """Mount the picked panels not yet shown, remove the unpicked ones, and mark which
        panels a small terminal hides (``-minor``; the CSS hides them only there)."""
        wanted = self.state.panels
        for key in [k for k in self._extra_widgets if k not in wanted]:
            if self._zoomed == key:  # unpicked while zoomed: back to the grid
                self._zoomed = None
                self.screen.minimize()
            self._extra_widgets.pop(key).remove()
        container = self.query_one("#panels")
        for i, key in enumerate(wanted, start=len(vm.PANELS) + 1):
            chart = self._extra_widgets.get(key)
            if chart is None:
                chart = Chart(self._provider(key))
                chart.add_class("panel", "-extra")
                self._extra_widgets[key] = chart
                container.mount(chart)
            title = panel_title(i, spec_for(key).title)
            if chart.border_title != title:
                chart.border_title = title
        fourth = fourth_panel(wanted, alerts)
        for key in self._panel_keys():
            self._panel_widget(key).set_class(key not in ALWAYS and key != fourth, "-minor")

    def action_pick_panels(self) -> None:
        with vm.locked(self.model):
            items = pickable(self.model.store)
        self.push_screen(PanelPicker(items, self.state.panels))

    def _panels_picked(self, keys: tuple[str, ...]) -> None:
        """The picker's toggles (``DltopApp`` routes ``PanelPicker.Toggled`` here)."""
        self.set_state(panels=keys)
