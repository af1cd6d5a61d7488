"""The checklist pane: the selected alert's troubleshooting steps, their automatic evidence
marks (✓ the log says yes, ✗ the log says no, ? the log cannot tell), and the person's own
ticks (space), which the app saves in the sidecar file next to the log."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from ..core.rules.alerts import Alert
from ..core.text.safetext import visible

MARKS = {"yes": ("✓", "bold green"), "no": ("✗", "bold red"), None: ("?", "dim")}


class StepList(OptionList):
    """The steps; space ticks the highlighted one."""

    BINDINGS = [Binding("space", "tick", "tick step", show=False)]

    class Ticked(Message):
        def __init__(self, step_id: str) -> None:
            super().__init__()
            self.step_id = step_id

    def action_tick(self) -> None:
        if self.highlighted is None:
            return
        option = self.get_option_at_index(self.highlighted)
        if option.id:
            self.post_message(self.Ticked(option.id))


class ChecklistPane(Vertical):
    """Title, the alert's one-line message, the steps, and the highlighted step's why/how."""

    DEFAULT_CSS = """
    ChecklistPane { width: 44; border-left: vkey $primary; padding: 0 0 0 1; }
    ChecklistPane #cl-title { text-style: bold; height: auto; }
    ChecklistPane #cl-message { color: $text-muted; height: auto; max-height: 4; }
    ChecklistPane StepList { height: 1fr; border: none; padding: 0; }
    ChecklistPane StepList:focus { border: none; }  /* the highlighted step shows focus */
    ChecklistPane #cl-detail { height: auto; max-height: 8; color: $text-muted; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._signature: tuple[Any, ...] = ()
        self._details: dict[str, str] = {}

    def compose(self) -> ComposeResult:
        yield Static("No alert selected", id="cl-title")
        yield Static("Select a badge (tab, enter) or press a.", id="cl-message")
        yield StepList(id="cl-steps")
        yield Static("", id="cl-detail")

    def show(self, alert: Alert | None, title: str, steps: Sequence[Any], ticked: set[str]) -> None:
        """Draw ``steps`` (CheckedStep objects) for ``alert``; a no-op when nothing changed."""
        sig = (
            None if alert is None else (alert.id, alert.step, alert.message),
            title,
            tuple((s.step.id, s.mark, s.evidence) for s in steps),
            tuple(sorted(ticked)),
        )
        if sig == self._signature:
            return
        self._signature = sig
        self.query_one("#cl-title", Static).update(Text(title or "No alert selected"))
        message = (
            visible(alert.message)
            if alert is not None
            else "Select a badge (tab, enter) or press a."
        )
        self.query_one("#cl-message", Static).update(Text(message))
        option_list = self.query_one(StepList)
        keep = option_list.highlighted
        option_list.clear_options()
        self._details = {}
        for checked in steps:
            step = checked.step
            option_list.add_option(Option(_step_text(checked, step.id in ticked), id=step.id))
            detail = [f"why: {step.why}"] if getattr(step, "why", None) else []
            if getattr(step, "how", None):
                detail.append(f"how: {step.how}")
            self._details[step.id] = "\n".join(detail)
        if steps:
            option_list.highlighted = min(keep or 0, len(steps) - 1)
        self._show_detail(option_list)

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self._show_detail(event.option_list)

    def _show_detail(self, option_list: OptionList) -> None:
        text = ""
        if option_list.highlighted is not None and option_list.option_count:
            option = option_list.get_option_at_index(option_list.highlighted)
            text = self._details.get(option.id or "", "")
        self.query_one("#cl-detail", Static).update(Text(text))


def _step_text(checked: Any, ticked: bool) -> Text:
    mark, style = MARKS.get(checked.mark, MARKS[None])
    t = Text()
    t.append("[x] " if ticked else "[ ] ", style="bold" if ticked else "")
    t.append(f"{mark} ", style=style)
    t.append(checked.step.text, style="strike dim" if ticked else "")
    if checked.evidence:
        t.append(f"\n      {checked.evidence}", style="italic cyan")
    return t
