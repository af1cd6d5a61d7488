"""Lines strict JSON rejects, made strict where a known writer's habit broke them.

Tried only on a line the strict decoder rejected (``decoding.py``), so the common line
pays nothing: a byte-order mark before it (Windows editors, PowerShell), bare
``NaN``/``Infinity`` tokens (Python's ``json.dumps``), a lone surrogate's escape (Python's
``json.dumps`` of an undecodable file-name byte). Standard library only.
"""

from __future__ import annotations

import re

# A bare NaN / Infinity / -Infinity token where a JSON value stands: what Python's own
# json.dumps writes for a non-finite float, and what a hand-written logger produces.
# Strict JSON (msgspec) rejects the line; quoting the token makes it our marker. Strings
# are matched whole first, so a token's look inside a text ("loss: NaN, ...") is kept.
_BARE_NONFINITE = re.compile(rb'("(?:[^"\\]|\\.)*")|([:\[,]\s*)(-?Infinity|NaN)(?=\s*[,\]}])')


def _quote_token(m: re.Match[bytes]) -> bytes:
    if m.group(1) is not None:
        return m.group(1)  # a string, left as it is
    return m.group(2) + b'"' + m.group(3) + b'"'


def _quote_bare_nonfinite(line: bytes) -> bytes | None:
    """The line with its bare non-finite tokens quoted as markers, or ``None`` when it has
    none (only tried on a line strict decoding rejected: the common line pays nothing)."""
    if b"N" not in line and b"I" not in line:
        return None
    fixed = _BARE_NONFINITE.sub(_quote_token, line)
    return fixed if fixed != line else None


# A UTF-8 byte-order mark: what Windows editors and PowerShell put before the first line.
_BOM = b"\xef\xbb\xbf"


# A JSON escape of a lone UTF-16 surrogate, as Python's json.dumps writes an undecodable
# file-name byte ("\\udce9"): strict decoders reject the line. Escaped backslashes are
# matched first, so the scan stays in step; a high+low pair is a real character and kept.
_LONE_SURROGATE = re.compile(
    rb"(\\\\)|\\u([dD][89abAB][0-9a-fA-F]{2})(\\u[dD][c-fC-F][0-9a-fA-F]{2})?"
    rb"|\\u([dD][c-fC-F][0-9a-fA-F]{2})"
)


def _text_surrogate(m: re.Match[bytes]) -> bytes:
    if m.group(1) is not None or m.group(3) is not None:
        return m.group(0)  # an escaped backslash, or a surrogate pair
    return b"\\\\u" + (m.group(2) or m.group(4))  # the escape, kept as its text


def repair(line: bytes) -> bytes | None:
    """The line made strict JSON where a known writer's habit broke it, or ``None`` when
    none applies: a byte-order mark before it, bare non-finite tokens in it, a lone
    surrogate's escape (kept as the text ``\\udce9``, as the probe writes one). Only tried
    on a line strict decoding rejected, so the common line pays nothing."""
    fixed = line[len(_BOM) :].lstrip() if line.startswith(_BOM) else line
    if b"\\u" in fixed:
        fixed = _LONE_SURROGATE.sub(_text_surrogate, fixed)
    quoted = _quote_bare_nonfinite(fixed)
    if quoted is not None:
        return quoted
    return fixed if fixed != line else None
