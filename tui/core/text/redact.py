"""A viewer's token never in what we print: error lines, titles, ``--json``, reports.

Why: ``dltop check "tcp://h:p?token=S"`` printed the whole address, token included, in its
error line (issue 29), and error lines end up in CI logs and shared terminals. A token is
a password: wherever an address (or anything a user typed that may hold one) is printed,
it goes through :func:`redact` first, and a masked token shows at most
``MASK_SHOWN`` (2) of its characters and its length, enough to tell two tokens apart.

A ``token=`` parameter is found as ``urllib`` reads it: its name percent-decoded and in
any case (``tok%65n=``, ``TOKEN=``), so no spelling that the address parser accepts
reaches a terminal. Standard library only: ``cli.py`` uses it before any command loads.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

MASK_SHOWN = 2  # characters of a token a message may show
MASK_MIN = 12  # a token shorter than this shows none (2 of 8 would be a quarter of it)

# a query parameter: its name, then its value up to the next parameter or the fragment
# (as ``parse_qs`` splits it), or a blank or quote (where a message goes on after it)
_PARAM = re.compile(r"([?&])([^=&#\s]{1,64})=([^&#\s'\"`]{0,4096})")


def mask_token(token: str) -> str:
    """``ab…(22 chars)``: at most ``MASK_SHOWN`` characters and the length."""
    shown = token[:MASK_SHOWN] if len(token) >= MASK_MIN else ""
    return f"{shown}…({len(token)} chars)"


def redact(text: str) -> str:
    """``text`` with the value of every ``token`` parameter masked (:func:`mask_token`)."""
    if "=" not in text:
        return text

    def one(m: re.Match[str]) -> str:
        if unquote(m.group(2)).strip().lower() != "token":
            return m.group(0)
        return f"{m.group(1)}{m.group(2)}={mask_token(unquote(m.group(3)))}"

    return _PARAM.sub(one, text)
