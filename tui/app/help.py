"""The help screen (``?``): every key, where screenshots and ticks go, and the rank
files of a run directory (which one is shown); in the viewer's ``--lang``."""

from __future__ import annotations

from rich.markup import escape
from textual import events
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from ..core.text.i18n import tr

SCROLL_KEYS = frozenset(("up", "down", "pageup", "pagedown", "home", "end"))

KEYS = (
    ("q", "quit"),
    ("?", "this help (↑↓ scroll it, any other key closes it)"),
    ("tab / shift+tab", "move focus: badges, panels, checklist"),
    ("1 … 9", "zoom panel N (press again to restore)"),
    ("l", "log scale on the loss panel"),
    (
        "s / S",
        "smoothing weight up / down: 0.6 0.8 0.9 0.95 0.99, then off (per step, as in TensorBoard)",
    ),
    ("t", "x axis: steps, or elapsed wall time (a stall takes its width)"),
    ("p", "pause the display / follow the run again"),
    ("← / →", "move the step cursor (values at the cursor in each panel)"),
    ("home / end", "cursor to the window's start / remove the cursor"),
    ("g", "go to a step (type a number, enter)"),
    ("a", "select the next alert (opens its checklist)"),
    ("c", "show / hide the checklist pane"),
    ("m", "more panels: chart any other series of the log (space shows / hides one)"),
    ("space", "tick the highlighted checklist step (saved next to the log)"),
    ("escape", "back to the whole run, cursor off"),
    ("e", "save an SVG screenshot (the path is shown)"),
    ("f", "a job's ranks: show the next rank alone; after the last, all ranks again"),
    ("r", "write a Markdown report with charts next to the log (the path is shown)"),
)


COLOURS = (
    "Colours: set TEXTUAL_COLOR_SYSTEM=truecolor over SSH for full colour; "
    "NO_COLOR=1 turns colour off. --no-mouse disables mouse capture."
)


class HelpScreen(ModalScreen[None]):
    """A modal key table; any key but the scroll keys closes it, so nobody is trapped in
    it (and a key pressed to close it does nothing else: ``q`` does not quit)."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 72; max-width: 100%; height: auto; max-height: 90%;
        border: round $primary; padding: 0 1; background: $panel;
    }
    """

    def __init__(self, ranks: list[str] | None = None, lang: str = "en") -> None:
        super().__init__()
        self.ranks = ranks or []  # one line per rank file of a run directory
        self.lang = lang

    def compose(self) -> ComposeResult:
        lang = self.lang
        rows = "\n".join(f"[b]{k:<16}[/b] {tr(v, lang)}" for k, v in KEYS)
        text = f"[b]{tr('dltop keys', lang)}[/b]\n\n" + rows + "\n\n"
        if self.ranks:
            text += f"[b]{tr('rank files', lang)}[/b] {tr('(▶ the one shown)', lang)}\n"
            text += "\n".join(escape(line) for line in self.ranks) + "\n\n"
        text += tr(COLOURS, lang)
        with VerticalScroll():
            yield Static(text, id="help-text")

    def on_key(self, event: events.Key) -> None:
        if event.key in SCROLL_KEYS:
            return  # the scroll bindings move the text
        event.stop()  # not also a dashboard key
        event.prevent_default()
        if self not in self.app.screen_stack:
            # a key typed while this screen closed (a browser sends two escapes faster
            # than a screen goes): the dashboard's, not a second dismiss (ScreenStackError)
            self.app.simulate_key(event.key)
            return
        self.dismiss(None)
