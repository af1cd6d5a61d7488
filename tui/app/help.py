"""The help screen (``?``): every key, and where screenshots and ticks go."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS = (
    ("q", "quit"),
    ("?", "this help (any key closes it)"),
    ("tab / shift+tab", "move focus: badges, panels, checklist"),
    ("1 … 9", "zoom panel N (press again to restore)"),
    ("l", "log scale on the loss panel"),
    ("s", "EMA smoothing on/off"),
    ("p", "pause the display / follow the run again"),
    ("← / →", "move the step cursor (values at the cursor in each panel)"),
    ("home / end", "cursor to the window's start / remove the cursor"),
    ("g", "go to a step (type a number, enter)"),
    ("a", "select the next alert (opens its checklist)"),
    ("c", "show / hide the checklist pane"),
    ("space", "tick the highlighted checklist step (saved next to the log)"),
    ("escape", "back to the whole run, cursor off"),
    ("e", "save an SVG screenshot (the path is shown)"),
)


class HelpScreen(ModalScreen[None]):
    """A modal key table; closes on any listed key so nobody is trapped in it."""

    BINDINGS = [
        Binding("escape,question_mark,q,enter", "dismiss_help", "close", show=False),
    ]

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 72; max-width: 100%; height: auto; max-height: 90%;
        border: round $primary; padding: 0 1; background: $panel;
    }
    """

    def compose(self) -> ComposeResult:
        rows = "\n".join(f"[b]{k:<16}[/b] {v}" for k, v in KEYS)
        text = (
            "[b]dltop keys[/b]\n\n" + rows + "\n\n"
            "Colours: set TEXTUAL_COLOR_SYSTEM=truecolor over SSH for full colour; "
            "NO_COLOR=1 turns colour off. --no-mouse disables mouse capture."
        )
        with VerticalScroll():
            yield Static(text, id="help-text")

    def action_dismiss_help(self) -> None:
        self.dismiss(None)
