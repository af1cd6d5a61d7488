"""Who may open ``dltop serve``'s page: the token, the session cookie and the request checks.

Kept apart from the web server so that every decision is a plain function over strings
(tested without a browser) and so that ``dltop export`` can share the bind-address rules.

The model is the live socket's (docs/live.md, "Tokens"): loopback needs no token unless
``$DLTOP_TOKEN`` is set; any other address always needs one, from ``$DLTOP_TOKEN`` or
generated and written to a 0600 file in the private run directory, never printed whole.
A browser cannot send a header with its first request, so the token travels once in the
address (``/?token=...``), is exchanged for a random session cookie (HttpOnly,
SameSite=Strict, named per port) and the page is redirected to an address without it: the
token does not stay in the address bar, the history or a screenshot, and the cookie is
worthless to another server. Without a token (loopback), the ``Host`` and ``Origin``
headers are checked instead: a web page elsewhere in the same browser may open a
WebSocket to ``127.0.0.1`` (browsers apply no same-origin rule to WebSockets), and a DNS
rebinding page reaches loopback under its own host name.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ..probe.viewerauth import is_loopback, mask_secret

TOKEN_ENV = "DLTOP_TOKEN"
MAX_SESSIONS = 256  # cookies handed out and remembered; the oldest is forgotten first
SESSION_TTL = 7 * 24 * 3600.0  # seconds a session cookie stays valid


class BindError(ValueError):
    """A bind address or token setting that cannot be served; one line with a hint."""


def parse_bind(spec: str, default_port: int) -> tuple[str, int]:
    """``HOST:PORT``, ``HOST``, ``:PORT`` or ``[::1]:PORT`` to (host, port); the host
    defaults to 127.0.0.1. Raises :class:`BindError` with a hint."""
    text = spec.strip()
    hint = "use HOST:PORT, e.g. 127.0.0.1:8000, or [::1]:8000 for IPv6"
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise BindError(f"bad address {spec!r}: {hint}")
        port_text = rest[1:]
    elif text.count(":") > 1:  # a bare IPv6 address, no port
        host, port_text = text, ""
    else:
        host, _, port_text = text.partition(":")
    host = host or "127.0.0.1"
    if port_text and (not port_text.isdigit() or int(port_text) > 65535):
        raise BindError(f"bad port in {spec!r}: {hint}")
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise BindError(f"bad address {spec!r}: {hint}") from None
    return host, int(port_text) if port_text else default_port


def url_host(host: str) -> str:
    """``host`` as it stands in a URL (IPv6 in brackets)."""
    return f"[{host}]" if ":" in host else host


@dataclass(frozen=True)
class Token:
    """The page's token (``None``: none required) and where it came from."""

    value: str | None
    source: str = ""  # "env" ($DLTOP_TOKEN) or "generated"
    path: Path | None = None  # the 0600 file a generated one was written to


def choose_token(
    host: str, *, want: bool = False, refuse: bool = False, env: dict[str, str] | None = None
) -> Token:
    """The token policy. ``want`` (``--token``): require one even on loopback; ``refuse``
    (``--no-token``): require none, which only loopback allows. Raises :class:`BindError`."""
    environ = os.environ if env is None else env
    from_env = environ.get(TOKEN_ENV) or None
    if refuse:
        if not is_loopback(host):
            raise BindError(
                f"refusing to serve on {host} without a token (hint: drop --no-token and one is "
                "generated, or bind 127.0.0.1 and forward the port: ssh -L 8000:127.0.0.1:8000 HOST)"
            )
        return Token(None)
    if from_env is not None:
        return Token(from_env, "env")
    if want or not is_loopback(host):
        return Token(secrets.token_urlsafe(24), "generated")
    return Token(None)


def write_token_file(token: str, port: int, directory: Path | None = None) -> Path:
    """A generated token in a 0600 file of the private run directory (0700): how the person
    who started the server reads it without it ever reaching a terminal or a job log."""
    from ..probe.rendezvous import runtime_dir

    d = directory or runtime_dir()
    target = d / f"serve-{port}.token"
    try:
        target.unlink()  # a file left by an earlier server on this port: ours replaces it
    except FileNotFoundError:
        pass
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return target


def token_note(token: Token, url: str) -> str:
    """What the start line says of the token: never the token itself (see module doc)."""
    if token.value is None:
        return ""
    if token.source == "env":
        return (
            f" (token from ${TOKEN_ENV}: {mask_secret(token.value)}; open {url}?token=$DLTOP_TOKEN)"
        )
    if token.path is not None:
        return (
            f" (token {mask_secret(token.value)} in {token.path}; open "
            f"{url}?token=$(cat {token.path}), or pass --show-url to print it)"
        )
    return f" (generated token {mask_secret(token.value)}; pass --show-url to print it)"


def token_matches(given: str | None, token: str) -> bool:
    """Constant-time comparison: the time taken says nothing about how much was right."""
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


class Sessions:
    """Session ids handed out as cookies after a good token; at most ``MAX_SESSIONS``."""

    def __init__(self, limit: int = MAX_SESSIONS, ttl: float = SESSION_TTL) -> None:
        self.limit = limit
        self.ttl = ttl
        self._ids: OrderedDict[str, float] = OrderedDict()

    def new(self) -> str:
        sid = secrets.token_urlsafe(32)
        self._ids[sid] = time.monotonic()
        while len(self._ids) > self.limit:
            self._ids.popitem(last=False)
        return sid

    def valid(self, sid: str | None) -> bool:
        if not sid:
            return False
        for known, born in self._ids.items():  # constant time per id, whichever matches
            if hmac.compare_digest(known.encode(), sid.encode()):
                return time.monotonic() - born < self.ttl
        return False


def cookie_name(port: int) -> str:
    """Per port: browsers send a host's cookies to every port of it."""
    return f"dltop_session_{port}"


def host_is_loopback(host_header: str | None) -> bool:
    """Whether a request's ``Host`` names this machine (not a DNS-rebinding name)."""
    if not host_header:
        return False
    try:
        name = urlsplit(f"//{host_header}").hostname
    except ValueError:
        return False
    return name is not None and is_loopback(name)


def same_origin(origin: str | None, host_header: str | None) -> bool:
    """A browser's ``Origin`` names the server it talks to: a page of another site that
    opens a WebSocket here sends its own origin. No ``Origin`` (not a browser) passes."""
    if origin is None:
        return True
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and parts.netloc == (host_header or "")
