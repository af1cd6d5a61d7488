"""Text from a log, made inert in Markdown: what ``dltop report`` writes goes through here.

Why: a report is pasted into an issue tracker or a chat, where Markdown is rendered and
some HTML passes through. A run id, an exception message or a metric name is written by
the training script, maybe by someone else: ``<img src=...>`` would load a tracker pixel,
``[click](https://...)`` would put a link under our name, ``**`` or a backtick would break
the layout. Every such string reaches the report through one of these functions: control
and invisible characters first become visible escapes (``safetext``, the terminal's own
boundary), then Markdown and HTML lose their meaning. ``safetext`` stays the one place
that decides what is invisible; this module only adds what Markdown needs.
"""

from __future__ import annotations

import re
from typing import Any

from .safetext import visible, visible_lines

# every character that starts inline markup in CommonMark or GitHub's flavour: emphasis,
# code, links and images, tables, strikethrough, math, mentions; < > & become entities
_SPECIAL = re.compile(r"[\\`*_\[\]|~$@]")
_ENTITIES = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"))
_BACKTICKS = re.compile(r"`+")
# what makes a block of a line's start: a heading, a list item, a quote, a setext underline
_BLOCK_START = re.compile(r"^([#+\-=>]|\d{1,9}(?=[.)](\s|$)))")


def text(value: Any, limit: int | None = None) -> str:
    """``value`` as one line of literal text in Markdown prose or a table cell, also at
    the start of a line (leading blanks dropped: four would start a code block)."""
    s = visible(value, limit).lstrip(" ")
    for raw, entity in _ENTITIES:
        s = s.replace(raw, entity)
    s = _SPECIAL.sub(r"\\\g<0>", s)
    m = _BLOCK_START.match(s)
    if m is None:
        return s
    if m.group().isdigit():  # "1. x" / "1) x": the dot or bracket after the number
        return f"{m.group()}\\{s[m.end() :]}"
    return f"\\{s}"


def _longest_backticks(s: str) -> int:
    return max((len(m.group()) for m in _BACKTICKS.finditer(s)), default=0)


def code(value: Any, limit: int | None = None) -> str:
    """``value`` as an inline code span: shown verbatim (HTML, links and emphasis stay
    text), with a delimiter longer than any run of backticks inside. Not for table cells
    (a ``|`` in a code span still splits a GitHub table cell)."""
    s = visible(value, limit)
    if not s.strip():
        return "(empty)" if not s else f"`{s}`"
    fence = "`" * (_longest_backticks(s) + 1)
    pad = " " if s[0] == "`" or s[-1] == "`" or (s[0] == " " and s[-1] == " ") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def fenced(value: Any, info: str = "text", indent: str = "", limit: int | None = None) -> str:
    """A fenced code block holding ``value`` verbatim (line breaks kept, other controls
    escaped): its fence is longer than any run of backticks inside, so nothing in the text
    can close it early. ``indent`` puts the block inside a list item."""
    s = visible_lines(value, limit).rstrip("\n")
    fence = "`" * max(3, _longest_backticks(s) + 1)
    lines = [f"{fence}{info}", *s.split("\n"), fence]
    return "\n".join(indent + line if line else line for line in lines)
