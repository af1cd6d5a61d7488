"""Who may watch a run: the checks made on a viewer before it is trusted.

Kept apart from the server loop because none of it touches a socket: the hello is
judged from bytes alone (so it can be attacked in tests without a server), and the
viewer imports ``mask_secret`` to print a token it was given without importing the
server.
"""

from __future__ import annotations

import ipaddress
import json

HELLO_TIMEOUT = 3.0  # seconds a TCP viewer has to present its token
HELLO_MAX = 4096  # bytes of hello read before a verdict: a longer one is refused
# the shortest token a probe serves TCP with: a short one can be guessed (and a masked
# one showed 4 of its 9 characters)
MIN_TOKEN_CHARS = 16
MASK_SHOWN = 2  # characters of a token (of MIN_TOKEN_CHARS or more) a message may show


def mask_secret(secret: str) -> str:
    """How a token may appear in any message: at most its first 2 characters (none of a
    token shorter than ``MIN_TOKEN_CHARS``) and its length."""
    shown = secret[:MASK_SHOWN] if len(secret) >= MIN_TOKEN_CHARS else ""
    return f"{shown}…({len(secret)} chars)"


def parse_hello(line: bytes) -> bytes | None:
    """The token of a viewer's hello line ``{"token": "..."}``, or None for anything else.

    Read before the viewer is trusted, so it must not be crashable: the line is capped by
    the caller, and nesting is refused before the JSON parser sees it (a line of 3000
    ``[`` made ``json.loads`` raise RecursionError and took the whole server down).
    """
    if len(line) > HELLO_MAX or line.count(b"{") + line.count(b"[") > 1:
        return None
    try:
        obj = json.loads(line)
    except Exception:
        return None
    token = obj.get("token") if isinstance(obj, dict) else None
    if not isinstance(token, str):
        return None
    try:
        return token.encode()
    except UnicodeEncodeError:  # "\ud800": JSON allows a lone surrogate, UTF-8 does not
        return None


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (127.0.0.0/8, ::1, localhost)."""
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
