"""Who may open ``dltop serve``'s page: a real server, real HTTP requests, real refusals.

The browser test (``test_serve_browser.py``) shows the happy path in Chromium; here every
way in that must be closed is tried against a running ``dltop serve``: no token, a wrong
token, a forged cookie, a WebSocket opened by another site's page, a DNS-rebinding host
name, a network bind without a token.
"""

from __future__ import annotations

import http.client
import importlib.util
import os
import re
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from dltop.tui.serve_auth import (
    BindError,
    choose_token,
    host_is_loopback,
    parse_bind,
    same_origin,
)
from test_app_support import write_log

needs_web = pytest.mark.skipif(
    importlib.util.find_spec("textual_serve") is None,
    reason="needs textual-serve (pip install 'dltop-monitor[web]')",
)
WS_HEADERS = {
    "Connection": "Upgrade",
    "Upgrade": "websocket",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
}


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DLTOP_TOKEN"}
    env.update(extra)
    return env


@contextmanager
def serve(log: Path, *flags: str, env: dict[str, str] | None = None) -> Iterator[tuple[int, str]]:
    """A running ``dltop serve``: its port and what it printed on start."""
    cmd = [sys.executable, "-m", "dltop.tui", "serve", *flags, str(log)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env=env or _env())
    try:
        assert proc.stderr is not None
        text = proc.stderr.readline()
        more = proc.stderr.readline()
        while more.startswith("dltop serve: http"):  # --show-url's own line
            text += more
            more = proc.stderr.readline()
        port = re.search(r":(\d+)/ \(", text)
        assert port, text
        yield int(port.group(1)), text
    finally:
        proc.terminate()
        proc.wait(20)


def request(
    port: int, path: str, headers: dict[str, str] | None = None
) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path, headers=headers or {})
    response = conn.getresponse()
    response.read()
    conn.close()
    return response


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return write_log(tmp_path / "run.jsonl", "nan", 260)


@needs_web
def test_the_token_is_exchanged_once_for_a_cookie_and_required(log: Path) -> None:
    with serve(log, "--bind", "127.0.0.1:0", "--token") as (port, line):
        token = Path(re.search(r" in (\S+\.token);", line).group(1)).read_text().strip()  # type: ignore[union-attr]
        assert token not in line and "…(32 chars)" in line
        assert request(port, "/").status == 401
        assert request(port, "/static/js/textual.js").status == 401
        assert request(port, "/?token=" + "x" * len(token)).status == 403
        forged = {"Cookie": f"dltop_session_{port}={token}"}  # the token is no session id
        assert request(port, "/", forged).status == 401
        good = request(port, f"/?token={token}&fontsize=20")
        assert good.status == 303
        assert good.getheader("Location") == "/?fontsize=20"  # the token leaves the address
        cookie = good.getheader("Set-Cookie") or ""
        assert cookie.startswith(f"dltop_session_{port}=") and token not in cookie
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        session = {"Cookie": cookie.split(";")[0]}
        page = request(port, "/", session)
        assert page.status == 200 and page.getheader("X-Frame-Options") == "DENY"
        # another site's page in the same browser: the cookie goes along, the Origin tells
        evil = {**session, **WS_HEADERS, "Origin": "http://evil.example"}
        assert request(port, "/ws", evil).status == 403


@needs_web
def test_loopback_without_token_refuses_other_sites_and_rebound_names(log: Path) -> None:
    with serve(log, "--bind", "127.0.0.1:0") as (port, line):
        assert "token" not in line and "this machine only" in line
        assert request(port, "/").status == 200
        assert request(port, "/", {"Host": f"localhost:{port}"}).status == 200
        # DNS rebinding: a page of evil.example whose name now resolves to 127.0.0.1
        assert request(port, "/", {"Host": f"evil.example:{port}"}).status == 403
        other_site = {**WS_HEADERS, "Origin": "http://evil.example"}
        assert request(port, "/ws", other_site).status == 403


@needs_web
def test_dltop_token_in_the_environment_is_required_on_loopback_too(log: Path) -> None:
    secret = "s3cret-from-the-env-0123456789"
    with serve(log, "--bind", "127.0.0.1:0", env=_env(DLTOP_TOKEN=secret)) as (port, line):
        assert secret not in line and "$DLTOP_TOKEN" in line
        assert request(port, "/").status == 401
        assert request(port, f"/?token={secret}").status == 303


def _raw(port: int, data: bytes) -> bytes:
    """The status line the server answers ``data`` with (sent as is, not as a client
    library would let us)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        return sock.recv(4096).split(b"\r\n", 1)[0]


@needs_web
def test_a_malformed_request_is_one_line_without_its_text(log: Path) -> None:
    """A byte no URL may hold after ``?token=``: aiohttp refuses the request (400) and used
    to print a traceback quoting the request line, token attempt included. Now one line
    per error, the first few only, none of the request's text."""
    cmd = [sys.executable, "-m", "dltop.tui", "serve", "--bind", "127.0.0.1:0", "--token"]
    proc = subprocess.Popen([*cmd, str(log)], stderr=subprocess.PIPE, env=_env())
    try:
        assert proc.stderr is not None
        port = re.search(rb":(\d+)/ \(", proc.stderr.readline())
        assert port, "no port said"
        for _ in range(6):
            status = _raw(int(port.group(1)), b"GET /?token=SECRET\xff HTTP/1.1\r\nHost: x\r\n\r\n")
            assert status.startswith(b"HTTP/1.") and b" 400 " in status
        assert _raw(int(port.group(1)), b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").endswith(
            b"401 Unauthorized"
        )
    finally:
        proc.terminate()
        err = proc.communicate(timeout=20)[1].decode("utf-8", "replace")
    assert "Traceback" not in err and "SECRET" not in err
    said = [line for line in err.splitlines() if "request" in line]
    assert said == [
        *["dltop serve: a request failed (HTTP 400, InvalidURLError); the server goes on"] * 3,
        "dltop serve: more refused or failed requests; not shown",
    ], err


@needs_web
def test_a_network_bind_gets_a_generated_token_shown_only_on_request(log: Path) -> None:
    with serve(log, "--bind", "0.0.0.0:0") as (port, line):
        path = Path(re.search(r" in (\S+\.token);", line).group(1))  # type: ignore[union-attr]
        token = path.read_text().strip()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert token not in line and "reachable from the network" in line
        assert request(port, "/").status == 401
    assert not path.exists()  # removed with the server
    with serve(log, "--bind", "0.0.0.0:0", "--show-url") as (port, line):
        shown = re.search(r"\?token=([\w-]+)", line)
        assert shown and request(port, f"/?token={shown.group(1)}").status == 303


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dltop.tui", *args], capture_output=True, text=True, env=_env()
    )


def test_a_network_bind_without_a_token_is_refused(log: Path) -> None:
    out = _run("serve", "--bind", "0.0.0.0:8000", "--no-token", str(log))
    assert out.returncode == 3
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert "refusing to serve on 0.0.0.0 without a token (hint:" in out.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--bind", "127.0.0.1:99999"], "bad port"),
        (["--bind", "[::1"], "bad address"),
        (["--max-viewers", "0"], "at least 1"),
    ],
)
def test_bad_arguments_are_one_line(log: Path, args: list[str], said: str) -> None:
    out = _run("serve", *args, str(log))
    assert out.returncode == 3 and said in out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


def test_a_missing_source_is_said_before_serving(tmp_path: Path) -> None:
    out = _run("serve", "--bind", "127.0.0.1:0", str(tmp_path / "nope.jsonl"))
    assert out.returncode == 3 and "no such file" in out.stderr and "Traceback" not in out.stderr


def test_the_rules_of_the_guard() -> None:
    assert parse_bind(":9000", 1) == ("127.0.0.1", 9000)
    assert parse_bind("[::1]:9000", 1) == ("::1", 9000)
    assert parse_bind("0.0.0.0", 8000) == ("0.0.0.0", 8000)
    with pytest.raises(BindError):
        parse_bind("host:port", 1)
    assert host_is_loopback("127.0.0.1:8000") and host_is_loopback("[::1]:8000")
    assert host_is_loopback("localhost:8000")
    assert not host_is_loopback("evil.example:8000") and not host_is_loopback(None)
    assert same_origin(None, "x:1") and same_origin("http://x:1", "x:1")
    assert not same_origin("http://x:2", "x:1") and not same_origin("null", "x:1")
    assert choose_token("127.0.0.1", env={}).value is None
    assert choose_token("127.0.0.1", env={"DLTOP_TOKEN": "t"}).value == "t"
    assert choose_token("10.0.0.1", env={}).source == "generated"
    with pytest.raises(BindError):
        choose_token("10.0.0.1", refuse=True, env={"DLTOP_TOKEN": "t"})
