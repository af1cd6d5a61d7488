"""The web server behind ``dltop serve``: textual-serve's, with a guard in front.

textual-serve runs a Textual app as a subprocess per browser tab and relays its screen
and keys over a WebSocket; it has no notion of who may connect. Rather than a proxy on a
second port, the guard is an aiohttp middleware on textual-serve's own application (the
same process, one port): every request passes :mod:`dltop.tui.serve_auth`'s checks
first. Three more things are ours instead of textual-serve's, each for a reason:

- the page (``tui/data/serve/page.html``): textual-serve's loads a web font from a
  third-party site (a training cluster may have no Internet, and the viewer should not
  tell anyone who watches what), and it builds the WebSocket address from the bind
  address, which for ``0.0.0.0`` is no address a browser can reach: ours uses the
  address the browser itself asked for;
- the WebSocket handler: a cap on the viewers running at once (each is a ``dltop``
  process) and a registry so that stopping the server stops them all;
- the serving loop: no access log (a ``/?token=`` request line would print the
  token), the port actually bound reported (``:0`` picks a free one), SIGINT/SIGTERM
  stop it cleanly;
- aiohttp's own error log: a malformed request (a byte a URL may not hold) made it print
  a traceback holding the request line, a token attempt included, to the terminal
  ``dltop serve`` runs in. :class:`OneLineErrors` says it in one line, with no text from
  the request, and only the first few times.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import logging
import signal
import string
import sys
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from aiohttp import WSMsgType, web
from textual_serve.app_service import AppService
from textual_serve.server import Server

from .serve_auth import (
    Sessions,
    cookie_name,
    host_is_loopback,
    same_origin,
    token_matches,
)

MAX_VIEWERS = 8  # browser tabs served at once: each runs its own dltop process
ERRORS_SHOWN = 3  # aiohttp errors said on stderr, then one line saying the rest are not
STOP_WAIT = 3.0  # seconds a viewer gets to quit when the server stops, then it is killed
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _page() -> string.Template:
    text = resources.files("dltop.tui.data.serve").joinpath("page.html").read_text("utf-8")
    return string.Template(text)


def _int(text: str | None, default: int, low: int, high: int) -> int:
    try:
        return min(high, max(low, int(text or "")))
    except ValueError:
        return default


class DltopServer(Server):
    """textual-serve's server with a token guard, our page and a viewer cap."""

    def __init__(
        self,
        command: str,
        host: str,
        port: int,
        token: str | None,
        title: str = "dltop",
        max_viewers: int = MAX_VIEWERS,
    ) -> None:
        super().__init__(command, host=host, port=port, title=title)
        self.token = token
        self.max_viewers = max_viewers
        self.sessions = Sessions()
        self.refused = 0  # requests turned away by the guard (a wrong token, a foreign page)
        self.services: set[AppService] = set()
        self._page = _page()
        self._cookie = cookie_name(port)

    # -- the guard -----------------------------------------------------------------------
    @web.middleware
    async def guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Every request: right host and origin, then the token or its session cookie."""
        if self.token is None and not host_is_loopback(request.host):
            return self._refuse(403, "this server answers to a loopback address only")
        if not same_origin(request.headers.get("Origin"), request.host):
            return self._refuse(403, "requests from another site's page are refused")
        if self.token is not None:
            given = request.query.get("token")
            if given is not None:
                if not token_matches(given, self.token):
                    return self._refuse(
                        403, "wrong token (hint: the line `dltop serve` printed says where it is)"
                    )
                return self._exchange(request)
            if not self.sessions.valid(request.cookies.get(self._cookie)):
                return self._refuse(
                    401,
                    "this page needs its token: open it once as /?token=... "
                    "(the line `dltop serve` printed says where the token is)",
                )
        response = await handler(request)
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["X-Frame-Options"] = "DENY"  # no framing: keys typed in a frame
        response.headers["Content-Security-Policy"] = "frame-ancestors 'none'"
        return response

    def _refuse(self, status: int, why: str) -> web.Response:
        self.refused += 1
        return web.Response(status=status, text=f"dltop serve: {why}\n")

    def _exchange(self, request: web.Request) -> web.Response:
        """A good ``?token=``: a session cookie, and the same address without the token."""
        query = {k: v for k, v in request.query.items() if k != "token"}
        target = request.rel_url.with_query(query)
        response = web.Response(status=303, headers={"Location": str(target)})
        response.set_cookie(
            self._cookie,
            self.sessions.new(),
            httponly=True,
            samesite="Strict",
            secure=request.secure,
            path="/",
        )
        response.headers["Cache-Control"] = "no-store"
        return response

    # -- routes --------------------------------------------------------------------------
    async def _make_app(self) -> web.Application:
        app = web.Application(middlewares=[self.guard])
        app.add_routes(
            [
                web.get("/", self.handle_index, name="index"),
                web.get("/ws", self.handle_viewer, name="websocket"),
                web.get("/download/{key}", self.handle_download, name="download"),
                web.static("/static", self.statics_path, name="static"),
            ]
        )
        return app

    async def handle_index(self, request: web.Request) -> web.Response:
        scheme = "wss" if request.secure else "ws"
        page = self._page.substitute(
            title=html.escape(self.title),
            static="/static/",
            websocket_url=html.escape(f"{scheme}://{request.host}/ws"),
            font_size=_int(request.query.get("fontsize"), 16, 6, 48),
        )
        return web.Response(
            text=page, content_type="text/html", headers={"Cache-Control": "no-store"}
        )

    async def handle_viewer(self, request: web.Request) -> web.StreamResponse:
        """One browser tab: one ``dltop`` process, its screen out and its keys in."""
        if len(self.services) >= self.max_viewers:
            return self._refuse(503, f"{self.max_viewers} viewers already open (--max-viewers)")
        websocket = web.WebSocketResponse(heartbeat=15)
        width = _int(request.query.get("width"), 80, 20, 1000)
        height = _int(request.query.get("height"), 24, 10, 500)
        await websocket.prepare(request)

        async def close() -> None:
            await websocket.close()

        service = AppService(
            self.command,
            write_bytes=websocket.send_bytes,
            write_str=websocket.send_str,
            close=close,
            download_manager=self.download_manager,
            debug=False,
        )
        self.services.add(service)
        try:
            await service.start(width, height)
            await self._relay(websocket, service)
        except asyncio.CancelledError:
            await websocket.close()
        finally:
            await _stop(service)
            self.services.discard(service)
        return websocket

    async def _relay(self, websocket: web.WebSocketResponse, service: AppService) -> None:
        """The browser's messages to the app; anything malformed is dropped, one message."""
        async for message in websocket:
            if message.type != WSMsgType.TEXT:
                continue
            try:
                kind, *rest = json.loads(message.data)
                data: Any = rest[0] if rest else None
                if kind == "stdin" and isinstance(data, str):
                    await service.send_bytes(data.encode("utf-8"))
                elif kind == "resize" and isinstance(data, dict):
                    w = _int(str(data.get("width")), 80, 20, 1000)
                    h = _int(str(data.get("height")), 24, 10, 500)
                    await service.set_terminal_size(w, h)
                elif kind == "ping":
                    await websocket.send_json(["pong", data])
                elif kind == "blur":
                    await service.blur()
                elif kind == "focus":
                    await service.focus()
            except (ValueError, TypeError):
                continue

    # -- serving -------------------------------------------------------------------------
    async def run(self, started: Callable[[int], None]) -> None:
        """Serve until SIGINT or SIGTERM; ``started(port)`` once bound (OSError if it cannot)."""
        quiet_aiohttp_errors()
        runner = web.AppRunner(await self._make_app(), access_log=None, handle_signals=False)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self.port, reuse_address=True)
            await site.start()
            server = site._server
            sockets = getattr(server, "sockets", None) or []
            port = sockets[0].getsockname()[1] if sockets else self.port
            self._cookie = cookie_name(port)
            started(port)
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            await stop.wait()
        finally:
            await asyncio.gather(*(_stop(s) for s in list(self.services)))
            await runner.cleanup()


class OneLineErrors(logging.Handler):
    """aiohttp's server errors as one line each on stderr: the error's class and HTTP
    status, never its message (it quotes the request, which anyone who reaches the port
    writes) and never a traceback; the first ``ERRORS_SHOWN``, then one line that says
    further ones are not shown (a flood of bad requests must not flood the terminal)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        if self.count > ERRORS_SHOWN + 1:
            return
        if self.count > ERRORS_SHOWN:
            line = "dltop serve: more refused or failed requests; not shown"
        else:
            exc = record.exc_info[1] if record.exc_info else None
            what = type(exc).__name__ if exc is not None else "an error"
            code = getattr(exc, "status", None) or getattr(exc, "code", None)
            status = f"HTTP {code}, " if isinstance(code, int) else ""
            line = f"dltop serve: a request failed ({status}{what}); the server goes on"
        try:
            print(line, file=sys.stderr, flush=True)
        except Exception:  # a closed terminal must not stop the server
            pass


def quiet_aiohttp_errors() -> None:
    """Route aiohttp's server log through one :class:`OneLineErrors` (and nowhere else)."""
    log = logging.getLogger("aiohttp.server")
    if not any(isinstance(h, OneLineErrors) for h in log.handlers):
        log.addHandler(OneLineErrors())
    log.propagate = False


async def _stop(service: AppService) -> None:
    """Ask the viewer to quit; kill it when it does not within ``STOP_WAIT``."""
    try:
        await asyncio.wait_for(service.stop(), STOP_WAIT)
    except (TimeoutError, Exception):
        pass
    process = getattr(service, "_process", None)
    if process is not None and process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(process.wait(), STOP_WAIT)
