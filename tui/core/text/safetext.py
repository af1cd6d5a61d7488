"""Text from a log, a socket, a sidecar or a file name, made safe for a terminal.

Why: everything those hold was written by some other process, often by someone else. A
run id, a host name, an exception message, a metric name or a file name may carry
terminal control sequences: an OSC 52 write to the clipboard (``ESC ] 52 ; c ; ...``), a
window title change, ``ESC [ 2 J`` (clear the screen, hiding a CRITICAL line), or bidi
overrides that make text read differently from what it is. Printed raw, the terminal
obeys them. Every string of that origin reaches a terminal only through :func:`visible`
(one line) or :func:`visible_lines` (a traceback), which turn every control and
invisible-formatting character into a visible escape such as ``\\x1b`` or ``\\u202e``.

Rich markup in data is a separate matter: widgets hand data to Rich as ``Text``, never
as markup, so ``[bold red]`` stays literal. ``--json`` output keeps the exact text,
JSON-escaped with ``ensure_ascii`` so that nothing invisible reaches the terminal there
either.
"""

from __future__ import annotations

import re
from dataclasses import fields
from typing import Any

# C0 controls (tab and newline too: a one-line field shows them), DEL, C1 controls,
# and the invisible formatting characters that reorder or hide text: bidi embeddings,
# overrides and isolates, marks, zero-width joiners and spaces, the BOM, interlinear
# annotations, line/paragraph separators.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffb]"
)
_UNSAFE_KEEP_NL = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffb]"
)


_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(m: re.Match[str]) -> str:
    ch = m.group()
    named = _NAMED.get(ch)
    if named is not None:
        return named
    c = ord(ch)
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def visible(value: Any, limit: int | None = None) -> str:
    """``value`` as one line of text a terminal shows as it is: every control or
    invisible character escaped (``\\x1b``, ``\\n``, ``\\u202e``); cut to ``limit``
    characters (with an ellipsis) when given."""
    text = value if isinstance(value, str) else str(value)
    if limit is not None and len(text) > limit:
        text = text[:limit] + "…"
    return _UNSAFE.sub(_escape, text)


def visible_lines(value: Any, limit: int | None = None) -> str:
    """Like :func:`visible`, for text whose line breaks are meant (a traceback, a
    message over several lines): ``\\n`` is kept, every other control is escaped."""
    text = value if isinstance(value, str) else str(value)
    if limit is not None and len(text) > limit:
        text = text[:limit] + "…"
    return _UNSAFE_KEEP_NL.sub(_escape, text)


def is_safe(text: str) -> bool:
    """True when ``text`` holds nothing a terminal would act on (newlines allowed)."""
    return _UNSAFE_KEEP_NL.search(text) is None


def escape_fields(obj: Any, multiline: tuple[str, ...]) -> None:
    """Every str field of a frozen display record, made terminal-safe (``safetext``)."""
    for f in fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, str):
            safe = visible_lines(value) if f.name in multiline else visible(value)
            if safe is not value:
                object.__setattr__(obj, f.name, safe)
