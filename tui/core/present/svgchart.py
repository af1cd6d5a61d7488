"""One chart as a standalone SVG image, drawn from the viewer's own ``ChartData``.

Why SVG by string building: ``dltop report`` puts the charts beside a Markdown file that
is pasted into issue trackers and chats, which show SVG images, and the viewer must not
need a plotting library. The input is exactly what the braille chart draws (the store's
min/max decimation, ``panels.store_chart``), so a one-step spike or a NaN shows in the
report as on screen: each bucket is drawn from its minimum to its maximum, empty buckets
are bridged, a NaN/Inf bucket breaks the line and gets a red cross on the top edge, a
value of zero or below on a log axis a mark on the bottom edge. The axes tick where the
viewer's do (``axis.py``: round values, powers of ten on a log axis, one format each).

The image carries its own opaque background and a border, with colours picked for
contrast on that background, so it reads the same on a tracker's dark or light theme.
All text (titles, legends) is XML-escaped after ``safetext.visible``: metric names are the
user's, and XML forbids most control characters anyway.
"""

from __future__ import annotations

from xml.sax.saxutils import escape

from ..text.safetext import visible
from .axis import step_ticks, time_ticks, y_ticks
from .chartdata import (
    ALT,
    ALT2,
    EMA,
    EVAL,
    RAW,
    ChartData,
    Trace,
    at_floor,
    transform,
    y_range,
)

WIDTH, HEIGHT = 760, 260
LEFT, RIGHT, TOP, BOTTOM = 72, 16, 52, 34
BACKGROUND, BORDER, TEXT, MUTED, GRID = "#ffffff", "#8c959f", "#1f2328", "#57606a", "#d8dee4"
BAD = "#cf222e"
COLOURS = {RAW: "#0969da", EMA: "#9a6700", EVAL: "#1a7f37", ALT: "#8250df", ALT2: "#6e7781"}
DASHED = {ALT2: "6 3"}
FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
TICK_ROW_PX, TICK_COLUMN_PX = 8, 7  # the text grid the axis rules count in (11 px text)


def _esc(value: str, limit: int = 160) -> str:
    return escape(visible(value, limit), {'"': "&quot;"})


def _n(v: float) -> str:
    return f"{v:.1f}"


class _Frame:
    """The plot area and the value -> pixel mapping of one chart."""

    def __init__(self, data: ChartData, width: int, height: int) -> None:
        self.data = data
        self.x0, self.x1 = LEFT, width - RIGHT
        self.y0, self.y1 = TOP, height - BOTTOM
        self.range = y_range(data)

    def x(self, bucket: int, buckets: int) -> float:
        return self.x0 + (bucket + 0.5) * (self.x1 - self.x0) / max(1, buckets)

    def y(self, value: float) -> float:
        """Pixel row of a value; non-positive under a log scale sits on the bottom edge,
        as in the viewer."""
        t = transform(value, self.data.log)
        return self.y1 if t is None else self.y_at(t)

    def y_at(self, t: float) -> float:
        """Pixel row of a value in chart space (its log10 on a log axis)."""
        if self.range is None:
            return self.y1
        lo, hi = self.range
        frac = (hi - t) / (hi - lo) if hi > lo else 0.5
        return self.y0 + min(1.0, max(0.0, frac)) * (self.y1 - self.y0)


def _line_path(trace: Trace, f: _Frame) -> tuple[str, list[float]]:
    """The trace's path (``M``/``L`` commands) and the x of every non-finite bucket."""
    n = len(trace.hi)
    parts: list[str] = []
    bad_x: list[float] = []
    prev: float | None = None  # y where the line left the previous bucket
    for i, (a, b) in enumerate(zip(trace.lo, trace.hi, strict=False)):
        x = f.x(i, n)
        if i < len(trace.bad) and trace.bad[i]:
            bad_x.append(x)
            prev = None  # a NaN breaks the line; its mark says why
        if a is None or b is None:
            continue  # an empty bucket: bridged by the next point, as on screen
        if f.data.log and a <= 0:  # at the floor: its own mark; the line goes on above 0
            if b <= 0:
                prev = None
                continue
            a = b
        top, bottom = f.y(b), f.y(a)
        # enter the bucket's min..max extent from the side nearest the line's last point
        first, second = (top, bottom) if prev is not None and prev <= top else (bottom, top)
        if prev is None:
            parts.append(f"M{_n(x)} {_n(first)}")
        else:
            parts.append(f"L{_n(x)} {_n(first)}")
        if second != first:
            parts.append(f"L{_n(x)} {_n(second)}")
        prev = second
    return " ".join(parts), bad_x


def _points(trace: Trace, f: _Frame, colour: str) -> tuple[list[str], list[float]]:
    """Points (evaluations): a dot at each end of a bucket's extent."""
    n = len(trace.hi)
    out: list[str] = []
    bad_x: list[float] = []
    for i, (a, b) in enumerate(zip(trace.lo, trace.hi, strict=False)):
        x = f.x(i, n)
        if i < len(trace.bad) and trace.bad[i]:
            bad_x.append(x)
        if a is None or b is None:
            continue
        for v in {a, b}:
            out.append(f'<circle cx="{_n(x)}" cy="{_n(f.y(v))}" r="3" fill="{colour}"/>')
    return out, bad_x


def _axes(f: _Frame) -> list[str]:
    """Grid lines at the viewer's round y ticks, and its round steps (or elapsed times)
    under the plot, counted on a grid of text rows and columns."""
    out: list[str] = []
    data = f.data
    if f.range is not None:
        lo, hi = f.range
        rows = max(1, int((f.y1 - f.y0) // TICK_ROW_PX))
        for tick in y_ticks(lo, hi, rows, data.log, data.unit, LEFT // TICK_COLUMN_PX - 1):
            y = f.y_at(tick.at)
            out.append(f'<line x1="{f.x0}" y1="{_n(y)}" x2="{f.x1}" y2="{_n(y)}" stroke="{GRID}"/>')
            out.append(
                f'<text x="{f.x0 - 6}" y="{_n(y + 4)}" text-anchor="end" '
                f'fill="{MUTED}" font-size="11">{_esc(tick.label)}</text>'
            )
    cols = max(1, int((f.x1 - f.x0) // TICK_COLUMN_PX))
    if data.x_time is not None:
        ticks = time_ticks(data.x_time[0], data.x_time[1], cols)
    else:
        ticks = step_ticks(data.start, data.end, cols)
    for at, label in ticks:
        x = f.x0 + (at + len(label) / 2) * (f.x1 - f.x0) / cols
        out.append(
            f'<text x="{_n(x)}" y="{f.y1 + 16}" text-anchor="middle" '
            f'fill="{MUTED}" font-size="11">{_esc(label)}</text>'
        )
    out.append(
        f'<text x="{f.x0 - 6}" y="{f.y1 + 16}" text-anchor="end" '
        f'fill="{MUTED}" font-size="11">{data.x_name}</text>'
    )
    out.append(
        f'<rect x="{f.x0}" y="{f.y0}" width="{f.x1 - f.x0}" height="{f.y1 - f.y0}" '
        f'fill="none" stroke="{BORDER}"/>'
    )
    return out


def _cross(x: float, y: float) -> str:
    d = 4
    return (
        f'<path d="M{_n(x - d)} {_n(y - d)} L{_n(x + d)} {_n(y + d)} '
        f'M{_n(x - d)} {_n(y + d)} L{_n(x + d)} {_n(y - d)}" stroke="{BAD}" stroke-width="2"/>'
    )


def _floor(x: float, y: float, colour: str) -> str:
    """A value a log axis cannot place (zero or below): a short bar on the bottom edge."""
    d = f"M{_n(x - 3)} {_n(y - 1.5)} L{_n(x + 3)} {_n(y - 1.5)}"
    return f'<path d="{d}" stroke="{colour}" stroke-width="3"/>'


def _legend(data: ChartData, width: int) -> list[str]:
    """Trace names with their colours at the right of the title row; the values line below."""
    out: list[str] = []
    x = width - RIGHT
    for trace in reversed(data.traces):
        label = _esc(trace.name, 40)
        x -= 12 + 7 * len(visible(trace.name, 40))
        colour = COLOURS.get(trace.style, COLOURS[RAW])
        out.append(f'<rect x="{x}" y="12" width="9" height="9" fill="{colour}"/>')
        out.append(f'<text x="{x + 12}" y="21" fill="{TEXT}" font-size="11">{label}</text>')
        x -= 10
    if any(b for t in data.traces for b in t.bad):
        x -= 40
        out.append(_cross(x + 4, 17))
        out.append(f'<text x="{x + 12}" y="21" fill="{BAD}" font-size="11">NaN</text>')
    if data.legend:
        out.append(
            f'<text x="{LEFT}" y="40" fill="{MUTED}" font-size="11">{_esc(data.legend)}</text>'
        )
    return out


def render(data: ChartData, title: str, width: int = WIDTH, height: int = HEIGHT) -> str:
    """The chart as a complete SVG document (UTF-8 text)."""
    f = _Frame(data, width, height)
    body: list[str] = [
        f'<rect x="0.5" y="0.5" width="{width - 1}" height="{height - 1}" rx="6" '
        f'fill="{BACKGROUND}" stroke="{BORDER}"/>',
        f'<text x="12" y="21" fill="{TEXT}" font-size="14" font-weight="bold">{_esc(title)}</text>',
    ]
    if not data.has_points:
        body.append(
            f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle" fill="{MUTED}" '
            f'font-size="13" font-style="italic">{_esc(data.empty_text)}</text>'
        )
    else:
        body += _axes(f)
        bad_x: set[float] = set()
        for trace in data.traces:
            colour = COLOURS.get(trace.style, COLOURS[RAW])
            if trace.connect:
                path, bad = _line_path(trace, f)
                if path:
                    dash = DASHED.get(trace.style)
                    extra = f' stroke-dasharray="{dash}"' if dash else ""
                    width_ = "2" if trace.style == EMA else "1.4"
                    body.append(
                        f'<path d="{path}" fill="none" stroke="{colour}" '
                        f'stroke-width="{width_}" stroke-linejoin="round"{extra}/>'
                    )
                # evaluations: a line through them and a dot where each was taken (while
                # sparse; a series evaluated at every step is a line, as on screen)
                if trace.markers and sum(v is not None for v in trace.hi) <= len(trace.hi) // 3:
                    body += _points(trace, f, colour)[0]
            else:
                dots, bad = _points(trace, f, colour)
                body += dots
            bad_x.update(bad)
            if data.log:  # zero or below: a mark on the floor, in the trace's colour
                n = len(trace.lo)
                body += [_floor(f.x(i, n), f.y1, colour) for i in at_floor(trace)]
        body += [_cross(x, f.y0 + 6) for x in sorted(bad_x)]
        body += _legend(data, width)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="{FONT}">\n'
        f"<title>{_esc(title)}</title>\n" + "\n".join(body) + "\n</svg>\n"
    )
