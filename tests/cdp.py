"""A headless Chromium driven over the DevTools protocol, for the browser tests.

Why not playwright or selenium: both download their own browser or driver, and neither
is needed for what the tests do (load a page, read what the terminal in it shows, press
keys, take a screenshot). Debian's ``chromium`` with ``--remote-debugging-port`` and a
WebSocket (aiohttp's client, already a dependency of textual-serve) is enough.

The page draws its terminal with xterm.js on a canvas, so the text is not in the DOM. A
script added before any of the page's own (``Page.addScriptToEvaluateOnNewDocument``)
catches the xterm ``Terminal`` when textual-serve's client stores it (``this.terminal =
new Terminal(...)``) and keeps it as ``window.__dltopTerm``; the tests read the rows of
its screen buffer, which is exactly what the canvas draws.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")

# textual-serve's client does `this.terminal = new v.Terminal(...)`: a setter on
# Object.prototype sees that assignment once, keeps the terminal and gets out of the way
HOOK = """
Object.defineProperty(Object.prototype, "terminal", {
  configurable: true,
  set(value) {
    window.__dltopTerm = value;
    Object.defineProperty(this, "terminal", {value, writable: true, configurable: true, enumerable: true});
  },
});
"""
SCREEN_JS = """(() => {
  const t = window.__dltopTerm;
  if (!t) return null;
  const b = t.buffer.active, rows = [];
  for (let y = 0; y < t.rows; y++) { const l = b.getLine(b.viewportY + y); rows.push(l ? l.translateToString(true) : ""); }
  return rows.join("\\n");
})()"""
# DevTools key events: (key, code, windowsVirtualKeyCode, text)
KEYS = {
    "escape": ("Escape", "Escape", 27, ""),
    "left": ("ArrowLeft", "ArrowLeft", 37, ""),
    "right": ("ArrowRight", "ArrowRight", 39, ""),
    "enter": ("Enter", "Enter", 13, "\r"),
    "question_mark": ("?", "Slash", 191, "?"),
}


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Browser:
    """One headless Chromium with a private profile; only loopback is reachable from it."""

    def __init__(self, binary: str, width: int = 1400, height: int = 900) -> None:
        self.profile = tempfile.mkdtemp(prefix="dltop-chromium-")
        self.port = _free_port()
        self.proc = subprocess.Popen(
            [
                binary, "--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--metrics-recording-only", "--no-default-browser-check",
                # every name but loopback fails to resolve: the page must need nothing else
                "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
                f"--remote-debugging-port={self.port}", f"--user-data-dir={self.profile}",
                f"--window-size={width},{height}", "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def page_ws(self, timeout: float = 30.0) -> str:
        end = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json", timeout=2) as r:
                    targets = json.load(r)
                pages = [t for t in targets if t.get("type") == "page"]
                if pages:
                    return str(pages[0]["webSocketDebuggerUrl"])
            except OSError:
                pass
            if time.monotonic() > end or self.proc.poll() is not None:
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.1)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


class Page:
    """A DevTools session on one page: calls, events kept for :meth:`wait_event`."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._next = 0
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: list[dict[str, Any]] = []
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            future = self._waiting.pop(data.get("id", -1), None)
            if future is not None:
                future.set_result(data)
            elif "method" in data:
                self.events.append(data)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._next += 1
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[self._next] = future
        await self.ws.send_json({"id": self._next, "method": method, "params": params})
        reply = await asyncio.wait_for(future, 30)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return dict(reply.get("result", {}))

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    async def screen(self) -> str:
        """The terminal's rows as text, or "" before the terminal exists."""
        return str(await self.evaluate(SCREEN_JS) or "")

    async def wait_screen(self, *needles: str, timeout: float = 60.0) -> str:
        """The screen once it shows every needle; the last screen seen when it never did."""
        end = time.monotonic() + timeout
        text = ""
        while time.monotonic() < end:
            text = await self.screen()
            if all(n in text for n in needles):
                return text
            await asyncio.sleep(0.25)
        return text

    async def press(self, key: str) -> None:
        """A real key press, as the keyboard sends it to the terminal (focused first, as
        a click into the page would)."""
        await self.evaluate("window.__dltopTerm && window.__dltopTerm.focus()")
        if key in KEYS:
            name, code, vk, text = KEYS[key]
        else:
            name, code, vk, text = key, f"Key{key.upper()}", ord(key.upper()), key
        down: dict[str, Any] = {"key": name, "code": code, "windowsVirtualKeyCode": vk}
        await self.call("Input.dispatchKeyEvent", type="keyDown", text=text, **down)
        await self.call("Input.dispatchKeyEvent", type="keyUp", **down)

    async def screenshot(self, path: Path) -> Path:
        shot = await self.call("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


async def open_page(browser: Browser, url: str, session: aiohttp.ClientSession) -> Page:
    ws = await session.ws_connect(browser.page_ws(), max_msg_size=0)
    page = Page(ws)
    await page.call("Page.enable")
    await page.call("Runtime.enable")
    await page.call("Page.addScriptToEvaluateOnNewDocument", source=HOOK)
    await page.call("Page.navigate", url=url)
    return page


def keep_artefact(path: Path) -> Path | None:
    """Copy a test's artefact to ``$DLTOP_TEST_ARTEFACTS`` when it is set."""
    target_dir = os.environ.get("DLTOP_TEST_ARTEFACTS")
    if not target_dir:
        return None
    os.makedirs(target_dir, exist_ok=True)
    return Path(shutil.copy2(path, Path(target_dir) / path.name))
