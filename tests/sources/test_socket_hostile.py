"""Authentication that cannot be crashed: hostile hellos against a real TCP server.

Before the fix one packet (``[`` x 3000) made ``json.loads`` raise RecursionError in the
server thread before authentication: TCP and Unix socket were gone for the rest of the
run. Each attack below runs while a good, authenticated viewer keeps receiving records;
after each the server thread is alive and a new good viewer is let in.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from dltop.probe.decoding import LineDecoder
from dltop.probe.encoding import encode_record
from dltop.probe.socket_server import SocketServer
from dltop.probe.viewerauth import HELLO_TIMEOUT, mask_secret, parse_hello
from dltop.tui.core.sources.socket_source import StreamError, parse_address, redact

TOKEN = "s3cret-token-for-tests"
META = encode_record({"kind": "meta", "v": 1, "run_id": "r1"})


def _step(i: int) -> bytes:
    return encode_record({"kind": "step", "step": i, "t": 1.0 + i, "loss": 1.0 / (i + 1)})


class Viewer:
    """A real authenticated TCP viewer, reading whatever arrives."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.sendall(json.dumps({"token": TOKEN}).encode() + b"\n")
        self.dec = LineDecoder()
        self.steps: list[int] = []

    def read_until(self, step: int, timeout: float = 10.0) -> bool:
        self.sock.settimeout(0.1)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.steps and self.steps[-1] >= step:
                return True
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                return False
            self.steps += [r["step"] for r in self.dec.feed(chunk) if r["kind"] == "step"]
        return bool(self.steps) and self.steps[-1] >= step


@pytest.fixture
def served() -> Iterator[tuple[SocketServer, int]]:
    server = SocketServer(None, tcp=("127.0.0.1", 0), token=TOKEN)
    server.start(META)
    yield server, server.bound_port  # type: ignore[misc]
    server.close()


def _raw(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def _send_close(payload: bytes) -> Callable[[int], None]:
    def attack(port: int) -> None:
        s = _raw(port)
        try:
            try:
                s.sendall(payload)
            except OSError:  # refused and closed before all of it was sent: fine
                return
            s.settimeout(HELLO_TIMEOUT + 3)
            try:
                while s.recv(65536):  # until the server closes this connection
                    pass
            except OSError:
                pass
        finally:
            s.close()

    return attack


def _slow(port: int) -> None:
    """One byte every 100 ms, never a newline: the hello timeout ends it."""
    s = _raw(port)
    try:
        deadline = time.monotonic() + HELLO_TIMEOUT + 2
        closed = False
        while time.monotonic() < deadline and not closed:
            try:
                s.sendall(b"{")
            except OSError:
                closed = True
            time.sleep(0.1)
        assert closed, "a never-ending hello is cut off"
    finally:
        s.close()


def _half_close(port: int) -> None:
    s = _raw(port)
    s.shutdown(socket.SHUT_WR)
    s.settimeout(5)
    try:
        assert s.recv(100) == b""
    except OSError:
        pass
    s.close()


def _connect_close(port: int) -> None:
    _raw(port).close()


ATTACKS: dict[str, Callable[[int], None]] = {
    "malformed json": _send_close(b'{"token": \n'),
    "deep brackets": _send_close(b"[" * 3000 + b"\n"),
    "deep token": _send_close(b'{"token": ' + b"[" * 3000 + b"\n"),
    "deep object": _send_close(b'{"a":' * 2000 + b"\n"),
    "10 MB, no newline": _send_close(b"A" * (10 << 20)),
    "wrong token": _send_close(json.dumps({"token": "wrong"}).encode() + b"\n"),
    "token not a string": _send_close(b'{"token": 12345}\n'),
    "random binary": _send_close(bytes(random.Random(1).randrange(256) for _ in range(5000))),
    "slow hello": _slow,
    "connect and close": _connect_close,
    "half close": _half_close,
}


def test_every_hostile_hello_closes_only_its_own_connection(served) -> None:
    server, port = served
    good = Viewer(port)
    step = 0
    server.write(_step(step))
    assert good.read_until(0)
    for name, attack in ATTACKS.items():
        attack(port)
        step += 1
        server.write(_step(step))
        assert good.read_until(step), f"after {name!r} the good viewer still receives"
        assert not server.dead and server.error is None, f"{name!r} killed the server"
        fresh = Viewer(port)
        server.write(_step(step + 1))
        step += 1
        assert fresh.read_until(step), f"after {name!r} a new good viewer is let in"
        fresh.sock.close()
    good.sock.close()


def test_an_unexpected_error_in_one_connection_drops_only_that_one(served) -> None:
    server, port = served
    good = Viewer(port)
    server.write(_step(0))
    assert good.read_until(0)
    real = server._on_readable
    victim = _raw(port)
    victim_fd = None

    def flaky(client) -> None:  # an unforeseen bug, for one connection only
        if client.sock.fileno() == victim_fd:
            raise RuntimeError("injected per-connection failure")
        real(client)

    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # accepted on the server's thread: wait for it
        waiting = [fd for fd, c in list(server._clients.items()) if not c.active]
        if waiting:
            break
        time.sleep(0.01)
    (victim_fd,) = waiting
    server._on_readable = flaky  # type: ignore[method-assign]
    victim.sendall(b'{"token": "x"}\n')
    victim.settimeout(5)
    try:
        assert victim.recv(100) == b"", "the failing connection is closed"
    except ConnectionResetError:
        pass  # closed with our hello unread: a reset, as good as a close
    server.write(_step(1))
    assert good.read_until(1) and not server.dead
    assert server.connection_errors == 1
    assert isinstance(server.first_connection_error, RuntimeError)


def test_parse_hello_is_total() -> None:
    assert parse_hello(b'{"token": "abc"}') == b"abc"
    lone_surrogate = b'{"token": "\\ud800"}'  # valid JSON; no UTF-8 text
    for bad in (
        b"[" * 3000,
        b'{"token": {"a": 1}}',
        b"{}",
        b"null",
        b"\xff\xfe",
        b'"abc"',
        lone_surrogate,
    ):
        assert parse_hello(bad) is None


def test_tokens_are_never_shown_whole() -> None:
    assert TOKEN not in mask_secret(TOKEN) and mask_secret(TOKEN).startswith(TOKEN[:2])
    assert not mask_secret(TOKEN).startswith(TOKEN[:3]), "at most 2 characters are shown"
    short = "abcdefghi"  # 4 of its 9 characters were shown
    assert mask_secret(short) == "…(9 chars)"
    assert TOKEN not in redact(f"tcp://127.0.0.1:7/?token={TOKEN}")
    with pytest.raises(StreamError) as err:
        parse_address(f"tcp://[::1:7?token={TOKEN}")
    assert TOKEN not in str(err.value)


SERVE = """
import sys, time
from dltop.probe import Probe
with Probe(path=sys.argv[1], tcp="127.0.0.1:0", system=False) as probe:
    for i in range(5):
        probe.step(loss=1.0)
"""


@pytest.mark.parametrize("from_env", [True, False])
def test_a_real_run_never_prints_its_token(tmp_path: Path, short_dir: Path, from_env: bool) -> None:
    env = {**os.environ, "XDG_RUNTIME_DIR": str(short_dir)}
    if from_env:
        env["DLTOP_TOKEN"] = TOKEN
    else:
        env.pop("DLTOP_TOKEN", None)
    log = tmp_path / "run.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", SERVE, str(log)],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout + done.stderr
    assert "serving this run on tcp://" in out
    assert TOKEN not in out and TOKEN not in log.read_text()
    # the hint never puts a token in the viewer's argv (``ps`` shows it to every user)
    assert "?token=" not in out and "token=$(" not in out
    if from_env:
        assert "token from $DLTOP_TOKEN" in out


def test_the_generated_tokens_hint_keeps_it_out_of_any_argv(
    short_dir: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """A generated token (any non-loopback bind) is in a 0600 file; the hint reads it
    into the viewer's environment. ``?token=$(cat FILE)`` put it in the viewer's argv,
    which ``ps`` shows to every local user. (The bind stays on loopback here: the test
    only makes the probe treat it as the public address it would generate a token for.)"""
    from dltop.probe import live

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(short_dir))
    monkeypatch.delenv("DLTOP_TOKEN", raising=False)
    monkeypatch.setattr(live, "is_loopback", lambda host: False)
    sink = live.LiveSink("hint.1", {"run_id": "hint"}, tcp="127.0.0.1:0", unix=True)
    try:
        token = sink.token
        assert token and len(token) >= 16
        err = capfd.readouterr().err
        assert token not in err and f"token {token[:2]}…({len(token)} chars) in" in err
        assert "?token=" not in err
        (path,) = short_dir.glob("dltop/*.token")
        assert f"view with: DLTOP_TOKEN=$(cat {path}) dltop tcp://HOST:PORT" in err
        assert path.read_text().strip() == token and (path.stat().st_mode & 0o077) == 0
    finally:
        sink.close()


def test_refusals_never_suggest_a_token_in_an_address(served) -> None:
    server, port = served
    bad = _raw(port)
    bad.sendall(b'{"token": "wrong"}\n')
    bad.settimeout(5)
    line = bad.recv(65536)
    bad.close()
    refusal = json.loads(line.split(b"\n", 1)[0])
    assert refusal["type"] == "refused" and "token" in refusal["message"]
    assert "?token=" not in refusal["message"] and "DLTOP_TOKEN" in refusal["message"]


def test_a_hostile_server_cannot_crash_or_hang_the_viewer() -> None:
    """The viewer side: a 'run' that answers with deep nesting, junk and a 20 MB line."""
    import threading

    from dltop.tui.core.sources.socket_source import SocketSource
    from dltop.tui.core.store.run import RunModel

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        try:
            conn.sendall(b"[" * 100_000 + b"\n" + b'{"kind": ' * 5000 + b"\n")
            conn.sendall(b"\x1b]52;c;AAAA\x07" * 1000 + b"\n")
            conn.sendall(b"x" * (20 << 20))  # a line with no end
            conn.sendall(b"\n" + META + _step(0))  # then a sane record
            time.sleep(1)
        except OSError:
            pass
        finally:
            conn.close()
            listener.close()

    threading.Thread(target=serve, daemon=True).start()
    model = RunModel("hostile")
    source = SocketSource(
        f"tcp://127.0.0.1:{port}", model, poll_interval=0.05, fallback_to_file=False
    )
    source.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and model.store.steps < 1:
            time.sleep(0.05)
        assert model.store.steps == 1, "the sane record after the junk still arrives"
        assert model.malformed >= 3, "the junk lines are counted, not fatal"
    finally:
        source.stop()
