"""A braille line chart on Textual's Line API, drawn from decimated buckets.

Why not textual-plotext: it rebuilds the whole plot on every render, on the event loop,
and slows with the number of points (see the engineering notes). This widget instead
receives ``ChartData`` already decimated to ~2 points per character column, rasterises it
once per data change into a list of ``Strip`` objects, and ``render_line`` only indexes
that list. Repaints caused by anything else (focus, a neighbour's resize) cost nothing.

Layout inside the widget (border and title come from CSS):

    row 0          legend (values, cursor readout)
    rows 1..h-2    the plot: a y-axis gutter (round ticks, ``axis.py``), then braille
                   cells (2x4 dots each)
    row h-1        x axis: round steps, or elapsed times when the columns follow the clock

Non-finite buckets are drawn as a red ``✕`` on the plot's top row (and a NaN count in the
legend), never as a gap; zero or below on a log axis as ``▁`` on the bottom row (the
legend says so); a step cursor is a highlighted column; the points of a trace with
markers (evaluations) are a ``●`` on the line through them.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

from ..core.present.axis import row_of, step_ticks, time_ticks, y_ticks
from ..core.present.chartdata import (
    FLOOR_MARK,
    LEGEND,
    OFF_DOWN,
    OFF_UP,
    ChartData,
    off_scale_marks,
    y_range,
)
from ..core.present.overlay import FAINT, RUN_COLOURS
from ..core.present.raster import rasterise
from ..core.ranks.jobs import RUN_STYLES
from ..core.text.textfit import fit_spans
from .chart_thread import ChartThread

GUTTER = 9  # y-axis label width, including the separator
BAD_MARK = "✕"
POINT_MARK = "●"  # a point of a trace drawn with markers (an evaluation)

Provider = Callable[[int], ChartData]


class Chart(Widget):
    """A chart fed by a provider ``f(buckets) -> ChartData``; redrawn only on ``update()``."""

    can_focus = True

    class Computed(Message):
        """Data worked out off the event loop (:mod:`chart_thread`), for ``buckets`` buckets;
        ``error``: the provider's exception, raised here on the event loop as it would
        have been by a paint."""

        def __init__(
            self, data: ChartData | None, buckets: int, error: BaseException | None
        ) -> None:
            super().__init__()
            self.data, self.buckets, self.error = data, buckets, error

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "chart--axis",
        "chart--legend",
        "chart--raw",
        "chart--ema",
        "chart--eval",
        "chart--alt",
        "chart--alt2",
        "chart--band",
        "chart--bad",
        "chart--cursor",
        "chart--empty",
        *(f"chart--{style}" for style in RUN_STYLES),
        *(f"chart--{style}{FAINT}" for style in RUN_STYLES),
    }

    DEFAULT_CSS = """
    Chart { height: 1fr; min-height: 5; }
    Chart > .chart--axis { color: $text-muted; }
    Chart > .chart--legend { color: $text; }
    Chart > .chart--raw { color: $primary; }
    Chart > .chart--ema { color: $warning; }
    Chart > .chart--eval { color: $success; }
    Chart > .chart--alt { color: $accent; }
    Chart > .chart--alt2 { color: $secondary; }
    Chart > .chart--band { color: $primary-darken-3; }
    Chart > .chart--bad { color: $error; text-style: bold; }
    Chart > .chart--cursor { background: $boost; color: $text; }
    Chart > .chart--empty { color: $text-muted; text-style: italic; }
    """ + "".join(  # overlaid runs: one fixed colour each, as on their badges
        f"Chart > .chart--{style} {{ color: {colour}; }}\n"
        f"Chart > .chart--{style}{FAINT} {{ color: {colour} 45%; }}\n"
        for style, colour in zip(RUN_STYLES, RUN_COLOURS, strict=True)
    )

    def __init__(
        self, provider: Provider | None = None, *, name: str | None = None, id: str | None = None
    ) -> None:
        super().__init__(name=name, id=id)
        self.provider = provider
        self.data: ChartData | None = None
        self._strips: list[Strip] = []
        self._built_for: tuple[int, int] | None = None
        self._stale = provider is not None  # the provider has news not yet pulled
        self.draws = 0  # rasterisations so far: tests check that idle ticks do not redraw

    # ------------------------------------------------------------------ data
    @property
    def plot_columns(self) -> int:
        """Character columns of the plot area (the provider gets twice that many buckets)."""
        return max(1, self.size.width - GUTTER)

    def update(self, chart_thread: ChartThread | None = None) -> None:
        """Mark the data stale and repaint; call only when the data changed.

        The provider is asked lazily, on the next paint, when the widget has its real size:
        a hidden panel (small terminal, N/A card) costs nothing, and a panel that becomes
        visible later still pulls data for the width it actually has.

        With ``chart_thread`` (a job of many ranks), a shown chart's provider is asked on that
        thread instead, and the chart keeps its picture until :class:`Computed` arrives.
        """
        provider = self.provider
        if chart_thread is not None and provider is not None and self._built_for is not None:
            buckets = self.plot_columns * 2

            def work() -> None:
                try:
                    data, error = provider(buckets), None
                except Exception as exc:  # raised on the event loop, as a paint would
                    data, error = None, exc
                self.post_message(self.Computed(data, buckets, error))

            if chart_thread.submit(self, work):
                return
        self._stale = True
        self._built_for = None
        self.refresh()

    def set_data(self, data: ChartData) -> None:
        """Draw given data (tests, or a chart without a provider)."""
        self.data = data
        self._stale = False
        self._built_for = None
        self.refresh()

    def on_chart_computed(self, message: Computed) -> None:
        message.stop()
        if message.error is not None:
            raise message.error
        if message.data is None or message.buckets != self.plot_columns * 2:
            return  # resized meanwhile: on_resize asked again for the new width
        self.data = message.data
        self._built_for = None
        self.refresh()

    def on_resize(self) -> None:
        self.update()

    # --------------------------------------------------------------- drawing
    def render_line(self, y: int) -> Strip:
        width, height = self.size
        if self._built_for != (width, height):
            if self._stale and self.provider is not None and width > 0:
                self.data = self.provider(self.plot_columns * 2)
                self._stale = False
            self._strips = self._build(width, height)
            self._built_for = (width, height)
            self.draws += 1
        if 0 <= y < len(self._strips):
            return self._strips[y]
        return Strip.blank(width)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return max(5, container.height)

    def _style(self, key: str) -> Style:
        return self.get_component_rich_style(f"chart--{key}")

    def _build(self, width: int, height: int) -> list[Strip]:
        data = self.data
        axis = self._style("axis")
        legend_style = self._style("legend")
        if width <= GUTTER or height < 3:
            return [Strip.blank(width)] * max(0, height)
        rows = [self._legend(data, width, legend_style)]
        plot_h = height - 2
        cols = width - GUTTER
        if data is None or not data.has_points:
            msg = data.empty_text if data else "waiting for data"
            empty = self._style("empty")
            # wrapped at words, centred: a narrow panel shows "no memory / readings", not
            # "no memory readi…"
            lines = textwrap.wrap(msg, cols)[:plot_h] or [""]
            top = max(0, (plot_h - len(lines)) // 2)
            for r in range(plot_h):
                i = r - top
                text = lines[i].center(cols) if 0 <= i < len(lines) else ""
                rows.append(Strip([Segment(" " * GUTTER, axis), *_pad(text, cols, empty)], width))
            rows.append(_text_strip("", width, axis))
            return rows
        rows.extend(self._plot(data, cols, plot_h, axis))
        rows.append(self._x_axis(data, cols, width, axis))
        return rows

    def _legend(self, data: ChartData | None, width: int, style: Style) -> Strip:
        """The legend row, cut at a whole item (never inside a number), each span in its
        style: an overlaid run's letter in its line's colour."""
        if data is None:
            return _text_strip("", width, style)
        spans = data.legend_spans or ((data.legend, LEGEND),)
        segs = [
            Segment(text, style if key == LEGEND else self._style(key) + Style(bold=True))
            for text, key in fit_spans(spans, width, sep="  ")
        ]
        return Strip(segs).adjust_cell_length(width, style)

    def _plot(self, data: ChartData, cols: int, plot_h: int, axis: Style) -> list[Strip]:
        rng = y_range(data)
        bits, owner, bad_cols, marks, floor = rasterise(data, rng, cols, plot_h)
        cursor_col = data.column_of(data.cursor, cols) if data.cursor is not None else None
        labels = _y_labels(rng, plot_h, data)
        styles = {
            key: self._style(key)
            for key in (
                "raw",
                "ema",
                "eval",
                "alt",
                "alt2",
                "band",
                *RUN_STYLES,
                *(s + FAINT for s in RUN_STYLES),
            )  # fmt: skip
        }
        bad_style = self._style("bad")
        cursor_style = self._style("cursor")
        # an overlaid run drawn clipped: an arrow in its colour where it leaves the plot
        off_up, off_down = off_scale_marks(data, rng, cols)
        arrows = {0: (OFF_UP, off_up), plot_h - 1: (OFF_DOWN, off_down)}
        out: list[Strip] = []
        for r in range(plot_h):
            segs = [Segment(labels[r], axis)]
            run_text: list[str] = []
            run_style: Style | None = None
            row_bits, row_owner = bits[r], owner[r]
            row_floor = floor if r == plot_h - 1 else {}
            for c in range(cols):
                if r == 0 and c in bad_cols:
                    ch, st = BAD_MARK, bad_style
                elif c in row_floor:
                    ch, st = FLOOR_MARK, styles.get(row_floor[c], axis)
                elif (r, c) in marks:
                    ch, st = POINT_MARK, styles.get(marks[(r, c)], axis)
                elif r in arrows and c in arrows[r][1]:
                    ch, st = arrows[r][0], styles.get(arrows[r][1][c], axis)
                elif row_bits[c]:
                    ch, st = chr(0x2800 + row_bits[c]), styles.get(row_owner[c] or "raw", axis)
                else:
                    ch, st = " ", axis
                if c == cursor_col:
                    if ch == " ":
                        ch = "│"
                    st = st + cursor_style
                if st is not run_style and run_text:
                    segs.append(Segment("".join(run_text), run_style))
                    run_text = []
                run_style = st
                run_text.append(ch)
            if run_text:
                segs.append(Segment("".join(run_text), run_style))
            out.append(Strip(segs, GUTTER + cols))
        return out

    def _x_axis(self, data: ChartData, cols: int, width: int, axis: Style) -> Strip:
        """Round steps, or round elapsed times on a wall-time axis, each centred on its
        column; the gutter says which."""
        line = [" "] * cols
        if data.x_time is not None:
            ticks = time_ticks(data.x_time[0], data.x_time[1], cols)
        else:
            ticks = step_ticks(data.start, data.end, cols)
        for at, text in ticks:
            _put(line, at, text)
        return Strip(
            [Segment(data.x_name.rjust(GUTTER - 1) + " ", axis), Segment("".join(line), axis)],
            width,
        )


def _y_labels(rng: tuple[float, float] | None, plot_h: int, data: ChartData) -> list[str]:
    """Gutter text per plot row: each round tick on the row where its value is drawn
    (``axis.row_of``, the mapping of the dots), an axis line elsewhere."""
    if rng is None:
        return [" " * GUTTER] * plot_h
    labels = [" " * (GUTTER - 1) + "│"] * plot_h
    lo, hi = rng
    for tick in y_ticks(lo, hi, plot_h, data.log, data.unit, GUTTER - 2):
        labels[row_of(tick.at, lo, hi, plot_h)] = tick.label.rjust(GUTTER - 2) + " ┤"
    return labels


def _put(line: list[str], at: int, text: str) -> None:
    for i, ch in enumerate(text):
        if 0 <= at + i < len(line):
            line[at + i] = ch


def _pad(text: str, width: int, style: Style) -> list[Segment]:
    return [Segment(text[:width].ljust(width), style)]


def _text_strip(text: str, width: int, style: Style) -> Strip:
    return Strip([Segment(text[:width].ljust(width), style)], width)
