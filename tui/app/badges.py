"""The alert badge bar: one coloured badge per alert, newest first; selecting one opens its
checklist and moves the charts to the alert's step window (the app does both).

Only the badges that fit the bar's width are mounted (``MAX_BADGES`` at most), and the
bar ends with a count of the rest ("+3 more"): badges past the terminal's edge vanished
without a word, so at 80 columns a run with five alerts looked like one with two. And a
log restarted after each of 20 k NaNs holds 20 k alerts, where a widget each froze the
viewer for seconds per key. The ones not shown stay reachable with ``a`` (next alert),
which walks them all; the selected alert always has its badge.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import HorizontalScroll
from textual.message import Message
from textual.widgets import Static

from ..core.present.overlay import RUN_COLOURS
from ..core.present.view_model import alert_key, badge_label, newest_first
from ..core.ranks.jobs import LETTERS
from ..core.rules.alerts import Alert
from ..core.text.textfit import cells

MAX_BADGES = 40  # far more than a 1-line bar shows: a bound on widgets, whatever the width
GAP = 3  # columns a badge takes beyond its text: its padding (1 + 1) and right margin (1)
MORE = "+{n} more (a: next alert)"
SHORT_MORE = "+{n} more"


def fit_badges(widths: Sequence[int], total: int, width: int, selected: int | None) -> list[int]:
    """Which badges (indices into ``widths``, in order) fit a bar of ``width`` columns,
    with room after them for the "+N more" count of the ``total`` alerts left out.
    ``widths``: each candidate badge's text, in columns. The selected one always has its
    badge, in place of the last ones that would have fit. At least one badge is shown,
    even on a bar too narrow for it (the count says the rest)."""
    chosen: list[int] = []
    used = 0
    for i, w in enumerate(widths):
        if i == selected and i >= MAX_BADGES:
            break  # the selected alert past the first MAX_BADGES: placed below
        left = total - i - 1  # alerts after this one, shown or not
        if chosen and used + w + GAP + (_more_width(left) if left else 0) > width:
            break
        chosen.append(i)
        used += w + GAP
    if selected is not None and selected not in chosen:
        need = widths[selected] + GAP + _more_width(total - len(chosen) - 1)
        while chosen and used + need > width:
            used -= widths[chosen.pop()] + GAP
            need = widths[selected] + GAP + _more_width(total - len(chosen) - 1)
        chosen.append(selected)
    return chosen


def _more_width(left: int) -> int:
    return cells(SHORT_MORE.format(n=left)) + GAP


class Badge(Static, can_focus=True):
    """One alert; enter or a click selects it."""

    BINDINGS = [Binding("enter", "select", "open checklist", show=False)]

    class Selected(Message):
        def __init__(self, key: str) -> None:
            super().__init__()
            self.key = key

    def __init__(self, alert: Alert, selected: bool, lang: str = "en") -> None:
        label = _label(alert, lang)
        super().__init__(label, classes=f"badge -{alert.severity}", markup=False)
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
        self._asked: tuple[list[Alert], str | None, str] | None = None  # for a resize

    def compose(self) -> ComposeResult:
        yield Static("no alerts", classes="badge -none")

    def show(self, alerts: list[Alert], selected: str | None, lang: str = "en") -> None:
        self._asked = (alerts, selected, lang)
        ordered = newest_first(alerts)
        pool = ordered[:MAX_BADGES]  # the candidates: a bound on widgets, whatever the width
        keys = [alert_key(a) for a in pool]
        at = keys.index(selected) if selected in keys else None
        if selected is not None and at is None:
            found = [a for a in ordered[MAX_BADGES:] if alert_key(a) == selected][:1]
            if found:
                pool, at = pool + found, len(pool)
        width = self.size.width or self.app.size.width
        widths = [cells(_plain(_label(a, lang))) for a in pool]
        picked = fit_badges(widths, len(ordered), width, at)
        shown = [pool[i] for i in picked]
        # what is drawn, no more: the alerts without a badge change only the count
        drawn = tuple((alert_key(a), a.severity, a.active, a.last_step, a.message) for a in shown)
        sig = (drawn, selected, len(ordered), width, lang)
        if sig == self._signature:
            return
        self._signature = sig
        focused_key = getattr(self.app.focused, "key", None)
        self.remove_children()
        if not ordered:
            self.mount(Static("no alerts", classes="badge -none"))
            return
        badges = [Badge(a, alert_key(a) == selected, lang) for a in shown]
        self.mount_all(badges)
        left = len(ordered) - len(shown)
        if left:
            used = sum(widths[i] + GAP for i in picked)
            more = MORE.format(n=left)
            if used + cells(more) + GAP > width:
                more = SHORT_MORE.format(n=left)
            self.mount(Static(more, classes="badge -none", markup=False))
        for b in badges:  # keep keyboard focus on the same alert across rebuilds
            if b.key == focused_key:
                self.call_after_refresh(b.focus)

    def on_resize(self) -> None:
        if self._asked is not None:
            self.show(*self._asked)


def _plain(label: str | Text) -> str:
    return label.plain if isinstance(label, Text) else label


def _label(alert: Alert, lang: str = "en") -> str | Text:
    """The badge's text (its title in ``lang``); an overlaid run's letter on the run's
    colour (as its chart line), the severity staying the badge's own colour."""
    label = badge_label(alert, lang)
    if alert.run is None or alert.run not in LETTERS:
        return label
    at = label.find(f" {alert.run} ")
    text = Text(label)
    if at >= 0:
        colour = RUN_COLOURS[LETTERS.index(alert.run)]
        text.stylize(Style(color="black", bgcolor=colour, bold=True), at, at + 3)
    return text
