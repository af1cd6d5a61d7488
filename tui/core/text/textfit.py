"""Text shortened or wrapped to a width without changing what it says.

Why: a cut in the middle of a number changes the number. An OOM message cut at 80
columns read "tried to allocate 26843545" where the log said 268435456: a tenth of the
real request, and nothing on the screen said it was cut. Every row that shortens text to
the screen's width (the crash banner, the status reason, the header, a chart's legend)
goes through :func:`fit`, which cuts between words and says so with "…"; a run of
characters without a space (a path, an identifier) is cut after a separator, and never
inside a number. A notification that shows a path breaks it after a ``/``
(:func:`wrap_path`) rather than in the middle of a name.

Widths are terminal cells: a Chinese character takes two (``--lang zh``), so a legend or
a header counted in characters would overflow by half. Text from a log is escaped
(``safetext.visible``) before it is fitted, and an escape such as ``\\x1b`` is never cut
in two either.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

ELLIPSIS = "…"
# what a cut must never split: a decimal or hex number, its sign, separators and exponent
# ("268435456", "2.00", "1,024", "-3e+05", "0x7f3a"), and safetext's escapes ("\x1b")
_NUMBER = re.compile(
    r"\\(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|[ntr])"
    r"|0[xX][0-9a-fA-F]+|[-+]?\d+(?:[.,_]\d+)*(?:[eE][-+]?\d+)?"
)
PATH_SEPARATORS = "/\\"


def cell(ch: str) -> int:
    """Columns one character takes: 2 for East Asian wide ones, 0 for combining marks."""
    if ch < "\u0300":
        return 1
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def cells(text: str) -> int:
    """Columns ``text`` takes on a terminal."""
    if text.isascii():
        return len(text)
    return sum(cell(ch) for ch in text)


def _prefix(text: str, start: int, budget: int) -> int:
    """The end of the longest run from ``start`` that takes at most ``budget`` columns."""
    used = 0
    for i in range(start, len(text)):
        used += cell(text[i])
        if used > budget:
            return i
    return len(text)


def _numbers(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in _NUMBER.finditer(text)]


def _inside(spans: Sequence[tuple[int, int]], j: int) -> bool:
    return any(s < j < e for s, e in spans)


def _break(text: str, start: int, end: int, sep: str, spans: Sequence[tuple[int, int]]) -> int:
    """Where to end a row of ``text`` that starts at ``start`` and may reach ``end``: after
    the last ``sep`` (a whole legend item), else at the last space, else after the last
    punctuation of a long word, else anywhere but inside a number; a space or punctuation
    only when it keeps half the row (a long path after "rank 1:" keeps its head rather
    than leaving "rank 1:…"). ``start`` when nothing fits without cutting a number."""
    if end >= len(text):
        return len(text)
    if sep.strip() == "" and len(sep) > 1:
        i = text.rfind(sep, start, end + len(sep) - 1)
        if i > start:
            return i
    if text[end].isspace():  # the text goes on with a space: every kept word is whole
        return end
    half = start + (end - start) // 2
    space = max(text.rfind(" ", start, end), text.rfind("\t", start, end))
    if space > start and space >= half:
        return space
    for j in range(end, max(start, half - 1), -1):  # a long word: after "/", ".", ":"
        if not (text[j - 1].isalnum() and text[j].isalnum()) and not _inside(spans, j):
            return j
    for j in range(end, max(start, half - 1), -1):
        if not _inside(spans, j):
            return j
    if space > start:
        return space
    for j in range(end, start, -1):
        if not _inside(spans, j):
            return j
    return start


def fit(text: str, width: int, sep: str = " ") -> str:
    """``text`` in at most ``width`` columns: whole when it fits, else cut where
    :func:`_break` says and ended with "…" (a cut that says it was cut). ``sep="  "``
    prefers a whole item of a line of items ("loss 0.31  ema 0.35")."""
    if width <= 0:
        return ""
    if cells(text) <= width:
        return text
    end = _prefix(text, 0, width - 1)
    kept = _break(text, 0, end, sep, _numbers(text))
    return text[:kept].rstrip() + ELLIPSIS


def fit_spans(
    spans: Sequence[tuple[str, str]], width: int, sep: str = " "
) -> list[tuple[str, str]]:
    """(text, style) spans cut as :func:`fit` cuts their joined text, each keeping its
    style; the "…" takes the style of the span it ends."""
    plain = "".join(text for text, _ in spans)
    if width <= 0:
        return []
    if cells(plain) <= width:
        return list(spans)
    kept = fit(plain, width, sep)
    n = len(kept) - len(ELLIPSIS) if kept.endswith(ELLIPSIS) else len(kept)
    out: list[tuple[str, str]] = []
    for text, style in spans:
        if n <= 0:
            break
        out.append((text[:n], style))
        n -= len(text)
    if out:
        last_text, last_style = out[-1]
        out[-1] = (last_text.rstrip(), last_style)
    out.append((ELLIPSIS, out[-1][1] if out else spans[0][1] if spans else ""))
    return out


def fit_rows(text: str, width: int, rows: int) -> tuple[list[tuple[int, int]], bool]:
    """``text`` broken into at most ``rows`` rows of ``width`` columns, as (start, end)
    offsets, and whether some of it was left out: at spaces, a long word after a
    separator, never inside a number. When the text does not fit, the last row leaves a
    column for the "…" the caller adds. Offsets, not strings, so a styled text can be
    sliced at the same places."""
    out: list[tuple[int, int]] = []
    if width <= 0 or rows <= 0:
        return out, bool(text.strip())
    spans = _numbers(text)
    start = 0
    while start < len(text) and len(out) < rows:
        end = _prefix(text, start, width)
        if len(out) == rows - 1 and end < len(text):  # the last row: room for the "…"
            end = _prefix(text, start, width - 1)
        stop = _break(text, start, end, " ", spans)
        if stop <= start and len(out) < rows - 1:
            # a number wider than a row: it takes the row whole (cut, it would lie)
            stop = next((e for s, e in spans if s <= start < e), max(end, start + 1))
        row_end = stop
        while row_end > start and text[row_end - 1].isspace():
            row_end -= 1
        out.append((start, row_end))
        if stop <= start:
            break
        start = stop
        while start < len(text) and text[start].isspace():
            start += 1
    return out, start < len(text)


def wrap_path(text: str, width: int) -> str:
    """``text`` broken into rows of ``width`` columns for a notification: between words,
    and a word that does not fit the row (a path) after one of its ``/``, so a path is
    broken at a folder's end instead of in the middle of a name."""
    if width <= 0:
        return text
    rows: list[str] = []
    line = ""
    for word in text.split(" "):
        while True:
            room = width - cells(line) - (1 if line else 0)
            if cells(word) <= room:
                line = f"{line} {word}" if line else word
                break
            cut = _path_break(word, room)
            if cut > 0:  # the word's head fills this row, up to a separator
                rows.append(f"{line} {word[:cut]}" if line else word[:cut])
                line, word = "", word[cut:]
            elif line:  # not even the first folder fits beside the row's words
                rows.append(line)
                line = ""
            else:  # one name longer than a row: cut anywhere but inside a number
                cut = _break(word, 0, _prefix(word, 0, width), " ", _numbers(word))
                cut = cut if cut > 0 else max(1, _prefix(word, 0, width))
                rows.append(word[:cut])
                word = word[cut:]
    rows.append(line)
    return "\n".join(rows)


def _path_break(word: str, room: int) -> int:
    """The end of the longest head of ``word`` that fits ``room`` columns and ends with a
    path separator (0: none does)."""
    if room <= 0:
        return 0
    end = _prefix(word, 0, room)
    return max(word.rfind(s, 0, end) for s in PATH_SEPARATORS) + 1
