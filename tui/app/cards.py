"""Panels that are not always a chart: the GPU panel turns into an N/A card when the log
has no NVML readings (a CPU run, no driver), saying why instead of drawing an empty plot."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from .chart import Chart, Provider
from .chart_thread import ChartThread


class GpuPanel(Vertical):
    """A chart of NVML utilisation and memory, or the N/A card with the reason."""

    ALLOW_MAXIMIZE = True  # a container: zoomable like the chart panels (key 6)

    DEFAULT_CSS = """
    GpuPanel > .na-card { height: 1fr; content-align: center middle; text-align: center; color: $text-muted; }
    GpuPanel.-na > Chart { display: none; }
    GpuPanel > .na-card { display: none; }
    GpuPanel.-na > .na-card { display: block; }
    """

    def __init__(self, provider: Provider, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.chart = Chart(provider, id=f"{id}-chart" if id else None)
        self.reason: str | None = "waiting for system samples"
        self.add_class("-na")

    def compose(self) -> ComposeResult:
        yield self.chart
        yield Static(na_text(self.reason), classes="na-card")

    def show_na(self, reason: str | None) -> None:
        """``reason`` None: GPU data exists, draw the chart; else the card says why not."""
        if reason == self.reason:
            return
        self.reason = reason
        self.set_class(reason is not None, "-na")
        self.query_one(".na-card", Static).update(na_text(reason))
        if reason is None:
            self.chart.update()

    def update(self, chart_thread: ChartThread | None = None) -> None:
        if self.reason is None:
            self.chart.update(chart_thread)


def na_text(reason: str | None) -> Text:
    t = Text(justify="center")
    t.append("GPU  N/A\n", style="bold")
    t.append(reason or "", style="dim")
    return t
