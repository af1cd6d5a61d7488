"""The alert badge bar: one coloured badge per alert, newest first; selecting one opens its
checklist and moves the charts to the alert's step window (the app does both).

At most ``MAX_BADGES`` badges are mounted, and a count of the rest: a log restarted after
each of 20 k NaNs holds 20 k alerts, and a widget each froze the viewer for seconds per
key. The ones not shown stay reachable with ``a`` (next alert), which walks them all; the
selected alert always has its badge.
"""

from __future__ import annotations

from dltop.tui.core.alerts import Alert
from dltop.tui.core.overlay import LETTERS, RUN_COLOURS
from dltop.tui.core.view_model import alert_key, badge_label, newest_first
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import HorizontalScroll
from textual.message import Message
from textual.widgets import Static

MAX_BADGES = 40  # far more than a 1-line bar shows; enough to scroll through by hand


class Badge(Static, can_focus=True):
    """One alert; enter or a click selects it."""

    BINDINGS = [Binding("enter", "select", "open checklist", show=False)]

    class Selected(Message):
        def __init__(self, key: str) -> None:
            super().__init__()
            self.key = key

    def __init__(self, alert: Alert, selected: bool) -> None:
        super().__init__(_label(alert), classes=f"badge -{alert.severity}", markup=False)
        self.key = alert_key(alert)
        self.set_class(not alert.active, "-inactive")
        self.set_class(selected, "-selected")

    def action_select(self) -> None:
        self.post_message(self.Selected(self.key))

    def on_click(self) -> None:
        self.post_message(self.Selected(self.key))


class BadgeBar(HorizontalScroll, can_focus=False, inherit_bindings=False):
    """Rebuilt only when the list of alerts (or the selection) changes. Not focusable and
    without the scroll keys, so ←/→ keep moving the step cursor while a badge has focus."""

    DEFAULT_CSS = """
    BadgeBar { height: 1; background: $surface; scrollbar-size: 0 0; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._signature: tuple = ()

    def compose(self) -> ComposeResult:
        yield Static("no alerts", classes="badge -none")

    def show(self, alerts: list[Alert], selected: str | None) -> None:
        ordered = newest_first(alerts)
        shown = ordered[:MAX_BADGES]
        keys = [alert_key(a) for a in shown]
        if selected is not None and selected not in keys:
            shown += [a for a in ordered[MAX_BADGES:] if alert_key(a) == selected][:1]
        # what is drawn, no more: the alerts without a badge change only the count
        drawn = tuple((alert_key(a), a.severity, a.active, a.last_step, a.message) for a in shown)
        sig = (drawn, selected, len(ordered))
        if sig == self._signature:
            return
        self._signature = sig
        focused_key = getattr(self.app.focused, "key", None)
        self.remove_children()
        if not ordered:
            self.mount(Static("no alerts", classes="badge -none"))
            return
        badges = [Badge(a, alert_key(a) == selected) for a in shown]
        self.mount_all(badges)
        if len(ordered) > len(shown):
            more = f"+{len(ordered) - len(shown)} more (a: next alert)"
            self.mount(Static(more, classes="badge -none", markup=False))
        for b in badges:  # keep keyboard focus on the same alert across rebuilds
            if b.key == focused_key:
                self.call_after_refresh(b.focus)


def _label(alert: Alert) -> str | Text:
    """The badge's text; an overlaid run's letter on the run's colour (as its chart line),
    the severity staying the badge's own colour."""
    label = badge_label(alert)
    if alert.run is None or alert.run not in LETTERS:
        return label
    at = label.find(f" {alert.run} ")
    text = Text(label)
    if at >= 0:
        colour = RUN_COLOURS[LETTERS.index(alert.run)]
        text.stylize(Style(color="black", bgcolor=colour, bold=True), at, at + 3)
    return text
