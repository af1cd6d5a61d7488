"""Alerts and their checklists: which alert is selected, and the pane that explains it.

An alert is worth a look only with its checklist beside it, so selecting one (``a``, a
badge) moves the window to where it began and opens the pane, and the first critical
alert opens it by itself once per run. Ticks are saved beside the log the alert came
from (``RankFocus._ticks_for``), so they survive a restart of the viewer. This mixin
keeps that selection logic out of ``app.py``, which wires the source, the model and the
screen together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.present import view_model as vm
from ..core.text.safetext import visible
from .checklist import ChecklistPane, StepList
from .mixin_base import AppMixin
from .toast import notify_wrapped

if TYPE_CHECKING:
    from ..core.diagnosis.checklist_eval import CheckedStep
    from ..core.diagnosis.ticks import Ticks
    from ..core.rules.alerts import Alert
    from ..core.store.run import RunModel


class AlertPane(AppMixin):
    """Mixed into ``DltopApp``: alert selection, the checklist pane and its ticks."""

    model: RunModel
    state: vm.ViewState
    lang: str
    _drawn: dict[str, Any]
    _pane_user: bool | None  # None: follow the selection
    _auto_explained: bool  # the first critical alert's checklist was opened

    if TYPE_CHECKING:  # what DltopApp and the other mixins provide

        def redraw(self) -> None: ...
        def set_state(self, **changes: Any) -> None: ...
        def _alerts(self) -> list[Alert]: ...
        def _ticks_for(self, alert: Alert | None) -> tuple[Ticks, str]: ...
        def _checklist_model(self, alert: Alert) -> RunModel: ...

    def _checklist_view(self, alerts: list[Alert]) -> tuple[Alert | None, str, list[CheckedStep]]:
        alert = vm.find_alert(alerts, self.state.selected)
        if alert is None:
            return None, "", []
        title, steps = vm.checklist_view(self._checklist_model(alert), alert, self.lang)
        return alert, title, steps

    def _explain_first_critical(self, alerts: list[Alert]) -> None:
        """Open the checklist of the first critical alert, once per run, unless the person
        already chose an alert or closed the pane, or the terminal is small: the diagnosis
        is on screen without a key, and the window keeps following the run."""
        if self._auto_explained or self.state.selected is not None or self._pane_user is not None:
            return
        if self.screen.has_class("-compact"):
            return  # at 80x24 the pane would take the charts' room: the badge and `a` suffice
        key = vm.alert_to_explain(alerts)
        if key is not None:
            self._auto_explained = True
            self.state = vm.replace_state(self.state, selected=key)

    def _pane_shown(self) -> bool:
        if self._pane_user is not None:
            return self._pane_user
        return self.state.selected is not None

    def action_next_alert(self) -> None:
        key = vm.next_alert_key(self._alerts(), self.state.selected)
        if key is None:
            self.notify("no alerts", timeout=2)
            return
        self._select_alert(key)

    def _select_alert(self, key: str) -> None:
        with vm.locked(self.model):
            alert = vm.find_alert(self._alerts(), key)
            window = vm.window_for_alert(self.model, alert) if alert else None
        self._pane_user = None
        self.set_state(selected=key, window=window, cursor=alert.step if alert else None)
        # space ticks the highlighted step at once: the step list takes the focus
        steps = self.query_one(StepList)
        self.call_after_refresh(steps.focus)

    def action_toggle_checklist(self) -> None:
        self._pane_user = not self._pane_shown()
        self._drawn.pop("state", None)
        self.redraw()
        if self._pane_shown():
            self.call_after_refresh(self.query_one(StepList).focus)
        elif self.focused is not None and self.query_one(ChecklistPane) in self.focused.ancestors:
            self.screen.set_focus(self.query_one("#panel-loss"))

    def _tick(self, step_id: str) -> None:
        """A checklist step was ticked (``DltopApp`` routes ``StepList.Ticked`` here)."""
        if self.state.selected is None:
            return
        ticks, key = self._ticks_for(vm.find_alert(self._alerts(), self.state.selected))
        ticks.toggle(key if key else self.state.selected, step_id)
        if ticks.error:
            notify_wrapped(self, visible(ticks.error), severity="warning", timeout=5)
        self._drawn.pop("state", None)
        self.redraw()
