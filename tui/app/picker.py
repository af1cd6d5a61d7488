"""The panel picker (``m``): every other scalar in the log, each a panel on request.

Each toggle shows or hides its panel at once behind the list, so the person sees what
they picked; escape, enter or ``m`` closes it. The list itself comes from the core
(``extra_panels.pickable``), already made safe to print.
"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import SelectionList, Static
from textual.widgets.selection_list import Selection

from ..core.present.extra_panels import MAX_EXTRA, Pickable


class PanelPicker(ModalScreen[None]):
    """A checklist of series; :class:`Toggled` tells the app which panels to show."""

    BINDINGS = [
        Binding("escape", "close", show=False),
        Binding("enter", "close", show=False),
        Binding("m", "close", show=False),
    ]
    DEFAULT_CSS = """
    PanelPicker { align: center middle; }
    PanelPicker > Vertical {
        width: 64; max-width: 100%; height: auto; max-height: 90%;
        border: round $primary; padding: 0 1; background: $panel;
    }
    PanelPicker #picker-title { text-style: bold; }
    PanelPicker #picker-help { color: $text-muted; }
    PanelPicker SelectionList { height: auto; max-height: 20; border: none; }
    """

    class Toggled(Message):
        """The panel keys to show now, in the order picked."""

        def __init__(self, keys: tuple[str, ...]) -> None:
            super().__init__()
            self.keys = keys

    def __init__(self, items: list[Pickable], shown: tuple[str, ...]) -> None:
        super().__init__()
        self.items = items
        self.shown = list(shown)

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("panels for the other metrics of this log", id="picker-title")
            if not self.items:
                yield Static(
                    "nothing else to show: every series of this log is on a panel already "
                    "(extras logged with probe.step(name=value) appear here)",
                    id="picker-help",
                )
                return
            yield Static(
                f"space shows / hides a panel (up to {MAX_EXTRA}); enter or escape closes",
                id="picker-help",
            )
            yield SelectionList[str](
                *(
                    Selection(
                        f"{item.label}  ({item.points} points)", item.key, item.key in self.shown
                    )
                    for item in self.items
                ),
                id="picker-list",
            )

    def on_mount(self) -> None:
        for widget in self.query("#picker-list"):
            widget.focus()

    @on(SelectionList.SelectedChanged, "#picker-list")
    def _changed(self, event: SelectionList.SelectedChanged[str]) -> None:
        selected = set(event.selection_list.selected)
        kept = [k for k in self.shown if k in selected]
        added = [k for k in event.selection_list.selected if k not in kept]
        keys = (kept + added)[:MAX_EXTRA]
        if len(kept) + len(added) > MAX_EXTRA:
            self.notify(f"at most {MAX_EXTRA} extra panels", severity="warning", timeout=3)
            dropped = set(kept + added) - set(keys)
            for key in dropped:
                event.selection_list.deselect(key)
        self.shown = keys
        self.app.post_message(self.Toggled(tuple(keys)))

    def action_close(self) -> None:
        self.dismiss(None)
